//! Runner pods by the VM that controls them, kept beside the pod cache so that finding a
//! VM's pods never scans every pod — and, for a VM left without pods, the last pod the watch
//! showed gone: the evidence that a pod its status names is not merely missing from a
//! label-selected cache.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::namespaced_name::NamespacedName;
use smallvec::SmallVec;

#[derive(Debug, Default)]
struct Index {
    /// Sorted; held in place for one pod, a VM's usual number (a set would take a node of
    /// eleven).
    by_vm: HashMap<NamespacedName, SmallVec<[String; 1]>>,
    /// VMs without pods: the name of the last one seen gone.
    gone: HashMap<NamespacedName, String>,
}

/// Pod names by controlling VM, following the pod cache.
#[derive(Debug, Default)]
pub struct PodIndex {
    index: Mutex<Index>,
}

impl PodIndex {
    fn lock(&self) -> MutexGuard<'_, Index> {
        // Every update leaves a whole index: a panicking holder left a usable one.
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `vm` controls the pod `name` (added or changed).
    pub fn insert(&self, vm: NamespacedName, name: String) {
        let mut index = self.lock();
        index.gone.remove(&vm);
        let names = index.by_vm.entry(vm).or_default();
        if let Err(at) = names.binary_search(&name) {
            names.insert(at, name);
        }
    }

    /// The pod `name` of `vm` is gone.
    pub fn remove(&self, vm: &NamespacedName, name: &str) {
        let mut index = self.lock();
        if let Some(names) = index.by_vm.get_mut(vm) {
            names.retain(|n| n.as_str() != name);
            if names.is_empty() {
                index.by_vm.remove(vm);
            }
        }
        if !index.by_vm.contains_key(vm) {
            index.gone.insert(vm.clone(), name.to_string());
        }
    }

    /// Whether the pod `name` of `vm` is known to be gone (the watch showed it go, or a
    /// look-up found none), while `vm` has no pod.
    #[must_use]
    pub fn known_gone(&self, vm: &NamespacedName, name: &str) -> bool {
        self.lock().gone.get(vm).is_some_and(|n| n == name)
    }

    /// Records that the pod `name` of `vm` is gone (a look-up found none of the VM's).
    pub fn mark_gone(&self, vm: &NamespacedName, name: &str) {
        let mut index = self.lock();
        if !index.by_vm.contains_key(vm) {
            index.gone.insert(vm.clone(), name.to_string());
        }
    }

    /// Forgets `vm` (deleted): the last pod seen gone with it.
    pub fn forget(&self, vm: &NamespacedName) {
        self.lock().gone.remove(vm);
    }

    /// The names of the pods `vm` controls.
    #[must_use]
    pub fn pods_of(&self, vm: &NamespacedName) -> Vec<String> {
        self.lock()
            .by_vm
            .get(vm)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(name: &str) -> NamespacedName {
        NamespacedName::new("dev", name)
    }

    #[test]
    fn pods_are_found_by_vm() {
        let index = PodIndex::default();
        index.insert(vm("a"), "a-2".into());
        index.insert(vm("a"), "a-1".into());
        index.insert(vm("b"), "b-1".into());
        index.insert(vm("a"), "a-1".into());
        assert_eq!(index.pods_of(&vm("a")), ["a-1", "a-2"]);
        index.remove(&vm("a"), "a-1");
        assert_eq!(index.pods_of(&vm("a")), ["a-2"]);
        index.remove(&vm("a"), "a-2");
        index.remove(&vm("c"), "c-1");
        assert!(index.pods_of(&vm("a")).is_empty() && index.lock().by_vm.len() == 1);
        assert_eq!(index.pods_of(&vm("b")), ["b-1"]);
    }

    #[test]
    fn the_last_pod_seen_gone_is_remembered_until_the_vm_has_a_pod_again() {
        let index = PodIndex::default();
        index.insert(vm("a"), "a-1".into());
        index.insert(vm("a"), "a-2".into());
        index.remove(&vm("a"), "a-1");
        assert!(!index.known_gone(&vm("a"), "a-1"), "the VM still has a pod");
        index.remove(&vm("a"), "a-2");
        assert!(index.known_gone(&vm("a"), "a-2"));
        assert!(!index.known_gone(&vm("a"), "a-3"));
        index.insert(vm("a"), "a-3".into());
        assert!(!index.known_gone(&vm("a"), "a-2"));
        index.remove(&vm("a"), "a-3");
        index.forget(&vm("a"));
        assert!(!index.known_gone(&vm("a"), "a-3"));
    }
}
