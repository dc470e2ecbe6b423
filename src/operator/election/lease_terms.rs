//! What an election is held on: the Lease, this replica's identity, and the timing.

use std::time::Duration;

/// The timing of an election, as in Kubernetes' own controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long followers wait, after last seeing the Lease change, before taking it over.
    pub lease_duration: Duration,
    /// How long after sending its last successful renewal a leader keeps writing; shorter
    /// than `lease_duration`.
    pub renew_deadline: Duration,
    /// How often the Lease is read (followers) or renewed (the leader).
    pub retry_period: Duration,
}

impl LeaseTiming {
    /// The renew deadline at 2/3 of the duration and the retry period at 2/15 of it
    /// (Kubernetes' 15 s / 10 s / 2 s for a duration of 15 s).
    pub fn for_duration(lease_duration: Duration) -> LeaseTiming {
        LeaseTiming {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: lease_duration * 2 / 15,
        }
    }
}

/// A holder identity unique to this process: `base` (the pod name, else the host name)
/// and a random part, so that two replicas never share one — not even where both are pid 1
/// in their containers, or were given the same name.
pub fn unique_identity(base: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the operating system's randomness.
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(std::process::id());
    format!("{base}_{:016x}", random.finish())
}

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub lease_name: String,
    pub namespace: String,
    /// Unique per replica: the pod name in a cluster.
    pub identity: String,
    pub timing: LeaseTiming,
}
