//! The rules in force: mapping, namespace and local registry events are compiled into the
//! rule set the reconciles read ([`rules_in_force`]), the VMs whose images resolve
//! differently are queued, and every mapping's status is written. Reads the caches
//! (`watches`); calls the pure engine (`crate::rules`, `crate::rule_change`,
//! `crate::mapping_status`) and the VM queue (`vms::trigger`).

pub mod local_registry_watcher;
pub mod mapping_status_writer;
pub mod rules_in_force;
pub mod rules_watcher;
pub mod status_due;
