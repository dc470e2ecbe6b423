//! When the mapping statuses are due, and for which VMs: the VM reconciler and the VM watch
//! name the VMs whose counts may have changed, a change of the rules (`rule_changes`) says
//! that the rules did. The status writer takes them at its next pass.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::core::namespaced_name::NamespacedName;

/// The VMs named since the last pass (each once: at most one entry per VM), and the wake-up.
#[derive(Debug, Default)]
pub struct StatusDue {
    wake: Notify,
    vms: Mutex<HashSet<NamespacedName>>,
    /// NeonVM's VMs or their runner pods changed since the last pass.
    neonvm: AtomicBool,
}

impl StatusDue {
    fn named(&self) -> MutexGuard<'_, HashSet<NamespacedName>> {
        // The lock guards a set of names: a holder that panicked left a whole set.
        self.vms.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `vm`'s counts may have changed: it was reconciled, or deleted.
    pub fn vm(&self, vm: NamespacedName) {
        self.named().insert(vm);
        self.wake.notify_one();
    }

    /// The rules or the mappings changed (the pass compares the rule sets itself), or a
    /// pass is to be tried again.
    pub fn mappings(&self) {
        self.wake.notify_one();
    }

    /// NeonVM's VMs or their runner pods changed: the next pass counts them again.
    pub fn neonvm(&self) {
        self.neonvm.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Whether NeonVM's VMs changed since the last call.
    pub fn take_neonvm(&self) -> bool {
        self.neonvm.swap(false, Ordering::Relaxed)
    }

    /// Waits until a pass is due.
    pub async fn notified(&self) {
        self.wake.notified().await;
    }

    /// The VMs named since the last call.
    pub fn take(&self) -> HashSet<NamespacedName> {
        std::mem::take(&mut *self.named())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(name: &str) -> NamespacedName {
        NamespacedName {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn a_named_vm_wakes_the_pass_and_is_taken_once() {
        let due = StatusDue::default();
        due.vm(vm("a"));
        due.vm(vm("a"));
        due.vm(vm("b"));
        // The wake-up was stored: this returns at once.
        due.notified().await;
        assert_eq!(due.take(), HashSet::from([vm("a"), vm("b")]));
        assert!(due.take().is_empty());
        due.mappings();
        due.notified().await;
        assert!(due.take().is_empty());
    }
}
