//! What the leader keeps for live reload of workloads: the pods labelled
//! `imagemap.dev/live-reload: "true"` and the workloads (Deployments, ReplicaSets,
//! StatefulSets, DaemonSets) of the namespaces it acts in, each as the little it needs;
//! one listener is woken on every change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::core::namespaced_name::NamespacedName;
use crate::core::workload_reload::WorkloadKind;
use crate::core::workload_reload::live_pod::LivePod;
use crate::core::workload_reload::workload_status::WorkloadStatus;

/// The workloads' statuses, by kind and name.
type Workloads = HashMap<(WorkloadKind, NamespacedName), WorkloadStatus>;

#[derive(Debug, Default)]
struct Inner {
    pods: BTreeMap<NamespacedName, LivePod>,
    workloads: Workloads,
}

/// The labelled pods and the workloads.
#[derive(Debug, Default)]
pub struct WorkloadState {
    inner: Mutex<Inner>,
    /// Woken on every change.
    pub changed: Notify,
}

/// What a re-list of `namespace` (`None`: all) that `found` these keeps.
fn keeps<'a>(
    namespace: Option<&'a str>,
    found: &'a [NamespacedName],
) -> impl Fn(&NamespacedName) -> bool + 'a {
    let found: HashSet<&NamespacedName> = found.iter().collect();
    move |k| found.contains(k) || namespace.is_some_and(|ns| k.namespace != ns)
}

impl WorkloadState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the maps whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(&mut Inner)) {
        change(&mut self.lock());
        self.changed.notify_one();
    }

    /// Keeps (`Some`) or forgets (`None`) the pod `key`.
    pub fn pod(&self, key: NamespacedName, pod: Option<LivePod>) {
        self.update(|inner| match pod {
            Some(pod) => {
                inner.pods.insert(key, pod);
            }
            None => {
                inner.pods.remove(&key);
            }
        });
    }

    /// Keeps (`Some`) or forgets (`None`) the workload `key` of `kind`.
    pub fn workload(
        &self,
        kind: WorkloadKind,
        key: NamespacedName,
        status: Option<WorkloadStatus>,
    ) {
        self.update(|inner| match status {
            Some(status) => {
                inner.workloads.insert((kind, key), status);
            }
            None => {
                inner.workloads.remove(&(kind, key));
            }
        });
    }

    /// After a re-list of `namespace` (`None`: all): forgets the pods it did not find.
    pub fn retain_pods(&self, namespace: Option<&str>, found: &[NamespacedName]) {
        let keep = keeps(namespace, found);
        self.update(|inner| inner.pods.retain(|k, _| keep(k)));
    }

    /// After a re-list of `kind` in `namespace` (`None`: all): forgets the workloads it did
    /// not find.
    pub fn retain_workloads(
        &self,
        kind: WorkloadKind,
        namespace: Option<&str>,
        found: &[NamespacedName],
    ) {
        let keep = keeps(namespace, found);
        self.update(|inner| {
            inner
                .workloads
                .retain(|(k, key), _| *k != kind || keep(key));
        });
    }

    /// A copy of the labelled pods.
    #[must_use]
    pub fn pods(&self) -> Vec<(NamespacedName, LivePod)> {
        let inner = self.lock();
        inner
            .pods
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect()
    }

    /// The status of the workload `key` of `kind`, if known.
    #[must_use]
    pub fn status(&self, kind: WorkloadKind, key: &NamespacedName) -> Option<WorkloadStatus> {
        self.lock().workloads.get(&(kind, key.clone())).cloned()
    }
}
