//! Pods this instance created that the pod cache has not shown yet, and pods it deleted
//! that the cache still shows live: until the cache catches up, the VM's reconcile waits
//! for the created pod, and takes a deleted one for terminating — rather than decide from a
//! cache that is behind its own writes (and delete, or replace, the same pod again).
//!
//! An expectation ends on evidence only, never on a timer: the pod watch shows the pod
//! (added; for a deletion, terminating or gone), or a list of pods taken after the write
//! does not hold it (the watch re-listed).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::namespaced_name::NamespacedName;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::operator::watch_toolkit::cache_events::ListScope;

#[derive(Debug)]
struct Expected {
    pod: String,
    /// Lists of the VM's pods started before the create.
    lists_before: u64,
}

/// Lists of pods of one scope (a namespace, or all) started so far, and the number of the
/// last one completed.
#[derive(Debug, Default, Clone, Copy)]
struct Lists {
    started: u64,
    completed: u64,
}

/// A pod this instance deleted, by name and uid.
#[derive(Debug)]
struct Deleted {
    pod: String,
    uid: String,
    lists_before: u64,
}

#[derive(Debug, Default)]
struct State {
    expected: HashMap<NamespacedName, Expected>,
    deleted: HashMap<NamespacedName, Deleted>,
    lists: HashMap<ListScope, Lists>,
}

impl State {
    /// The lists that cover the pods of `vm`.
    fn lists_of(&self, vm: &NamespacedName) -> Lists {
        self.lists
            .iter()
            .find(|(scope, _)| scope.as_deref() == Some(vm.namespace.as_str()))
            .map(|(_, lists)| lists)
            .or_else(|| self.lists.get(&None))
            .copied()
            .unwrap_or_default()
    }
}

/// The pod created for each VM that the cache has not shown yet.
#[derive(Debug, Default)]
pub struct PodExpectations {
    state: Mutex<State>,
}

impl PodExpectations {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves a whole state: a panicking holder left a usable one.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `pod` was created for `vm`.
    pub fn expect(&self, vm: NamespacedName, pod: String) {
        let mut state = self.lock();
        let lists_before = state.lists_of(&vm).started;
        state.expected.insert(vm, Expected { pod, lists_before });
    }

    /// Forgets what was expected for `vm` (its pod was deleted).
    pub fn forget(&self, vm: &NamespacedName) {
        self.lock().expected.remove(vm);
    }

    /// Forgets everything about `vm`: it was deleted.
    pub fn forget_vm(&self, vm: &NamespacedName) {
        let mut state = self.lock();
        state.expected.remove(vm);
        state.deleted.remove(vm);
    }

    /// Whether nothing is expected or deleted for any VM.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        let state = self.lock();
        state.expected.is_empty() && state.deleted.is_empty()
    }

    /// The pod watch delivered `pod` of `vm`, added, changed or deleted; `ending`: it is
    /// terminating or gone.
    pub fn observed(&self, vm: &NamespacedName, pod: &str, ending: bool) {
        let mut state = self.lock();
        if state.expected.get(vm).is_some_and(|e| e.pod == pod) {
            state.expected.remove(vm);
        }
        if ending && state.deleted.get(vm).is_some_and(|d| d.pod == pod) {
            state.deleted.remove(vm);
        }
    }

    /// Records that `pod` (with `uid`) of `vm` was deleted.
    pub fn deleted(&self, vm: NamespacedName, pod: String, uid: String) {
        let mut state = self.lock();
        let lists_before = state.lists_of(&vm).started;
        state.deleted.insert(
            vm,
            Deleted {
                pod,
                uid,
                lists_before,
            },
        );
    }

    /// Marks, among `pods` (the cached pods of `vm`), the one this instance deleted as
    /// terminating while the cache still shows it live (`now` as its deletion time);
    /// forgets the deletion once the cache shows it ending, or a list taken after it has
    /// completed.
    pub fn mark_deleted(&self, vm: &NamespacedName, pods: &mut [Pod], now: &Time) {
        let mut state = self.lock();
        let Some(deleted) = state.deleted.get(vm) else {
            return;
        };
        let listed_after = state.lists_of(vm).completed > deleted.lists_before;
        let cached = pods
            .iter_mut()
            .find(|p| p.name_any() == deleted.pod && p.uid().as_deref() == Some(&deleted.uid));
        match cached {
            Some(pod) if pod.metadata.deletion_timestamp.is_none() && !listed_after => {
                pod.metadata.deletion_timestamp = Some(now.clone());
            }
            _ => {
                state.deleted.remove(vm);
            }
        }
    }

    /// A pod watch starts listing the pods of `scope` (again).
    pub fn list_started(&self, scope: ListScope) {
        self.lock().lists.entry(scope).or_default().started += 1;
    }

    /// The list of `scope` is complete (the cache now holds it).
    pub fn listed(&self, scope: ListScope) {
        let mut state = self.lock();
        let lists = state.lists.entry(scope).or_default();
        lists.completed = lists.started;
    }

    /// The pod created for `vm` that the cache has not shown yet, if any; forgets it once
    /// one of `pods` (the cached pods of the VM) is it, or once a list taken after the
    /// create has completed without it.
    pub fn pending(&self, vm: &NamespacedName, pods: &[&Pod]) -> Option<String> {
        let mut state = self.lock();
        let expected = state.expected.get(vm)?;
        let listed_after = state.lists_of(vm).completed > expected.lists_before;
        if listed_after || pods.iter().any(|p| p.name_any() == expected.pod) {
            state.expected.remove(vm);
            return None;
        }
        Some(expected.pod.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p
    }

    #[test]
    fn a_created_pod_is_awaited_until_the_cache_shows_it() {
        let expectations = PodExpectations::default();
        let vm = NamespacedName::new("dev", "vm");
        assert_eq!(expectations.pending(&vm, &[]), None);
        expectations.expect(vm.clone(), "vm-abc".into());
        assert_eq!(expectations.pending(&vm, &[]).as_deref(), Some("vm-abc"));
        assert_eq!(
            expectations.pending(&vm, &[&pod("other")]).as_deref(),
            Some("vm-abc")
        );
        assert_eq!(expectations.pending(&vm, &[&pod("vm-abc")]), None);
        // Seen once: forgotten.
        assert_eq!(expectations.pending(&vm, &[]), None);
    }

    #[test]
    fn only_evidence_ends_the_wait() {
        let expectations = PodExpectations::default();
        let vm = NamespacedName::new("dev", "vm");
        // Deleted by this operator.
        expectations.expect(vm.clone(), "vm-abc".into());
        expectations.forget(&vm);
        assert_eq!(expectations.pending(&vm, &[]), None);
        // Delivered by the watch (even if deleted again before a reconcile saw it).
        expectations.expect(vm.clone(), "vm-abc".into());
        expectations.observed(&vm, "vm-other", false);
        assert!(expectations.pending(&vm, &[]).is_some());
        expectations.observed(&vm, "vm-abc", false);
        assert_eq!(expectations.pending(&vm, &[]), None);
        // A re-list that started before the create proves nothing; one that started after
        // and completed without the pod does — of the VM's namespace, or of all.
        for (scope, other) in [
            (Some("dev".to_string()), Some("prod".to_string())),
            (None, Some("prod".to_string())),
        ] {
            let expectations = PodExpectations::default();
            expectations.list_started(scope.clone());
            expectations.expect(vm.clone(), "vm-abc".into());
            expectations.listed(scope.clone());
            assert!(expectations.pending(&vm, &[]).is_some());
            expectations.list_started(other.clone());
            expectations.listed(other.clone());
            assert!(expectations.pending(&vm, &[]).is_some());
            expectations.list_started(scope.clone());
            assert!(expectations.pending(&vm, &[]).is_some());
            expectations.listed(scope);
            assert_eq!(expectations.pending(&vm, &[]), None);
        }
    }

    #[test]
    fn a_deleted_pod_the_cache_still_shows_live_is_taken_for_terminating() {
        let expectations = PodExpectations::default();
        let vm = NamespacedName::new("dev", "vm");
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let live = || {
            let mut p = pod("vm-abc");
            p.metadata.uid = Some("u1".into());
            p
        };
        expectations.deleted(vm.clone(), "vm-abc".into(), "u1".into());
        let mut pods = vec![live()];
        expectations.mark_deleted(&vm, &mut pods, &now);
        assert_eq!(pods[0].metadata.deletion_timestamp, Some(now.clone()));
        // Another pod of that name (another uid) is not it.
        let mut other = vec![live()];
        other[0].metadata.uid = Some("u2".into());
        expectations.mark_deleted(&vm, &mut other, &now);
        assert_eq!(other[0].metadata.deletion_timestamp, None);
        // Evidence ends it: the watch shows it terminating (or gone).
        expectations.deleted(vm.clone(), "vm-abc".into(), "u1".into());
        expectations.observed(&vm, "vm-abc", false);
        let mut pods = vec![live()];
        expectations.mark_deleted(&vm, &mut pods, &now);
        assert!(
            pods[0].metadata.deletion_timestamp.is_some(),
            "a change is no evidence"
        );
        expectations.observed(&vm, "vm-abc", true);
        let mut pods = vec![live()];
        expectations.mark_deleted(&vm, &mut pods, &now);
        assert_eq!(pods[0].metadata.deletion_timestamp, None);
        // So does a list taken after the deletion.
        expectations.deleted(vm.clone(), "vm-abc".into(), "u1".into());
        expectations.list_started(Some("dev".into()));
        expectations.listed(Some("dev".into()));
        let mut pods = vec![live()];
        expectations.mark_deleted(&vm, &mut pods, &now);
        assert_eq!(pods[0].metadata.deletion_timestamp, None);
    }
}
