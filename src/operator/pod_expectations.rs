//! Pods this instance created that the pod cache has not shown yet: until it does, the
//! VM's reconcile waits rather than decide from a cache that is behind its own writes.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::VirtualMachine;

/// How long a created pod may stay unseen by the cache before it is no longer waited for.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The pod created for each VM that the cache has not shown yet.
#[derive(Debug, Default)]
pub struct PodExpectations {
    expected: Mutex<HashMap<ObjectRef<VirtualMachine>, (String, Instant)>>,
}

impl PodExpectations {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectRef<VirtualMachine>, (String, Instant)>> {
        // Every update is a single insert or remove: a panicking holder left a whole map.
        self.expected.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `pod` was created for `vm`.
    pub fn expect(&self, vm: ObjectRef<VirtualMachine>, pod: String) {
        self.lock().insert(vm, (pod, Instant::now()));
    }

    /// Forgets what was expected for `vm` (its pod was deleted).
    pub fn forget(&self, vm: &ObjectRef<VirtualMachine>) {
        self.lock().remove(vm);
    }

    /// The pod created for `vm` that the cache has not shown yet, if any; forgets it once
    /// one of `pods` (the cached pods of the VM) is it.
    pub fn pending(&self, vm: &ObjectRef<VirtualMachine>, pods: &[&Pod]) -> Option<String> {
        self.pending_at(vm, pods, Instant::now())
    }

    fn pending_at(
        &self,
        vm: &ObjectRef<VirtualMachine>,
        pods: &[&Pod],
        now: Instant,
    ) -> Option<String> {
        let mut expected = self.lock();
        let (name, since) = expected.get(vm)?.clone();
        // Seen, or never going to be (created and deleted again before the cache caught up).
        if pods.iter().any(|p| p.name_any() == name)
            || now.saturating_duration_since(since) > EXPECTATION_TIMEOUT
        {
            expected.remove(vm);
            return None;
        }
        Some(name)
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
        let vm = ObjectRef::new("vm").within("dev");
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
    fn forgetting_and_expiry_end_the_wait() {
        let expectations = PodExpectations::default();
        let vm = ObjectRef::new("vm").within("dev");
        expectations.expect(vm.clone(), "vm-abc".into());
        expectations.forget(&vm);
        assert_eq!(expectations.pending(&vm, &[]), None);
        expectations.expect(vm.clone(), "vm-abc".into());
        let later = Instant::now() + EXPECTATION_TIMEOUT + Duration::from_secs(1);
        assert_eq!(expectations.pending_at(&vm, &[], later), None);
    }
}
