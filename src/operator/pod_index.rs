//! Runner pods by the VM that controls them, kept beside the pod cache so that finding a
//! VM's pods never scans every pod.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use super::cached_pod::CachedPod;
use super::pod_watcher::owner_vm;
use crate::api::VirtualMachine;

type ByVm = HashMap<ObjectRef<VirtualMachine>, BTreeSet<String>>;

/// Pod names by controlling VM, following the pod watch as the pod store does: a re-list
/// replaces the whole index when it is complete.
#[derive(Debug, Default)]
pub struct PodIndex {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_vm: ByVm,
    /// The index being rebuilt by a re-list.
    relisting: Option<ByVm>,
}

fn add(index: &mut ByVm, vm: ObjectRef<VirtualMachine>, pod: String) {
    index.entry(vm).or_default().insert(pod);
}

impl PodIndex {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves a whole index: a panicking holder left a usable one.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows one event of the pod watch (after the pod store took it).
    pub fn apply(&self, event: &Event<CachedPod>) {
        let mut state = self.lock();
        match event {
            Event::Apply(pod) => {
                if let Some(vm) = owner_vm(pod) {
                    add(&mut state.by_vm, vm, pod.name_any());
                }
            }
            Event::Delete(pod) => {
                if let Some(vm) = owner_vm(pod)
                    && let Some(names) = state.by_vm.get_mut(&vm)
                {
                    names.remove(&pod.name_any());
                    if names.is_empty() {
                        state.by_vm.remove(&vm);
                    }
                }
            }
            Event::Init => state.relisting = Some(ByVm::new()),
            Event::InitApply(pod) => {
                if let (Some(vm), Some(next)) = (owner_vm(pod), state.relisting.as_mut()) {
                    add(next, vm, pod.name_any());
                }
            }
            Event::InitDone => {
                if let Some(next) = state.relisting.take() {
                    state.by_vm = next;
                }
            }
        }
    }

    /// The names of the pods `vm` controls.
    #[must_use]
    pub fn pods_of(&self, vm: &ObjectRef<VirtualMachine>) -> Vec<String> {
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(name: &str, vm: &str) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("dev".into());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "imagemap.dev/v1alpha1".into(),
            kind: "VirtualMachine".into(),
            name: vm.into(),
            uid: format!("uid-{vm}"),
            controller: Some(true),
            ..Default::default()
        }]);
        p
    }

    #[test]
    fn pods_are_found_by_vm_and_a_relist_replaces_the_index() {
        let index = PodIndex::default();
        let vm = |name: &str| ObjectRef::<VirtualMachine>::new(name).within("dev");
        for event in [
            Event::Init,
            Event::InitApply(pod("a-1", "a")),
            Event::InitApply(pod("b-1", "b")),
            Event::InitDone,
            Event::Apply(pod("a-2", "a")),
        ] {
            index.apply(&event);
        }
        assert_eq!(index.pods_of(&vm("a")), ["a-1", "a-2"]);
        index.apply(&Event::Delete(pod("a-1", "a")));
        assert_eq!(index.pods_of(&vm("a")), ["a-2"]);
        // A re-list in progress keeps the old index; when done, it is the new one.
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(pod("c-1", "c")));
        assert_eq!(index.pods_of(&vm("b")), ["b-1"]);
        index.apply(&Event::InitDone);
        assert!(index.pods_of(&vm("a")).is_empty() && index.pods_of(&vm("b")).is_empty());
        assert_eq!(index.pods_of(&vm("c")), ["c-1"]);
        assert!(index.pods_of(&vm("other")).is_empty());
    }
}
