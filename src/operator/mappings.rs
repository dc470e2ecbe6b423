//! Mapping changes: recompile the rules, re-reconcile exactly the VMs whose resolution
//! changed, and keep every mapping's status current.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::{Context, FIELD_MANAGER};
use crate::api::{ClusterImageMapping, ImageMapping, ImageMappingStatus, VirtualMachine};
use crate::mapping_status::{self, MappingView, VmView};
use crate::rules::{MappingKey, Scope};

/// The cached VMs the operator acts on, with their namespaces' labels.
struct VmsInScope {
    vms: Vec<Arc<VirtualMachine>>,
    labels: BTreeMap<String, BTreeMap<String, String>>,
    none: BTreeMap<String, String>,
}

impl VmsInScope {
    fn read(ctx: &Context) -> VmsInScope {
        let vms: Vec<Arc<VirtualMachine>> = ctx
            .vms
            .state()
            .into_iter()
            .filter(|vm| ctx.in_scope(&vm.namespace().unwrap_or_default()))
            .collect();
        let labels = vms
            .iter()
            .filter_map(|vm| vm.namespace())
            .map(|ns| {
                let l = ctx.namespace_labels(&ns);
                (ns, l)
            })
            .collect();
        VmsInScope {
            vms,
            labels,
            none: BTreeMap::new(),
        }
    }

    fn views(&self) -> Vec<VmView<'_>> {
        self.vms
            .iter()
            .map(|vm| VmView {
                vm: vm.as_ref(),
                namespace_labels: vm
                    .namespace()
                    .and_then(|ns| self.labels.get(&ns))
                    .unwrap_or(&self.none),
            })
            .collect()
    }
}

/// Recompiles the rules from the caches and asks for a reconcile of every VM whose images
/// resolve differently under the new rules than under the last compiled ones — which also
/// covers mappings deleted or changed while a watch was down.
pub fn apply_rule_change(ctx: &Context, trigger: &UnboundedSender<ObjectRef<VirtualMachine>>) {
    let (old, new) = ctx.recompile();
    let scope = VmsInScope::read(ctx);
    let views = scope.views();
    let affected =
        mapping_status::affected_vms(&old, &new, views, &ctx.options.default_runner_image);
    tracing::debug!(
        affected = affected.len(),
        rules = new.len(),
        "rules recompiled"
    );
    for vm in affected {
        let _ = trigger.unbounded_send(ObjectRef::from_obj(vm));
    }
    ctx.mapping_status.notify_one();
}

/// Asks for a reconcile of every VM of a namespace (its labels changed).
pub fn apply_namespace_change(
    ctx: &Context,
    namespace: &str,
    trigger: &UnboundedSender<ObjectRef<VirtualMachine>>,
) {
    for vm in ctx.vms.state() {
        if vm.namespace().as_deref() == Some(namespace) {
            let _ = trigger.unbounded_send(ObjectRef::from_obj(vm.as_ref()));
        }
    }
}

fn now() -> Time {
    let secs = Timestamp::now().as_second();
    Time(Timestamp::from_second(secs).unwrap_or_else(|_| Timestamp::now()))
}

/// Keeps the status of every mapping current; writes only those that changed.
pub async fn status_loop(ctx: Arc<Context>) {
    loop {
        ctx.mapping_status.notified().await;
        // Coalesce a burst of VM reconciles into one pass.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Counting VMs from a cache that has not listed them would write wrong counts.
        // (The readiness future is polled, not awaited: it is re-checked on the next pass.)
        if !matches!(ctx.vms.wait_until_ready().now_or_never(), Some(Ok(()))) {
            ctx.mapping_status.notify_one();
            continue;
        }
        let covered = ctx.progress.status_pass_start();
        if let Err(e) = write_statuses(&ctx).await {
            tracing::warn!(error = %e, "writing mapping statuses");
            ctx.mapping_status.notify_one();
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        ctx.progress.status_pass_done(covered);
    }
}

async fn write_statuses(ctx: &Context) -> Result<(), kube::Error> {
    let rules = ctx.rules();
    let mappings = ctx.mappings.state();
    let cluster = ctx.cluster_mappings.state();
    let scope = VmsInScope::read(ctx);
    let views = scope.views();
    let mut list: Vec<MappingView> = mappings
        .iter()
        .filter(|m| ctx.in_scope(&m.namespace().unwrap_or_default()))
        .map(|m| MappingView {
            key: MappingKey {
                scope: Scope::Namespaced,
                namespace: m.namespace(),
                name: m.name_any(),
            },
            generation: m.metadata.generation,
            rule_count: m.spec.rules.len(),
            dry_run: m.spec.dry_run,
            previous: m.status.as_ref(),
        })
        .collect();
    // ClusterImageMapping statuses count VMs of every namespace: only an operator that acts
    // in all namespaces writes them.
    let cluster_wide = ctx.options.namespaces.is_empty();
    list.extend(
        cluster
            .iter()
            .filter(|_| cluster_wide)
            .map(|m| MappingView {
                key: MappingKey {
                    scope: Scope::Cluster,
                    namespace: None,
                    name: m.name_any(),
                },
                generation: m.metadata.generation,
                rule_count: m.spec.rules.len(),
                dry_run: m.spec.dry_run,
                previous: m.status.as_ref(),
            }),
    );
    let computed = mapping_status::mapping_statuses(
        &rules,
        &list,
        &views,
        &ctx.options.default_runner_image,
        &now(),
    );
    let conflicts = computed
        .values()
        .flat_map(|s| &s.rules)
        .filter(|r| {
            r.problem
                .as_deref()
                .is_some_and(|p| p.contains(" conflicts with "))
        })
        .count();
    ctx.progress.metrics.set_conflicts(conflicts);
    for view in &list {
        let Some(status) = computed.get(&view.key) else {
            continue;
        };
        if view.previous == Some(status) {
            continue;
        }
        match view.key.scope {
            Scope::Namespaced => {
                let ns = view.key.namespace.clone().unwrap_or_default();
                let api: Api<ImageMapping> = Api::namespaced(ctx.client.clone(), &ns);
                patch_status(&api, &view.key.name, status).await?;
            }
            Scope::Cluster => {
                let api: Api<ClusterImageMapping> = Api::all(ctx.client.clone());
                patch_status(&api, &view.key.name, status).await?;
            }
        }
    }
    Ok(())
}

async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    status: &ImageMappingStatus,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
