//! Pod creates the API server refused (quota, Pod Security admission, invalid fields), per
//! VM: what it said, and when to try again — 1 s after the first refusal, doubling up to
//! 5 minutes. A change of the VM's spec (a new generation) is tried at once.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::core::namespaced_name::NamespacedName;

use crate::core::api::VirtualMachine;
use crate::core::vm_plan::CreateFailure;

/// The wait after the first refusal.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
pub const MAX_RETRY: Duration = Duration::from_mins(5);

#[derive(Debug)]
struct Refused {
    generation: Option<i64>,
    message: String,
    attempts: u32,
    retry_at: Instant,
}

/// The last refused pod create of each VM, until a create succeeds.
#[derive(Debug, Default)]
pub struct CreateFailures {
    refused: Mutex<HashMap<NamespacedName, Refused>>,
}

/// The wait after `attempts` refusals in a row.
#[must_use]
pub fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

impl CreateFailures {
    fn lock(&self) -> MutexGuard<'_, HashMap<NamespacedName, Refused>> {
        // Every update is one insert or remove: a panicking holder left a whole map.
        self.refused.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The API server refused the pod of `vm` (at its current generation) with `message`;
    /// returns the wait before the next attempt.
    pub fn refused(&self, vm: &VirtualMachine, message: String, now: Instant) -> Duration {
        let mut refused = self.lock();
        let generation = vm.metadata.generation;
        let attempts = refused
            .get(&NamespacedName::of(vm))
            .filter(|r| r.generation == generation)
            .map_or(1, |r| r.attempts.saturating_add(1));
        let wait = backoff(attempts);
        refused.insert(
            NamespacedName::of(vm),
            Refused {
                generation,
                message,
                attempts,
                retry_at: now + wait,
            },
        );
        wait
    }

    /// A pod of `vm` was created.
    pub fn created(&self, vm: &NamespacedName) {
        self.lock().remove(vm);
    }

    /// The last refusal for `vm` at its current generation, and the wait left before the
    /// next attempt (`None`: try now).
    #[must_use]
    pub fn of(&self, vm: &VirtualMachine, now: Instant) -> Option<CreateFailure> {
        let refused = self.lock();
        let r = refused
            .get(&NamespacedName::of(vm))
            .filter(|r| r.generation == vm.metadata.generation)?;
        Some(CreateFailure {
            message: r.message.clone(),
            retry_in: r
                .retry_at
                .checked_duration_since(now)
                .filter(|d| !d.is_zero()),
        })
    }

    /// Forgets `vm` (deleted).
    pub fn forget(&self, vm: &NamespacedName) {
        self.lock().remove(vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(generation: i64) -> VirtualMachine {
        let mut vm = VirtualMachine::new("vm", crate::core::api::VirtualMachineSpec::default());
        vm.metadata.namespace = Some("dev".into());
        vm.metadata.generation = Some(generation);
        vm
    }

    #[test]
    fn the_wait_doubles_from_one_second_to_five_minutes() {
        let waits: Vec<u64> = (1..=11).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn a_refusal_holds_until_a_create_or_a_new_generation() {
        let failures = CreateFailures::default();
        let t0 = Instant::now();
        assert!(failures.of(&vm(1), t0).is_none());
        assert_eq!(failures.refused(&vm(1), "forbidden".into(), t0), backoff(1));
        let f = failures.of(&vm(1), t0).unwrap();
        assert_eq!(f.message, "forbidden");
        assert_eq!(f.retry_in, Some(Duration::from_secs(1)));
        // Time to try again; refused again: twice as long.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(failures.of(&vm(1), t1).unwrap().retry_in, None);
        assert_eq!(failures.refused(&vm(1), "forbidden".into(), t1), backoff(2));
        // A new spec is tried at once, and its refusals count from one.
        assert!(failures.of(&vm(2), t1).is_none());
        assert_eq!(failures.refused(&vm(2), "quota".into(), t1), backoff(1));
        failures.created(&NamespacedName::of(&vm(2)));
        assert!(failures.of(&vm(2), t1).is_none());
        failures.refused(&vm(2), "quota".into(), t1);
        failures.forget(&NamespacedName::of(&vm(2)));
        assert!(failures.of(&vm(2), t1).is_none());
    }
}
