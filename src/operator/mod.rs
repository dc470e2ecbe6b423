//! `imagemap run`: the operator. VirtualMachines become runner pods with mapped images;
//! mapping changes re-reconcile exactly the VMs they affect.
//!
//! Every read comes from watch caches (reflectors); every write is a server-side apply
//! with one field manager, or a pod create/delete.

mod context;
pub mod health;
mod leader;
mod mappings;
pub mod metrics;
mod progress;
mod vm_reconciler;

use std::sync::Arc;

use std::time::Duration;

use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

pub use context::{Context, FIELD_MANAGER, Options};
pub use leader::{LeaderElection, run_elected};
pub use progress::Progress;
pub use vm_reconciler::ReconcileError;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::runner_pod::VM_LABEL;

/// Ends a background task when the operator future ends or is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Records each watch result for the liveness probe.
fn seen<T>(p: &Arc<Progress>) -> impl Fn(&Result<T, watcher::Error>) + use<T> {
    let p = Arc::clone(p);
    move |r| p.health.watch_result(r.is_ok())
}

enum Change {
    Rules,
    Namespace(String),
}

/// Runs the operator until the VirtualMachine controller stops (or the future is dropped).
pub async fn run(client: Client, options: Options) -> anyhow::Result<()> {
    run_with(
        client,
        options,
        Arc::new(Progress::default()),
        std::future::pending(),
    )
    .await
}

/// [`run`], reporting finished work to `progress`. When `shutdown` completes, no new
/// reconcile starts, the running ones finish, and the function returns.
pub async fn run_with(
    client: Client,
    options: Options,
    progress: Arc<Progress>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let cfg = watcher::Config::default;
    let (mapping_store, mapping_writer) = reflector::store::<ImageMapping>();
    let (cluster_store, cluster_writer) = reflector::store::<ClusterImageMapping>();
    let (ns_store, ns_writer) = reflector::store::<Namespace>();
    let (pod_store, pod_writer) = reflector::store::<Pod>();

    let mapping_events = watcher(Api::<ImageMapping>::all(client.clone()), cfg())
        .default_backoff()
        .inspect(seen(&progress))
        .reflect(mapping_writer)
        .touched_objects()
        .map(|_| Change::Rules)
        .boxed();
    let cluster_events = watcher(Api::<ClusterImageMapping>::all(client.clone()), cfg())
        .default_backoff()
        .inspect(seen(&progress))
        .reflect(cluster_writer)
        .touched_objects()
        .map(|_| Change::Rules)
        .boxed();
    let ns_events = watcher(Api::<Namespace>::all(client.clone()), cfg())
        .default_backoff()
        .inspect(seen(&progress))
        .reflect(ns_writer)
        .touched_objects()
        .map(|ns| match ns {
            Ok(ns) => Change::Namespace(ns.name_any()),
            Err(_) => Change::Rules,
        })
        .boxed();
    let pod_events = watcher(Api::<Pod>::all(client.clone()), cfg().labels(VM_LABEL))
        .default_backoff()
        .inspect(seen(&progress))
        .reflect(pod_writer)
        .touched_objects();

    let (trigger, triggers) = futures::channel::mpsc::unbounded::<ObjectRef<VirtualMachine>>();
    let controller = Controller::new(Api::<VirtualMachine>::all(client.clone()), cfg())
        .owns_stream(pod_events)
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown);
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
        progress,
    ));

    // The rule watcher must have listed every mapping and namespace before the first VM is
    // reconciled, or VMs would first get pods with unmapped images.
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let rules_ctx = Arc::clone(&ctx);
    let _rules_task = AbortOnDrop(tokio::spawn(async move {
        let mut changes = stream::select_all([mapping_events, cluster_events, ns_events]);
        let mut ready = Some(ready_tx);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let (vm_store, pod_store) = (rules_ctx.vms.clone(), rules_ctx.pods.clone());
        loop {
            tokio::select! {
                change = changes.next() => {
                    let Some(change) = change else { break };
                    if ready.is_none() {
                        match change {
                            Change::Rules => mappings::apply_rule_change(&rules_ctx, &trigger),
                            Change::Namespace(ns) => mappings::apply_namespace_change(&rules_ctx, &ns, &trigger),
                        }
                    }
                }
                _ = tick.tick() => {}
            }
            rules_ctx.progress.health.beat();
            let stores_ready = || {
                [
                    mapping_store.wait_until_ready().now_or_never(),
                    cluster_store.wait_until_ready().now_or_never(),
                    ns_store.wait_until_ready().now_or_never(),
                ]
                .iter()
                .all(|r| matches!(r, Some(Ok(()))))
            };
            let synced = ready.is_none()
                && [
                    vm_store.wait_until_ready().now_or_never(),
                    pod_store.wait_until_ready().now_or_never(),
                ]
                .iter()
                .all(|r| matches!(r, Some(Ok(()))));
            rules_ctx.progress.health.set_synced(synced);
            if ready.is_some() && stores_ready() {
                rules_ctx.recompile();
                rules_ctx.mapping_status.notify_one();
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
        }
    }));
    let _status_task = AbortOnDrop(tokio::spawn(mappings::status_loop(Arc::clone(&ctx))));
    let ctx_progress = Arc::clone(&ctx.progress);
    ready_rx.await?;
    tracing::info!("mappings and namespaces listed; reconciling VirtualMachines");
    {
        controller
            .run(vm_reconciler::reconcile, vm_reconciler::error_policy, ctx)
            .for_each(|res| {
                let vm = match &res {
                    Ok((vm, _)) => Some(format!(
                        "{}/{}",
                        vm.namespace.as_deref().unwrap_or_default(),
                        vm.name
                    )),
                    Err(e) => {
                        tracing::debug!(error = %e, "reconcile");
                        None
                    }
                };
                ctx_progress.reconciled(vm);
                futures::future::ready(())
            })
            .await;
    }
    Ok(())
}
