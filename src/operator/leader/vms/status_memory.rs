//! The statuses this operator wrote that the VM cache has not shown yet. A reconcile that
//! runs before the watch delivers the operator's own write would otherwise plan from the
//! older status and write the same status again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::namespaced_name::NamespacedName;

use crate::core::api::{VirtualMachine, VirtualMachineStatus};

/// A status written over the VM version `over`.
#[derive(Debug)]
struct Written {
    over: Option<String>,
    status: VirtualMachineStatus,
}

/// The last status written per VM, until the cache moves past the version it was written
/// over (evidence, not time: the resourceVersion).
#[derive(Debug, Default)]
pub struct StatusMemory {
    written: Mutex<HashMap<NamespacedName, Written>>,
}

impl StatusMemory {
    fn lock(&self) -> MutexGuard<'_, HashMap<NamespacedName, Written>> {
        // Every update is one insert or remove: a panicking holder left a whole map.
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `vm` as this operator last knew it: the cached object, with the status written over
    /// its version when the cache has not shown that write yet.
    pub fn latest<'a>(&self, vm: &'a VirtualMachine) -> Cow<'a, VirtualMachine> {
        let key = NamespacedName::of(vm);
        let mut written = self.lock();
        match written.get(&key) {
            Some(w) if w.over == vm.metadata.resource_version => {
                let mut newer = vm.clone();
                newer.status = Some(w.status.clone());
                Cow::Owned(newer)
            }
            Some(_) => {
                // The cache moved on: it shows this write or a later change.
                written.remove(&key);
                Cow::Borrowed(vm)
            }
            None => Cow::Borrowed(vm),
        }
    }

    /// Forgets `vm` (deleted, perhaps before the cache showed the write).
    pub fn forget(&self, vm: &NamespacedName) {
        self.lock().remove(vm);
    }

    /// Records that `status` was written over `vm`'s version.
    pub fn wrote(&self, vm: &VirtualMachine, status: VirtualMachineStatus) {
        self.lock().insert(
            NamespacedName::of(vm),
            Written {
                over: vm.metadata.resource_version.clone(),
                status,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::api::VmPhase;
    use crate::core::fixtures::vm_with_disk;

    #[test]
    fn a_written_status_stands_until_the_cache_moves_past_it() {
        let memory = StatusMemory::default();
        let mut vm = vm_with_disk("vm", "disk:1");
        vm.metadata.resource_version = Some("10".into());
        assert!(matches!(memory.latest(&vm), Cow::Borrowed(_)));
        let status = VirtualMachineStatus {
            phase: Some(VmPhase::Running),
            ..VirtualMachineStatus::default()
        };
        memory.wrote(&vm, status.clone());
        // The cache still shows version 10: the written status stands.
        assert_eq!(memory.latest(&vm).status.as_ref(), Some(&status));
        // The cache shows a later version: it is the truth, and the record goes.
        vm.metadata.resource_version = Some("11".into());
        assert_eq!(memory.latest(&vm).status, None);
        vm.metadata.resource_version = Some("10".into());
        assert_eq!(memory.latest(&vm).status, None);
    }
}
