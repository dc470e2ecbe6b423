//! Runner pods: the VirtualMachine controller. Its queue ([`trigger`]), fed by rule changes
//! ([`rule_changes`]), the pod watcher and the tag follower; the reconcile
//! ([`vm_reconciler`]: observe, plan with `crate::core::vm_plan`, apply through the `writes`
//! room); the replacements handed over by the pod watcher ([`replacement_creator`]); and what
//! it remembers per VM between reconciles ([`vm_memory`]: pods created or deleted but not yet
//! seen, refused creates, statuses written but not yet cached — forgotten with the VM).

pub mod create_failures;
pub mod pod_expectations;
pub mod pod_watcher;
pub mod replacement_creator;
pub mod replacements;
pub mod rule_changes;
pub mod status_memory;
pub mod trigger;
pub mod vm_memory;
pub mod vm_reconciler;
