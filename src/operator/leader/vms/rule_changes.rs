//! What a change of the rules does on the write side: a reconcile of exactly the VMs whose
//! images resolve differently (or of a namespace's VMs, when what they resolve to may have
//! changed), the mapping statuses due, followed tags checked again when the local registry
//! moved, and a Warning Event on a local registry ConfigMap that cannot be used.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::core::api::VirtualMachine;
use crate::core::namespaced_name::NamespacedName;
use crate::core::rule_change;
use crate::operator::acts_in::ActsIn;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::leader::mapping_statuses::status_due::StatusDue;
use crate::operator::leader::vms::trigger::Trigger;
use crate::operator::replica::rule_watch::rules_changed::RulesChanged;
use crate::operator::replica::rule_watch::rules_in_force::RuleChange;
use crate::operator::replica::watches::caches::vms_in_scope;
use crate::operator::writes::event_recorder::EventRecorder;

/// The reason of the Warning Event on a local registry ConfigMap that cannot be used.
const LOCAL_REGISTRY_UNUSABLE: &str = "LocalRegistryUnusable";

/// What a rule change is acted on with.
pub struct RuleChanges {
    pub acts_in: ActsIn,
    /// `--default-runner-image`: what a VM without `runnerImage` runs.
    pub default_runner_image: String,
    /// The VMs, and the namespaces for their labels.
    pub vms: Store<VirtualMachine>,
    pub namespaces: Store<Namespace>,
    /// Checked again when the local registry moved.
    pub followed: Arc<FollowedTags>,
    pub status_due: Arc<StatusDue>,
    pub recorder: EventRecorder,
    pub trigger: Trigger,
}

/// Acts on each change told, until the rules watcher stops.
pub async fn run(ctx: RuleChanges, mut told: UnboundedReceiver<RulesChanged>) {
    while let Some(changed) = told.next().await {
        match changed {
            RulesChanged::Rules(change) => rules_changed(&ctx, &change),
            RulesChanged::LocalRegistry => {
                ctx.followed.check_all_now(Instant::now());
            }
            RulesChanged::LocalRegistryUnusable { message, object } => {
                ctx.recorder
                    .warn(object, LOCAL_REGISTRY_UNUSABLE, message)
                    .await;
            }
            RulesChanged::Namespace(ns) => namespace_changed(&ctx, &ns),
            RulesChanged::Everywhere => {
                for vm in ctx.vms.state() {
                    ctx.trigger.reconcile(&NamespacedName::of(vm.as_ref()));
                }
            }
        }
    }
}

/// Asks for a reconcile of every VM whose images resolve differently under the new rules
/// than under the old ones.
fn rules_changed(ctx: &RuleChanges, change: &RuleChange) {
    let scope = vms_in_scope(&ctx.vms, &ctx.namespaces, &ctx.acts_in);
    let affected = rule_change::affected_vms(
        &change.old,
        &change.new,
        scope.views(),
        &ctx.default_runner_image,
    );
    tracing::debug!(
        affected = affected.len(),
        rules = change.new.len(),
        "rules recompiled"
    );
    for vm in affected {
        ctx.trigger.reconcile(&NamespacedName::of(vm));
    }
    ctx.status_due.mappings();
}

/// Asks for a reconcile of every VM of a namespace.
fn namespace_changed(ctx: &RuleChanges, namespace: &str) {
    for vm in ctx.vms.state() {
        if vm.namespace().as_deref() == Some(namespace) {
            ctx.trigger.reconcile(&NamespacedName::of(vm.as_ref()));
        }
    }
}
