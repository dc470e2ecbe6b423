//! What the VM controller remembers about each VM between reconciles, in one place: pods
//! created or deleted that the cache does not show yet, pod creates the API server refused,
//! statuses written that the cache does not show yet, and replacements waiting for an old
//! pod to go. All of it goes with the VM:
//! [`VmMemory::forget`] is called when the VM watch says the VM is gone.

use std::sync::Arc;

use crate::core::namespaced_name::NamespacedName;

use super::create_failures::CreateFailures;
use super::pod_expectations::PodExpectations;
use super::replacements::Replacements;
use super::status_memory::StatusMemory;

/// The VM controller's memory of each VM.
#[derive(Debug, Default)]
pub struct VmMemory {
    /// Pods created but not yet seen by the cache, and pods deleted that it still shows
    /// live (shared with the pod watcher, which observes them).
    pub expectations: Arc<PodExpectations>,
    /// Pod creates the API server refused, and when to try again.
    pub create_failures: CreateFailures,
    /// VM statuses written but not yet in the cache.
    pub statuses: StatusMemory,
    /// Replacement pods waiting for the old pod to go (shared with the pod watcher, which
    /// hands them over).
    pub replacements: Arc<Replacements>,
}

impl VmMemory {
    /// Forgets everything about `vm`: it was deleted.
    pub fn forget(&self, vm: &NamespacedName) {
        self.expectations.forget_vm(vm);
        self.create_failures.forget(vm);
        self.statuses.forget(vm);
        self.replacements.forget(vm);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::core::api::VirtualMachine;
    use crate::core::api::{VirtualMachineSpec, VirtualMachineStatus};

    #[test]
    fn forgetting_a_vm_forgets_all_it_left() {
        let memory = VmMemory::default();
        let mut vm = VirtualMachine::new("vm", VirtualMachineSpec::default());
        vm.metadata.namespace = Some("dev".into());
        vm.metadata.resource_version = Some("1".into());
        let key = NamespacedName::of(&vm);
        memory.expectations.expect(key.clone(), "vm-a".into());
        memory
            .expectations
            .deleted(key.clone(), "vm-old".into(), "uid".into());
        memory
            .create_failures
            .refused(&vm, "quota".into(), std::time::Instant::now());
        let status = VirtualMachineStatus {
            pod_name: Some("vm-a".into()),
            ..VirtualMachineStatus::default()
        };
        memory.statuses.wrote(&vm, status);
        assert!(memory.expectations.pending(&key, &[]).is_some());
        assert!(
            memory
                .create_failures
                .of(&vm, std::time::Instant::now())
                .is_some()
        );
        assert!(memory.statuses.latest(&vm).status.is_some());

        memory.forget(&key);
        let none: [&Pod; 0] = [];
        assert_eq!(memory.expectations.pending(&key, &none), None);
        assert!(memory.expectations.is_empty());
        assert!(
            memory
                .create_failures
                .of(&vm, std::time::Instant::now())
                .is_none()
        );
        assert!(memory.statuses.latest(&vm).status.is_none());
    }
}
