//! Runner pods by the VM that controls them, kept beside the pod cache so that finding a
//! VM's pods never scans every pod.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kube::runtime::reflector::ObjectRef;

use crate::api::VirtualMachine;

/// Pod names by controlling VM, following the pod cache.
#[derive(Debug, Default)]
pub struct PodIndex {
    by_vm: Mutex<HashMap<ObjectRef<VirtualMachine>, BTreeSet<String>>>,
}

impl PodIndex {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectRef<VirtualMachine>, BTreeSet<String>>> {
        // Every update leaves a whole index: a panicking holder left a usable one.
        self.by_vm.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `vm` controls the pod `name` (added or changed).
    pub fn insert(&self, vm: ObjectRef<VirtualMachine>, name: String) {
        self.lock().entry(vm).or_default().insert(name);
    }

    /// The pod `name` of `vm` is gone.
    pub fn remove(&self, vm: &ObjectRef<VirtualMachine>, name: &str) {
        let mut by_vm = self.lock();
        if let Some(names) = by_vm.get_mut(vm) {
            names.remove(name);
            if names.is_empty() {
                by_vm.remove(vm);
            }
        }
    }

    /// The names of the pods `vm` controls.
    #[must_use]
    pub fn pods_of(&self, vm: &ObjectRef<VirtualMachine>) -> Vec<String> {
        self.lock()
            .get(vm)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_found_by_vm() {
        let index = PodIndex::default();
        let vm = |name: &str| ObjectRef::<VirtualMachine>::new(name).within("dev");
        index.insert(vm("a"), "a-2".into());
        index.insert(vm("a"), "a-1".into());
        index.insert(vm("b"), "b-1".into());
        index.insert(vm("a"), "a-1".into());
        assert_eq!(index.pods_of(&vm("a")), ["a-1", "a-2"]);
        index.remove(&vm("a"), "a-1");
        assert_eq!(index.pods_of(&vm("a")), ["a-2"]);
        index.remove(&vm("a"), "a-2");
        index.remove(&vm("c"), "c-1");
        assert!(index.pods_of(&vm("a")).is_empty() && index.lock().len() == 1);
        assert_eq!(index.pods_of(&vm("b")), ["b-1"]);
    }
}
