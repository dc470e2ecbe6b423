//! The pods' counts the mapping statuses show, shared by the rooms that see pods — the
//! mapped pods' watch (`tags::pod_followers`) and live reload (`workloads::workload_roller`)
//! — and the status writer, which is told when they change.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::core::mapping_status::{PodTally, ReloadCount};
use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::RuleRef;
use crate::operator::leader::mapping_statuses::status_due::StatusDue;

/// The tally, and whom to tell.
#[derive(Debug)]
pub struct PodCounts {
    tally: Mutex<PodTally>,
    due: Arc<StatusDue>,
}

impl PodCounts {
    #[must_use]
    pub fn new(due: Arc<StatusDue>) -> Self {
        PodCounts {
            tally: Mutex::default(),
            due,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PodTally> {
        // Each update leaves the sums whole.
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rules that decide the containers of `pod`, which admission mapped (`None`: gone).
    pub fn admitted(
        &self,
        pod: NamespacedName,
        rules: Option<std::collections::BTreeSet<RuleRef>>,
    ) {
        if self.lock().set_admitted(pod, rules) {
            self.due.mappings();
        }
    }

    /// What live reload says of each pod it sees now; the pods it no longer sees are
    /// forgotten.
    pub fn reloads(&self, seen: Vec<(NamespacedName, ReloadCount)>) {
        let mut tally = self.lock();
        let present: HashSet<&NamespacedName> = seen.iter().map(|(k, _)| k).collect();
        let gone: Vec<NamespacedName> = tally
            .reloaded_pods()
            .filter(|k| !present.contains(k))
            .cloned()
            .collect();
        let mut changed = false;
        for pod in gone {
            changed |= tally.set_reload(pod, None);
        }
        for (pod, count) in seen {
            changed |= tally.set_reload(pod, Some(count));
        }
        drop(tally);
        if changed {
            self.due.mappings();
        }
    }

    /// What a scan of `namespace` (`None`: all) found: the pods admission did not map, and
    /// the mappings that would change each.
    pub fn scanned(
        &self,
        namespace: Option<&str>,
        found: std::collections::HashMap<
            NamespacedName,
            std::collections::BTreeSet<crate::core::rules::MappingKey>,
        >,
    ) {
        if self.lock().set_scanned(namespace, found) {
            self.due.mappings();
        }
    }

    /// Reads the tally.
    pub fn with<R>(&self, read: impl FnOnce(&PodTally) -> R) -> R {
        read(&self.lock())
    }
}
