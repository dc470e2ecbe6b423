//! Mapping, namespace and local registry changes: recompile the rules, put them in force,
//! and tell what changed (`RulesChanged`) to whoever acts on it — which also covers
//! mappings deleted or changed while a watch was down.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;

use crate::core::local_registry;
use crate::core::rules::CompileOptions;
use crate::operator::acts_in::ActsIn;
use crate::operator::replica::rule_watch::local_registry_watcher::LocalRegistrySeen;
use crate::operator::replica::rule_watch::rules_changed::RulesChanged;
use crate::operator::replica::rule_watch::rules_in_force::{RuleChange, RulesInForce};
use crate::operator::replica::watches::caches::Caches;
use crate::operator::replica::watches::unreadable_mappings::Held;
use crate::operator::watch_toolkit::cache_events::CacheEvent;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::watch_toolkit::teller::Teller;
use crate::registry::Registries;

/// What a mapping or namespace watch event means for the VMs.
#[derive(Debug, Clone, PartialEq)]
pub enum RulesEvent {
    /// A mapping changed (or a watch re-listed): recompile.
    Rules,
    /// A namespace's labels may have changed: its VMs re-resolve.
    Namespace(String),
    /// What holds the VMs of a namespace (`None`: of all) changed: an unreadable mapping
    /// without a readable version came or went.
    Held(Held),
    /// The cluster's local registry was observed (`kube-public/local-registry-hosting`).
    LocalRegistry(LocalRegistrySeen),
}

impl RulesEvent {
    /// What an event of a mapping cache means. (A list's start and end mean nothing by
    /// themselves: what a list changed comes as applies and deletes.)
    pub fn of_mapping<K>(event: &CacheEvent<K>) -> Option<RulesEvent> {
        match event {
            CacheEvent::Applied(_) | CacheEvent::Deleted(_) => Some(RulesEvent::Rules),
            CacheEvent::ListStarted(_)
            | CacheEvent::Listed(_)
            | CacheEvent::Invalid(_)
            | CacheEvent::InvalidGone(_) => None,
        }
    }

    /// What an event of the namespace cache means.
    pub fn of_namespace(event: &CacheEvent<Namespace>) -> Option<RulesEvent> {
        match event {
            CacheEvent::Applied(ns) | CacheEvent::Deleted(ns) => {
                Some(RulesEvent::Namespace(ns.name_any()))
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
    /// The last observation of the local registry.
    local: Option<LocalRegistrySeen>,
}

impl Burst {
    fn add(&mut self, change: RulesEvent) {
        match change {
            RulesEvent::Rules => self.rules = true,
            RulesEvent::Namespace(ns) => {
                self.namespaces.insert(ns);
            }
            RulesEvent::Held(held) => {
                self.held.insert(held);
            }
            RulesEvent::LocalRegistry(observed) => self.local = Some(observed),
        }
    }
}

/// What the rules are compiled from and put in force in, and whom a change is told.
pub struct RulesWatcher {
    pub acts_in: ActsIn,
    /// How the rules compile (`--allowed-registries`), but for the local registry, which
    /// the watcher sets as the cluster advertises it.
    pub compile: CompileOptions,
    pub caches: Caches,
    pub rules: Arc<RulesInForce>,
    /// Holds the cluster's local registry in force.
    pub registries: Arc<Registries>,
    /// Where what changed is told.
    pub told: Teller<RulesChanged>,
}

impl RulesWatcher {
    fn tell(&self, changed: RulesChanged) {
        self.told.tell(changed);
    }

    /// Compiles the cached mappings and puts them in force.
    fn recompile(&self) -> RuleChange {
        let inputs = self.caches.mapping_inputs(&self.acts_in);
        let options = CompileOptions {
            local_registry: self.registries.local_registry(),
            ..self.compile.clone()
        };
        self.rules.recompile(&inputs, &options)
    }
}

/// Runs until `changes` ends. Once every mapping and namespace store has listed and the
/// local registry was observed, compiles the rules and marks `loaded`; from then on each
/// burst of changes is handled at once.
pub async fn run(ctx: RulesWatcher, mut changes: BoxStream<'static, RulesEvent>, loaded: Listed) {
    // The stores fill as `changes` is polled: poll it until all have listed.
    let listed = ctx.caches.listed.clone();
    let all_listed = futures::future::join3(
        listed.mappings.wait(),
        listed.cluster_mappings.wait(),
        listed.namespaces.wait(),
    );
    tokio::pin!(all_listed);
    let (mut listed_all, mut local_seen, mut local_failing) = (false, false, false);
    while !(listed_all && local_seen) {
        tokio::select! {
            _ = &mut all_listed, if !listed_all => listed_all = true,
            change = changes.next() => match change {
                None => return,
                Some(RulesEvent::LocalRegistry(observed)) => {
                    local_seen = true;
                    put_local_registry_in_force(&ctx, observed, &mut local_failing);
                }
                Some(_) => {}
            }
        }
    }
    let mut compiled = ctx.caches.mappings_fingerprint(&ctx.acts_in);
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
    loaded.mark();

    while let Some(first) = changes.next().await {
        let mut burst = Burst::default();
        burst.add(first);
        while let Some(Some(change)) = changes.next().now_or_never() {
            burst.add(change);
        }
        // A local registry put in force (or gone) renames what rules match and produce.
        let local_changed = match burst.local.take() {
            Some(observed) => put_local_registry_in_force(&ctx, observed, &mut local_failing),
            None => false,
        };
        if local_changed {
            ctx.tell(RulesChanged::Rules(ctx.recompile()));
            ctx.tell(RulesChanged::LocalRegistry);
        }
        // Only a change of what the rules are compiled from recompiles them: not a status
        // write (this operator's own included), not a re-list that found the same mappings.
        if burst.rules && !local_changed {
            let now = ctx.caches.mappings_fingerprint(&ctx.acts_in);
            if now != compiled {
                compiled = now;
                ctx.tell(RulesChanged::Rules(ctx.recompile()));
            }
        }
        for ns in &burst.namespaces {
            let now = ctx.caches.namespace_labels(ns);
            if labels.get(ns) != Some(&now) {
                labels.insert(ns.clone(), now);
                ctx.tell(RulesChanged::Namespace(ns.clone()));
            }
        }
        // VMs held by an unreadable mapping, or released: they say so (or act again).
        if burst.held.contains(&None) {
            ctx.tell(RulesChanged::Everywhere);
        } else {
            for ns in burst.held.iter().flatten() {
                ctx.tell(RulesChanged::Namespace(ns.clone()));
            }
        }
    }
}

/// Puts what was observed of the local registry in force; whether that changed it. An
/// unusable document puts none in force (said in the log, and told to become a Warning Event
/// on the ConfigMap); a failed read keeps what is (said once while it fails).
fn put_local_registry_in_force(
    ctx: &RulesWatcher,
    observed: LocalRegistrySeen,
    failing: &mut bool,
) -> bool {
    let configmap = format!("{}/{}", local_registry::NAMESPACE, local_registry::NAME);
    let registry = match observed {
        LocalRegistrySeen::Advertised(registry) => registry,
        LocalRegistrySeen::Unusable { why, object } => {
            let message = format!("{configmap}: {why}; no local registry is taken from it");
            tracing::warn!("{message}");
            ctx.tell(RulesChanged::LocalRegistryUnusable { message, object });
            None
        }
        LocalRegistrySeen::Unread(why) => {
            if !std::mem::replace(failing, true) {
                tracing::warn!(%configmap, "cannot read the cluster's local registry: {why}");
            }
            return false;
        }
    };
    *failing = false;
    let changed = ctx.registries.use_local_registry(registry.clone());
    if changed {
        if let Some(r) = &registry {
            tracing::info!(
                registry = r.name(),
                names = %r.names().collect::<Vec<_>>().join(", "),
                "the cluster's local registry is in force"
            );
        } else {
            tracing::info!(%configmap, "the cluster advertises no local registry");
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_one_recompile_and_each_namespace_once() {
        let mut burst = Burst::default();
        for change in [
            RulesEvent::Namespace("a".into()),
            RulesEvent::Rules,
            RulesEvent::Namespace("a".into()),
            RulesEvent::Rules,
        ] {
            burst.add(change);
        }
        assert!(burst.rules);
        assert_eq!(burst.namespaces.into_iter().collect::<Vec<_>>(), ["a"]);
    }
}
