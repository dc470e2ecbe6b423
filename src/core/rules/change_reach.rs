//! Which namespaces a change of rules reaches: the mappings added, removed or changed
//! between two rule sets, and whether one of them can apply in a namespace (its own
//! namespace for an ImageMapping; those its `namespaceSelector` selects for a
//! ClusterImageMapping). A change of what every rule compiles with (the allowed registries,
//! the local registry) reaches everywhere. Pure.

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};

use super::mapping_input::{MappingInput, MappingScope};
use super::rule_set::RuleSet;

/// Where one changed mapping can apply.
#[derive(Debug, Clone)]
pub enum MappingReach {
    /// An ImageMapping: its namespace.
    Namespace(String),
    /// A ClusterImageMapping: the namespaces its selector selects (`None`: all).
    Selected(Option<Selector>),
}

/// What a change of rules reaches.
#[derive(Debug, Clone)]
pub enum ChangeReach {
    Everywhere,
    Mappings(Vec<MappingReach>),
}

fn reaching(input: &MappingInput) -> MappingReach {
    match input.scope {
        MappingScope::Namespaced => {
            MappingReach::Namespace(input.namespace.clone().unwrap_or_default())
        }
        MappingScope::Cluster => MappingReach::Selected(
            input
                .namespace_selector
                .clone()
                .and_then(|s| Selector::try_from(s).ok())
                .filter(|s| !s.selects_all()),
        ),
    }
}

impl ChangeReach {
    /// What changed from `old` to `new`.
    #[must_use]
    pub fn of_change(old: &RuleSet, new: &RuleSet) -> ChangeReach {
        if old.allowed_registries != new.allowed_registries
            || old.local_registry != new.local_registry
            || old.follow_needs_list != new.follow_needs_list
        {
            return ChangeReach::Everywhere;
        }
        let mut changed = Vec::new();
        for (key, input) in &new.inputs {
            if old.inputs.get(key) != Some(input) {
                changed.push(reaching(input));
            }
        }
        for (key, input) in &old.inputs {
            if new.inputs.get(key) != Some(input) {
                changed.push(reaching(input));
            }
        }
        ChangeReach::Mappings(changed)
    }

    /// Whether the change reaches the namespace `namespace` labelled `labels`.
    #[must_use]
    pub fn reaches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            ChangeReach::Everywhere => true,
            ChangeReach::Mappings(changed) => changed.iter().any(|m| match m {
                MappingReach::Namespace(ns) => ns == namespace,
                MappingReach::Selected(None) => true,
                MappingReach::Selected(Some(selector)) => selector.matches(labels),
            }),
        }
    }

    /// Whether nothing changed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        matches!(self, ChangeReach::Mappings(changed) if changed.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::repository_mapping;
    use crate::core::rules::CompileOptions;

    fn labels(team: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("team".to_string(), team.to_string())])
    }

    #[test]
    fn a_change_reaches_its_mappings_namespaces_only() {
        let options = CompileOptions::default();
        let dev = repository_mapping("m", "nginx", "mirror.io/nginx", false);
        let old = RuleSet::compile(std::slice::from_ref(&dev), &options);
        // Unchanged: nothing reached.
        let same = RuleSet::compile(std::slice::from_ref(&dev), &options);
        assert!(ChangeReach::of_change(&old, &same).is_empty());
        // The ImageMapping changed: its namespace only.
        let changed = repository_mapping("m", "nginx", "mirror2.io/nginx", false);
        let new = RuleSet::compile(std::slice::from_ref(&changed), &options);
        let reach = ChangeReach::of_change(&old, &new);
        let namespace = dev.namespace.clone().unwrap_or_default();
        assert!(reach.reaches(&namespace, &labels("a")));
        assert!(!reach.reaches("elsewhere", &labels("a")));
        // A ClusterImageMapping selecting team=a reaches those namespaces.
        let mut cluster = repository_mapping("c", "redis", "mirror.io/redis", false);
        cluster.scope = MappingScope::Cluster;
        cluster.namespace = None;
        cluster.namespace_selector = Some(
            serde_json::from_value(serde_json::json!({"matchLabels": {"team": "a"}}))
                .unwrap_or_default(),
        );
        let with_cluster = RuleSet::compile(&[changed.clone(), cluster], &options);
        let reach = ChangeReach::of_change(&new, &with_cluster);
        assert!(reach.reaches("x", &labels("a")));
        assert!(!reach.reaches("y", &labels("b")));
        // Removing it reaches the same namespaces.
        let reach = ChangeReach::of_change(&with_cluster, &new);
        assert!(reach.reaches("x", &labels("a")) && !reach.reaches("y", &labels("b")));
    }
}
