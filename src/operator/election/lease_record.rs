//! The Lease record as an elector reads it, and what to do next: pure decisions over what was
//! observed and when, measured on this process's own clock only (another process's clock —
//! the `renewTime` it wrote — is never compared with ours).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

/// The Lease as last read (or that there was none), and when this process first saw that
/// version of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSeen {
    /// `metadata.resourceVersion`: every renewal changes it. `None`: there is no Lease.
    pub version: Option<String>,
    /// `spec.holderIdentity`; `None` when empty (released).
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds` as the holder wrote it.
    pub lease_duration: Option<Duration>,
    /// When this process first read this version.
    pub seen_at: Instant,
}

impl LeaseSeen {
    /// What `lease` says (`None`: there is none), first seen at `now` unless `previous`
    /// is the same version (or also none).
    pub fn of(lease: Option<&Lease>, previous: Option<&LeaseSeen>, now: Instant) -> LeaseSeen {
        let Some(lease) = lease else {
            return LeaseSeen {
                version: None,
                holder: None,
                lease_duration: None,
                seen_at: match previous {
                    Some(p) if p.version.is_none() => p.seen_at,
                    _ => now,
                },
            };
        };
        let version = Some(lease.metadata.resource_version.clone().unwrap_or_default());
        let seen_at = match previous {
            Some(p) if p.version == version => p.seen_at,
            _ => now,
        };
        let spec = lease.spec.as_ref();
        LeaseSeen {
            version,
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            lease_duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
            seen_at,
        }
    }
}

/// What an elector does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectorStep {
    /// No Lease has existed for a whole lease duration as seen from here: create it, held
    /// by us. (A Lease deleted under a leader is taken no faster than one it stopped
    /// renewing: that leader may still be writing until its own deadline.)
    Create,
    /// No Lease exists, not yet for a whole lease duration.
    AwaitMissing,
    /// Write ourselves in as holder: the Lease is free, released, or its holder has not
    /// renewed it for a whole lease duration as seen from here.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds it and renewed it recently.
    Follow { holder: String },
}

/// The next step for `me`, given the Lease as last observed. `default_duration` applies
/// when the record names no duration (or there is no record).
pub fn next_step(o: &LeaseSeen, me: &str, now: Instant, default_duration: Duration) -> ElectorStep {
    if o.version.is_none() {
        return if now.saturating_duration_since(o.seen_at) >= default_duration {
            ElectorStep::Create
        } else {
            ElectorStep::AwaitMissing
        };
    }
    match &o.holder {
        None => ElectorStep::Acquire,
        Some(h) if h == me => ElectorStep::Renew,
        Some(h) => {
            let duration = o.lease_duration.unwrap_or(default_duration);
            if now.saturating_duration_since(o.seen_at) >= duration {
                ElectorStep::Acquire
            } else {
                ElectorStep::Follow { holder: h.clone() }
            }
        }
    }
}

/// The Lease `current` (or a new one named `name`) held by `me` from `at`: the holder,
/// the duration and the renewal time set; the acquire time and the transition count move
/// when the holder changes.
pub fn claimed(
    current: Option<&Lease>,
    name: &str,
    me: &str,
    duration: Duration,
    at: Timestamp,
) -> Lease {
    let mut lease = current.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let mut spec = lease.spec.take().unwrap_or_default();
    let was_held_by_me = spec.holder_identity.as_deref() == Some(me);
    if !was_held_by_me {
        spec.acquire_time = Some(MicroTime(at));
        if current.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        } else {
            spec.lease_transitions = Some(0);
        }
    }
    spec.holder_identity = Some(me.to_string());
    spec.lease_duration_seconds = Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(at));
    lease.spec = Some(spec);
    lease
}

/// `held` given up: no holder, so a follower acquires it at its next look instead of
/// waiting out the duration.
pub fn released(held: &Lease) -> Lease {
    let mut lease = held.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn lease(version: &str, holder: Option<&str>, secs: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: secs,
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_missing_lease_is_created_after_a_whole_duration_and_a_released_one_acquired_at_once() {
        let t0 = Instant::now();
        let missing = LeaseSeen::of(None, None, t0);
        assert_eq!(next_step(&missing, "me", t0, D), ElectorStep::AwaitMissing);
        // Still missing: the wait counts from when it was first seen missing.
        let again = LeaseSeen::of(None, Some(&missing), t0 + D / 2);
        assert_eq!(again.seen_at, t0);
        assert_eq!(next_step(&again, "me", t0 + D, D), ElectorStep::Create);
        // A Lease held, then deleted: missing from when it was seen gone.
        let held = LeaseSeen::of(Some(&lease("1", Some("other"), Some(15))), None, t0);
        let gone = LeaseSeen::of(None, Some(&held), t0 + D);
        assert_eq!(next_step(&gone, "me", t0 + D, D), ElectorStep::AwaitMissing);
        assert_eq!(next_step(&gone, "me", t0 + D * 2, D), ElectorStep::Create);
        let free = LeaseSeen::of(Some(&lease("1", None, Some(15))), None, t0);
        assert_eq!(next_step(&free, "me", t0, D), ElectorStep::Acquire);
        let empty = LeaseSeen::of(Some(&lease("1", Some(""), Some(15))), None, t0);
        assert_eq!(next_step(&empty, "me", t0, D), ElectorStep::Acquire);
    }

    #[test]
    fn another_holder_is_followed_until_a_whole_duration_passed_without_a_renewal() {
        let t0 = Instant::now();
        let seen = LeaseSeen::of(Some(&lease("1", Some("other"), Some(15))), None, t0);
        let follow = ElectorStep::Follow {
            holder: "other".into(),
        };
        assert_eq!(
            next_step(&seen, "me", t0 + Duration::from_secs(14), D),
            follow
        );
        assert_eq!(
            next_step(&seen, "me", t0 + Duration::from_secs(15), D),
            ElectorStep::Acquire
        );
        // The same version read again keeps the time it was first seen ...
        let again = LeaseSeen::of(
            Some(&lease("1", Some("other"), Some(15))),
            Some(&seen),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(again.seen_at, t0);
        // ... a renewal (a new version) starts the wait again.
        let renewed = LeaseSeen::of(
            Some(&lease("2", Some("other"), Some(15))),
            Some(&seen),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(
            next_step(&renewed, "me", t0 + Duration::from_secs(20), D),
            follow
        );
        // The holder's own duration counts, not ours.
        let short = LeaseSeen::of(Some(&lease("3", Some("other"), Some(2))), None, t0);
        assert_eq!(
            next_step(&short, "me", t0 + Duration::from_secs(2), D),
            ElectorStep::Acquire
        );
    }

    #[test]
    fn our_own_lease_is_renewed() {
        let t0 = Instant::now();
        let mine = LeaseSeen::of(Some(&lease("1", Some("me"), Some(15))), None, t0);
        assert_eq!(
            next_step(&mine, "me", t0 + Duration::from_mins(1), D),
            ElectorStep::Renew
        );
    }

    #[test]
    fn a_claim_counts_transitions_and_keeps_the_acquire_time_while_renewing() {
        let t1 = Timestamp::from_second(1000).unwrap();
        let t2 = Timestamp::from_second(1002).unwrap();
        let new = claimed(None, "l", "me", D, t1);
        let spec = new.spec.clone().unwrap();
        assert_eq!(new.metadata.name.as_deref(), Some("l"));
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(t1)));

        let renewed = claimed(Some(&new), "l", "me", D, t2).spec.unwrap();
        assert_eq!(renewed.acquire_time, Some(MicroTime(t1)));
        assert_eq!(renewed.renew_time, Some(MicroTime(t2)));
        assert_eq!(renewed.lease_transitions, Some(0));

        let taken = claimed(Some(&new), "l", "other", D, t2).spec.unwrap();
        assert_eq!(taken.holder_identity.as_deref(), Some("other"));
        assert_eq!(taken.acquire_time, Some(MicroTime(t2)));
        assert_eq!(taken.lease_transitions, Some(1));

        let free = released(&new).spec.unwrap();
        assert_eq!(free.holder_identity, None);
        assert_eq!(free.lease_transitions, Some(0));
    }
}
