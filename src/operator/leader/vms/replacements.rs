//! Replacement pods waiting for their VM's old pod to go: a liveReload replacement whose old
//! pod is still terminating when the reconcile deletes it waits here until the pod watch
//! shows that pod gone, and is then handed over to the replacement creator.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::namespaced_name::NamespacedName;

use crate::core::api::ResolvedImage;

/// A replacement pod, as little as builds it again from its VM: its name, the images and
/// the restart count it runs (a whole pod per VM of a fan-out would take megabytes).
#[derive(Debug, Clone)]
pub struct NewPod {
    pub name: String,
    pub images: Box<[ResolvedImage]>,
    pub restart_count: i32,
}

/// A replacement handed over: the VM and its new pod.
#[derive(Debug, Clone)]
pub struct Replacement {
    pub vm: NamespacedName,
    pub pod: NewPod,
}

/// Where a VM's replacement is.
#[derive(Debug)]
enum State {
    /// Waiting for the old pod (its name) to go.
    Waiting(String, NewPod),
    /// Handed over to the creator, which has not finished.
    HandedOver,
}

/// The replacements of the VMs, waiting or handed over. Exactly one of the pod watcher's
/// hand-over and the VM's reconcile creates a replacement: each takes it under one lock.
#[derive(Debug, Default)]
pub struct Replacements {
    by_vm: Mutex<HashMap<NamespacedName, State>>,
}

impl Replacements {
    fn lock(&self) -> MutexGuard<'_, HashMap<NamespacedName, State>> {
        // Every update is one insert or remove: a panicking holder left a whole map.
        self.by_vm.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `new` replaces `vm`'s pod `old` once `old` is gone.
    pub fn wait_for(&self, vm: NamespacedName, old: String, new: NewPod) {
        self.lock().insert(vm, State::Waiting(old, new));
    }

    /// The pod watch shows `vm`'s pod `gone` gone: the replacement waiting for it, if any,
    /// now handed over.
    pub fn take_when_gone(&self, vm: &NamespacedName, gone: &str) -> Option<Replacement> {
        let mut by_vm = self.lock();
        let state = by_vm.get_mut(vm)?;
        if !matches!(&*state, State::Waiting(old, _) if old == gone) {
            return None;
        }
        match std::mem::replace(state, State::HandedOver) {
            State::Waiting(_, pod) => Some(Replacement {
                vm: vm.clone(),
                pod,
            }),
            State::HandedOver => None,
        }
    }

    /// The creator finished with `vm`'s replacement (created, or refused).
    pub fn done(&self, vm: &NamespacedName) {
        self.lock().remove(vm);
    }

    /// A reconcile is about to create `vm`'s pod: whether it may — not while a replacement
    /// handed over is being created. A replacement still waiting is the reconcile's now.
    pub fn claim(&self, vm: &NamespacedName) -> bool {
        let mut by_vm = self.lock();
        match by_vm.get(vm) {
            Some(State::HandedOver) => false,
            Some(State::Waiting(..)) => {
                by_vm.remove(vm);
                true
            }
            None => true,
        }
    }

    /// Forgets `vm`'s replacement: a reconcile decided its pods since, or the VM is gone.
    pub fn forget(&self, vm: &NamespacedName) {
        self.lock().remove(vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_is_handed_over_once_and_only_for_its_old_pod() {
        let r = Replacements::default();
        let vm = NamespacedName::new("dev", "vm");
        let new = || NewPod {
            name: "vm-new".into(),
            images: Box::default(),
            restart_count: 0,
        };
        r.wait_for(vm.clone(), "vm-old".into(), new());
        assert!(r.take_when_gone(&vm, "vm-other").is_none());
        let handed = r.take_when_gone(&vm, "vm-old").expect("handed over");
        assert_eq!(handed.pod.name, "vm-new");
        assert!(r.take_when_gone(&vm, "vm-old").is_none(), "once");
        // Handed over: no reconcile creates it too, until the creator is done.
        assert!(!r.claim(&vm));
        r.done(&vm);
        assert!(r.claim(&vm));
        // Waiting: a reconcile that creates the pod first takes it; the watch finds none.
        r.wait_for(vm.clone(), "vm-old".into(), new());
        assert!(r.claim(&vm));
        assert!(r.take_when_gone(&vm, "vm-old").is_none());
        r.wait_for(vm.clone(), "vm-old".into(), new());
        r.forget(&vm);
        assert!(r.take_when_gone(&vm, "vm-old").is_none());
    }
}
