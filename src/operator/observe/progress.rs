//! How much work the operator has finished, as values callers can wait on (tests and
//! benchmarks): reconciles, the VMs reconciled, and what the mapping statuses cover.

use std::collections::BTreeSet;

use tokio::sync::watch;

use crate::core::namespaced_name::NamespacedName;

/// How much work the operator has finished.
#[derive(Debug)]
pub struct Progress {
    reconciles: watch::Sender<u64>,
    reconciled_vms: watch::Sender<BTreeSet<NamespacedName>>,
    status_covers: watch::Sender<u64>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            reconciles: watch::Sender::new(0),
            reconciled_vms: watch::Sender::new(BTreeSet::new()),
            status_covers: watch::Sender::new(0),
        }
    }
}

impl Progress {
    /// Finished VirtualMachine reconciles (successful or not).
    #[must_use]
    pub fn reconciles(&self) -> watch::Receiver<u64> {
        self.reconciles.subscribe()
    }

    /// `namespace/name` of every existing VirtualMachine reconciled at least once.
    #[must_use]
    pub fn reconciled_vms(&self) -> watch::Receiver<BTreeSet<NamespacedName>> {
        self.reconciled_vms.subscribe()
    }

    /// The number of reconciles that the last finished mapping-status pass took into
    /// account: once it reaches N, the statuses reflect the first N reconciles.
    #[must_use]
    pub fn status_covers(&self) -> watch::Receiver<u64> {
        self.status_covers.subscribe()
    }

    pub(crate) fn reconciled(&self, vm: Option<NamespacedName>) {
        self.reconciles.send_modify(|n| *n += 1);
        if let Some(vm) = vm {
            self.reconciled_vms.send_if_modified(|set| set.insert(vm));
        }
    }

    /// Forgets a VM that no longer exists, so the set stays as large as the cluster's.
    pub(crate) fn forget_vm(&self, vm: &NamespacedName) {
        self.reconciled_vms.send_if_modified(|set| set.remove(vm));
    }

    /// The reconcile count a status pass starts from.
    pub(crate) fn status_pass_start(&self) -> u64 {
        *self.reconciles.borrow()
    }

    pub(crate) fn status_pass_done(&self, covered: u64) {
        self.status_covers.send_modify(|n| *n = covered.max(*n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciled_vms_shrink_with_the_cluster() {
        let p = Progress::default();
        let vm = |name: &str| NamespacedName {
            namespace: "dev".into(),
            name: name.into(),
        };
        p.reconciled(Some(vm("a")));
        p.reconciled(Some(vm("b")));
        p.reconciled(None);
        assert_eq!(*p.reconciles().borrow(), 3);
        p.forget_vm(&vm("a"));
        assert_eq!(
            p.reconciled_vms().borrow().iter().collect::<Vec<_>>(),
            [&vm("b")]
        );
    }
}
