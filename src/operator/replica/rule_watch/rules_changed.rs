//! What changed in the rules, as the rules watcher tells it to whoever acts on it (on the
//! leader: the VM controller's rule change reactor).

use k8s_openapi::api::core::v1::ObjectReference;

use crate::operator::replica::rule_watch::rules_in_force::RuleChange;

/// What changed in the rules, as told to whoever acts on it.
#[derive(Debug)]
pub enum RulesChanged {
    /// The rules were compiled again: what they were, and are.
    Rules(RuleChange),
    /// The cluster's local registry in force changed: its tags are asked at another name,
    /// or at none.
    LocalRegistry,
    /// The local registry's ConfigMap cannot be used: why, and the ConfigMap.
    LocalRegistryUnusable {
        message: String,
        object: ObjectReference,
    },
    /// What a namespace's VMs resolve to may have changed (its labels, or an unreadable
    /// mapping holding it came or went).
    Namespace(String),
    /// An unreadable cluster-wide mapping came or went: every VM may resolve differently.
    Everywhere,
}
