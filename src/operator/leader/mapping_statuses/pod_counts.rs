//! The pods' counts the mapping statuses show, shared by the rooms that see pods — the
//! passes over the pods (`pod_census`) and live reload (`workloads::workload_roller`) — and
//! the status writer, which is told when they change.

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::core::mapping_status::{NamespacePods, PassScope, PodTally, ReloadCount};
use crate::core::namespaced_name::NamespacedName;
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

    /// What a pass over `scope` counted at `at`, per namespace.
    pub fn counted(&self, scope: PassScope<'_>, found: HashMap<String, NamespacePods>, at: Time) {
        if self.lock().set_counted(scope, found, at) {
            self.due.mappings();
        }
    }

    /// Reads the tally.
    pub fn with<R>(&self, read: impl FnOnce(&PodTally) -> R) -> R {
        read(&self.lock())
    }
}
