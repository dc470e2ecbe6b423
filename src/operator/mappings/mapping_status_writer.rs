//! Keeps every mapping's status current: computes them all from the caches, writes each
//! one that changed on its own, so that one refused write never holds back the others.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;

use crate::api::{ClusterImageMapping, ImageMapping};
use crate::conditions;
use crate::mapping_status::{self, MappingView};
use crate::namespaced_name::NamespacedName;
use crate::operator::context::Context;
use crate::operator::vms::writes::{Written, apply_status};
use crate::rules::{Mode, Scope};
use crate::vm_images::{Resolutions, VmView};
use crate::vm_plan;

/// How long a burst of VM reconciles is gathered into one status pass.
const COALESCE: Duration = Duration::from_millis(200);
/// Pause before a pass that follows a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Runs one status pass each time [`Context::mapping_status_due`] is notified.
pub async fn run(ctx: Arc<Context>) {
    // Counting VMs from caches that have not listed them would write wrong counts.
    let listed = ctx.caches.listed.clone();
    futures::future::join(listed.vms.wait(), listed.pods.wait()).await;
    let progress = Arc::clone(&ctx.observers.progress);
    loop {
        ctx.mapping_status_due.notified().await;
        tokio::time::sleep(COALESCE).await;
        let covered = progress.status_pass_start();
        let failed = write_statuses(&ctx).await;
        progress.status_pass_done(covered);
        if failed > 0 {
            ctx.mapping_status_due.notify_one();
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }
}

/// `namespace/name` of the VMs in scope whose pod waits for a restart.
fn awaiting_restart(ctx: &Context, vms: &[VmView<'_>]) -> BTreeSet<NamespacedName> {
    let rules = ctx.rules.current();
    let now = conditions::now();
    let mut live = Resolutions::new(&rules, &ctx.options.default_runner_image, Mode::Live);
    vms.iter()
        .filter(|v| !v.vm.spec.live_reload)
        .filter(|v| {
            let pods = ctx.caches.pods_of(v.vm);
            let pods: Vec<&Pod> = pods.iter().collect();
            vm_plan::awaits_restart(v.vm, &pods, live.of(**v), &now)
        })
        .map(|v| NamespacedName::of(v.vm))
        .collect()
}

/// Computes every status and writes those that changed; returns how many writes failed.
async fn write_statuses(ctx: &Context) -> usize {
    let rules = ctx.rules.current();
    let mappings = ctx.caches.mappings.state();
    let cluster = ctx.caches.cluster_mappings.state();
    let scope = ctx.caches.vms_in_scope(&ctx.options);
    let views = scope.views();
    let mut list: Vec<MappingView> = mappings
        .iter()
        .filter(|m| ctx.options.acts_in(&m.namespace().unwrap_or_default()))
        .map(|m| MappingView::from(m.as_ref()))
        .collect();
    // ClusterImageMapping statuses count VMs of every namespace: only an operator that acts
    // in all namespaces writes them.
    if ctx.options.cluster_wide() {
        list.extend(cluster.iter().map(|m| MappingView::from(m.as_ref())));
    }
    let computed = mapping_status::mapping_statuses(
        &rules,
        &list,
        &views,
        &awaiting_restart(ctx, &views),
        &ctx.options.default_runner_image,
        &|mapping, reference| ctx.followed.digest_for_mapping(mapping, reference),
        &conditions::now(),
    );
    ctx.observers
        .metrics
        .set_conflicts(computed.rules_in_conflict);
    let mut failed = 0;
    for m in &list {
        let Some(status) = computed.statuses.get(&m.key) else {
            continue;
        };
        let written = match m.key.scope {
            Scope::Namespaced => {
                let ns = m.key.namespace.as_deref().unwrap_or_default();
                let api: Api<ImageMapping> = Api::namespaced(ctx.client.clone(), ns);
                apply_status(&api, &m.key.name, m.previous, status).await
            }
            Scope::Cluster => {
                let api: Api<ClusterImageMapping> = Api::all(ctx.client.clone());
                apply_status(&api, &m.key.name, m.previous, status).await
            }
        };
        match written {
            Ok(Written::Changed | Written::Unchanged | Written::Gone) => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(mapping = %m.key, error = %crate::excerpt::excerpt(&e.to_string()), "writing mapping status");
            }
        }
    }
    failed
}
