//! Mapping and namespace changes: recompile the rules and ask for a reconcile of exactly
//! the VMs whose images resolve differently — which also covers mappings deleted or
//! changed while a watch was down.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use k8s_openapi::api::core::v1::Namespace;

use super::Context;
use super::cache_events::CacheEvent;
use super::trigger::Trigger;
use super::unreadable_mappings::Held;
use crate::rule_change;

/// What a mapping or namespace watch event means for the VMs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A mapping changed (or a watch re-listed): recompile.
    Rules,
    /// A namespace's labels may have changed: its VMs re-resolve.
    Namespace(String),
    /// What holds the VMs of a namespace (`None`: of all) changed: an unreadable mapping
    /// without a readable version came or went.
    Held(Held),
}

impl Change {
    /// What an event of a mapping cache means. (A list's start and end mean nothing by
    /// themselves: what a list changed comes as applies and deletes.)
    pub fn of_mapping<K>(event: &CacheEvent<K>) -> Option<Change> {
        match event {
            CacheEvent::Applied(_) | CacheEvent::Deleted(_) => Some(Change::Rules),
            CacheEvent::ListStarted(_)
            | CacheEvent::Listed(_)
            | CacheEvent::Invalid(_)
            | CacheEvent::InvalidGone(_) => None,
        }
    }

    /// What an event of the namespace cache means.
    pub fn of_namespace(event: &CacheEvent<Namespace>) -> Option<Change> {
        match event {
            CacheEvent::Applied(ns) | CacheEvent::Deleted(ns) => {
                Some(Change::Namespace(ns.name_any()))
            }
            CacheEvent::ListStarted(_)
            | CacheEvent::Listed(_)
            | CacheEvent::Invalid(_)
            | CacheEvent::InvalidGone(_) => None,
        }
    }
}

/// What a burst of changes amounts to.
#[derive(Debug, Default)]
struct Burst {
    rules: bool,
    namespaces: BTreeSet<String>,
    held: BTreeSet<Held>,
}

impl Burst {
    fn add(&mut self, change: Change) {
        match change {
            Change::Rules => self.rules = true,
            Change::Namespace(ns) => {
                self.namespaces.insert(ns);
            }
            Change::Held(held) => {
                self.held.insert(held);
            }
        }
    }
}

/// Runs until `changes` ends. Once every mapping and namespace store has listed, compiles
/// the rules and sends `ready`; from then on each burst of changes is handled at once.
pub async fn run(
    ctx: Arc<Context>,
    mut changes: BoxStream<'static, Change>,
    trigger: Trigger,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    // The stores fill as `changes` is polled: poll it until all have listed.
    let listed = ctx.caches.listed.clone();
    let all_listed = futures::future::join3(
        listed.mappings.wait(),
        listed.cluster_mappings.wait(),
        listed.namespaces.wait(),
    );
    tokio::pin!(all_listed);
    loop {
        tokio::select! {
            _ = &mut all_listed => break,
            change = changes.next() => {
                if change.is_none() {
                    return;
                }
            }
        }
    }
    let mut compiled = ctx.caches.mappings_fingerprint(&ctx.options);
    ctx.recompile();
    let mut labels: HashMap<String, BTreeMap<String, String>> = ctx
        .caches
        .namespaces
        .state()
        .iter()
        .map(|ns| {
            let name = ns.name_any();
            let l = ctx.caches.namespace_labels(&name);
            (name, l)
        })
        .collect();
    ctx.mapping_status_due.notify_one();
    let _ = ready.send(());

    while let Some(first) = changes.next().await {
        let mut burst = Burst::default();
        burst.add(first);
        while let Some(Some(change)) = changes.next().now_or_never() {
            burst.add(change);
        }
        // Only a change of what the rules are compiled from recompiles them: not a status
        // write (this operator's own included), not a re-list that found the same mappings.
        if burst.rules {
            let now = ctx.caches.mappings_fingerprint(&ctx.options);
            if now != compiled {
                compiled = now;
                apply_rule_change(&ctx, &trigger);
            }
        }
        for ns in &burst.namespaces {
            let now = ctx.caches.namespace_labels(ns);
            if labels.get(ns) != Some(&now) {
                labels.insert(ns.clone(), now);
                apply_namespace_change(&ctx, ns, &trigger);
            }
        }
        // VMs held by an unreadable mapping, or released: they say so (or act again).
        if burst.held.contains(&None) {
            for vm in ctx.caches.vms.state() {
                trigger.reconcile(ObjectRef::from_obj(vm.as_ref()));
            }
        } else {
            for ns in burst.held.iter().flatten() {
                apply_namespace_change(&ctx, ns, &trigger);
            }
        }
    }
}

/// Recompiles the rules from the caches and asks for a reconcile of every VM whose images
/// resolve differently under the new rules than under the last compiled ones.
fn apply_rule_change(ctx: &Context, trigger: &Trigger) {
    let change = ctx.recompile();
    let scope = ctx.caches.vms_in_scope(&ctx.options);
    let affected = rule_change::affected_vms(
        &change.old,
        &change.new,
        scope.views(),
        &ctx.options.default_runner_image,
    );
    tracing::debug!(
        affected = affected.len(),
        rules = change.new.len(),
        "rules recompiled"
    );
    for vm in affected {
        trigger.reconcile(ObjectRef::from_obj(vm));
    }
    ctx.mapping_status_due.notify_one();
}

/// Asks for a reconcile of every VM of a namespace.
fn apply_namespace_change(ctx: &Context, namespace: &str, trigger: &Trigger) {
    for vm in ctx.caches.vms.state() {
        if vm.namespace().as_deref() == Some(namespace) {
            trigger.reconcile(ObjectRef::from_obj(vm.as_ref()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_one_recompile_and_each_namespace_once() {
        let mut burst = Burst::default();
        for change in [
            Change::Namespace("a".into()),
            Change::Rules,
            Change::Namespace("a".into()),
            Change::Rules,
        ] {
            burst.add(change);
        }
        assert!(burst.rules);
        assert_eq!(burst.namespaces.into_iter().collect::<Vec<_>>(), ["a"]);
    }
}
