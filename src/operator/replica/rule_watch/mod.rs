//! The rules in force: mapping, namespace and local registry events ([`rules_watcher`]; the
//! local registry's ConfigMap watched by [`local_registry_watcher`]) are compiled into the
//! rule set every reader uses ([`rules_in_force`]), and what changed is told as
//! [`rules_changed::RulesChanged`] to whoever acts on it. Reads the caches (`watches`);
//! calls the pure engine (`crate::core::rules`).

pub mod local_registry_watcher;
pub mod rules_changed;
pub mod rules_in_force;
pub mod rules_watcher;
