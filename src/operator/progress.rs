//! Counters of the operator's work that callers can wait on (tests, and later metrics).

use tokio::sync::watch;

/// How much work the operator has finished.
#[derive(Debug)]
pub struct Progress {
    /// What the probes read.
    pub health: super::health::Health,
    /// What `/metrics` reports.
    pub metrics: super::metrics::Metrics,
    reconciles: watch::Sender<u64>,
    reconciled_vms: watch::Sender<std::collections::BTreeSet<String>>,
    status_covers: watch::Sender<u64>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            health: Default::default(),
            metrics: Default::default(),
            reconciles: watch::Sender::new(0),
            reconciled_vms: watch::Sender::new(Default::default()),
            status_covers: watch::Sender::new(0),
        }
    }
}

impl Progress {
    /// Finished VirtualMachine reconciles (successful or not).
    pub fn reconciles(&self) -> watch::Receiver<u64> {
        self.reconciles.subscribe()
    }

    /// `namespace/name` of every VirtualMachine reconciled at least once.
    pub fn reconciled_vms(&self) -> watch::Receiver<std::collections::BTreeSet<String>> {
        self.reconciled_vms.subscribe()
    }

    /// The number of reconciles that the last finished mapping-status pass took into
    /// account: once it reaches N, the statuses reflect the first N reconciles.
    pub fn status_covers(&self) -> watch::Receiver<u64> {
        self.status_covers.subscribe()
    }

    pub(crate) fn reconciled(&self, vm: Option<String>) {
        self.reconciles.send_modify(|n| *n += 1);
        if let Some(vm) = vm {
            self.reconciled_vms.send_if_modified(|set| set.insert(vm));
        }
    }

    /// The reconcile count a status pass starts from.
    pub(crate) fn status_pass_start(&self) -> u64 {
        *self.reconciles.borrow()
    }

    pub(crate) fn status_pass_done(&self, covered: u64) {
        self.status_covers.send_modify(|n| *n = covered.max(*n));
    }
}
