//! `imagemap run`: the operator. VirtualMachines become runner pods with mapped images;
//! mapping changes re-reconcile exactly the VMs they affect.
//!
//! Every read comes from watch caches (reflectors); every write is a server-side apply
//! with one field manager, or a pod create/delete.

mod context;
mod mappings;
mod vm_reconciler;

use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

pub use context::{Context, FIELD_MANAGER, Options};
pub use vm_reconciler::ReconcileError;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::runner_pod::VM_LABEL;

enum Change {
    Rules,
    Namespace(String),
}

/// Runs the operator until the VirtualMachine controller stops (or the future is dropped).
pub async fn run(client: Client, options: Options) -> anyhow::Result<()> {
    let cfg = watcher::Config::default;
    let (mapping_store, mapping_writer) = reflector::store::<ImageMapping>();
    let (cluster_store, cluster_writer) = reflector::store::<ClusterImageMapping>();
    let (ns_store, ns_writer) = reflector::store::<Namespace>();
    let (pod_store, pod_writer) = reflector::store::<Pod>();

    let mapping_events = watcher(Api::<ImageMapping>::all(client.clone()), cfg())
        .default_backoff()
        .reflect(mapping_writer)
        .touched_objects()
        .map(|_| Change::Rules)
        .boxed();
    let cluster_events = watcher(Api::<ClusterImageMapping>::all(client.clone()), cfg())
        .default_backoff()
        .reflect(cluster_writer)
        .touched_objects()
        .map(|_| Change::Rules)
        .boxed();
    let ns_events = watcher(Api::<Namespace>::all(client.clone()), cfg())
        .default_backoff()
        .reflect(ns_writer)
        .touched_objects()
        .map(|ns| match ns {
            Ok(ns) => Change::Namespace(ns.name_any()),
            Err(_) => Change::Rules,
        })
        .boxed();
    let pod_events = watcher(Api::<Pod>::all(client.clone()), cfg().labels(VM_LABEL))
        .default_backoff()
        .reflect(pod_writer)
        .touched_objects();

    let (trigger, triggers) = futures::channel::mpsc::unbounded::<ObjectRef<VirtualMachine>>();
    let controller = Controller::new(Api::<VirtualMachine>::all(client.clone()), cfg())
        .owns_stream(pod_events)
        .reconcile_on(triggers);
    let reporter = Reporter {
        controller: "imagemap".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        options,
        Recorder::new(client, reporter),
        controller.store(),
        pod_store,
        mapping_store.clone(),
        cluster_store.clone(),
        ns_store.clone(),
    ));

    // The rule watcher must have listed every mapping and namespace before the first VM is
    // reconciled, or VMs would first get pods with unmapped images.
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let rules_ctx = Arc::clone(&ctx);
    let rules_task = tokio::spawn(async move {
        let mut changes = stream::select_all([mapping_events, cluster_events, ns_events]);
        let mut ready = Some(ready_tx);
        loop {
            if ready.is_some() {
                let stores_ready = async {
                    let _ = mapping_store.wait_until_ready().await;
                    let _ = cluster_store.wait_until_ready().await;
                    let _ = ns_store.wait_until_ready().await;
                };
                tokio::select! {
                    change = changes.next() => if change.is_none() { break },
                    () = stores_ready => {
                        rules_ctx.recompile();
                        rules_ctx.mapping_status.notify_one();
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                }
                continue;
            }
            let Some(change) = changes.next().await else {
                break;
            };
            match change {
                Change::Rules => mappings::apply_rule_change(&rules_ctx, &trigger),
                Change::Namespace(ns) => {
                    mappings::apply_namespace_change(&rules_ctx, &ns, &trigger)
                }
            }
        }
    });
    let status_task = tokio::spawn(mappings::status_loop(Arc::clone(&ctx)));
    let result = async {
        ready_rx.await?;
        tracing::info!("mappings and namespaces listed; reconciling VirtualMachines");
        controller
            .run(vm_reconciler::reconcile, vm_reconciler::error_policy, ctx)
            .for_each(|res| async move {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "reconcile");
                }
            })
            .await;
        anyhow::Ok(())
    }
    .await;
    rules_task.abort();
    status_task.abort();
    result
}
