//! Condition types and reasons of every imagemap resource, and the one way conditions are
//! built: `lastTransitionTime` kept while the status stays, `observedGeneration` always set.

use std::borrow::Borrow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::core::excerpt::cut_bytes;

/// Most bytes of a condition message the operator writes (the CRDs allow 32768, as
/// `metav1.Condition` does): a VM's status stays a few KiB whatever its slots say.
pub const MESSAGE_LIMIT: usize = 1024;

/// Condition types.
pub mod kind {
    /// VirtualMachine: the runner pod runs. Mappings: every rule is valid and in no conflict.
    pub const READY: &str = "Ready";
    /// VirtualMachine: every image slot resolved to a reference.
    pub const IMAGES_RESOLVED: &str = "ImagesResolved";
    /// VirtualMachine: the pod runs the images its slots resolve to now.
    pub const IMAGES_CURRENT: &str = "ImagesCurrent";
    /// kstatus: work toward the spec is under way (present only while True).
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: the object cannot reach its spec without a person's change (present only
    /// while True).
    pub const STALLED: &str = "Stalled";
}

/// Condition reasons.
pub mod reason {
    // VirtualMachine `Ready`: `Running`, else the phase.
    pub const RUNNING: &str = "Running";
    pub const PENDING: &str = "Pending";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    /// The API server refused the runner pod (quota, Pod Security admission, invalid
    /// fields); the message says what it said.
    pub const POD_CREATE_FAILED: &str = "PodCreateFailed";
    /// The runner pod ended soon after it started; the next waits (10 s doubling to 5 min).
    pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
    // VirtualMachine `ImagesResolved`.
    pub const RESOLVED: &str = "Resolved";
    pub const INVALID_REWRITE: &str = "InvalidRewrite";
    // VirtualMachine `ImagesResolved` and mapping `Ready`.
    pub const DISALLOWED_TARGET: &str = "DisallowedTarget";
    /// A rule follows tags, and the operator was started without `--allowed-registries`.
    pub const ALLOWED_REGISTRIES_REQUIRED: &str = "AllowedRegistriesRequired";
    pub const CONFLICT: &str = "Conflict";
    /// A mapping that could map the VM cannot be read, and no readable version of it is
    /// known: its pod is neither created nor replaced until it can be.
    pub const MAPPING_UNREADABLE: &str = "MappingUnreadable";
    /// A followed tag's digest could not be checked: the last known one (or the tag) is used.
    pub const DIGEST_UNVERIFIED: &str = "DigestUnverified";
    // VirtualMachine `ImagesCurrent`.
    pub const UP_TO_DATE: &str = "UpToDate";
    pub const RESTART_REQUIRED: &str = "RestartRequired";
    /// liveReload: the replacement waits for the operator's recreation budget.
    pub const RECREATION_THROTTLED: &str = "RecreationThrottled";
    pub const NO_POD: &str = "NoPod";
    pub const IMAGES_UNRESOLVED: &str = "ImagesUnresolved";
    // Mapping `Ready`.
    pub const RULES_VALID: &str = "RulesValid";
    pub const DRY_RUN: &str = "DryRun";
    pub const INVALID_RULE: &str = "InvalidRule";
}

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Now, in whole seconds: what the API server stores, so that a cached status and a
/// computed one compare equal.
#[must_use]
pub fn now() -> Time {
    let secs = Timestamp::now().as_second();
    Time(Timestamp::from_second(secs).unwrap_or_else(|_| Timestamp::now()))
}

/// Builds the conditions of one object's status from its previous ones.
#[derive(Debug, Clone, Copy)]
pub struct Conditions<'a> {
    previous: &'a [Condition],
    observed_generation: Option<i64>,
    now: &'a Time,
}

impl<'a> Conditions<'a> {
    #[must_use]
    pub fn new(previous: &'a [Condition], observed_generation: Option<i64>, now: &'a Time) -> Self {
        Conditions {
            previous,
            observed_generation,
            now,
        }
    }

    /// A condition, keeping the previous `lastTransitionTime` when its status did not change.
    #[must_use]
    pub fn build(&self, type_: &str, status: Status, reason: &str, message: String) -> Condition {
        let status = status.as_str();
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| self.now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: if message.len() <= MESSAGE_LIMIT {
                message
            } else {
                cut_bytes(&message, MESSAGE_LIMIT)
            },
            observed_generation: self.observed_generation,
            last_transition_time,
        }
    }
}

/// What the kstatus conditions follow: the (condition type, reason) pairs that mean the
/// object is stalled, and those that mean work is under way.
pub struct KstatusRules<'r> {
    pub stalled: &'r [(&'r str, &'r str)],
    pub reconciling: &'r [(&'r str, &'r str)],
}

/// `conditions` with the kstatus condition they call for, if any: `Stalled=True` (before
/// `Reconciling`) or `Reconciling=True`, with the reason and message of the condition that
/// calls for it. Tools that read kstatus (Flux, kpt, Argo CD's health checks through it) then
/// see the object as Failed, InProgress or Current.
#[must_use]
pub fn with_kstatus(
    build: &Conditions<'_>,
    mut conditions: Vec<Condition>,
    rules: &KstatusRules<'_>,
) -> Vec<Condition> {
    let cause = |pairs: &[(&str, &str)]| {
        pairs.iter().find_map(|&(ty, why)| {
            find(&conditions, ty)
                .filter(|c| c.reason == why && c.status != "True")
                .map(|c| (c.reason.clone(), c.message.clone()))
        })
    };
    let extra = match (cause(rules.stalled), cause(rules.reconciling)) {
        (Some((why, message)), _) => Some(build.build(kind::STALLED, Status::True, &why, message)),
        (None, Some((why, message))) => {
            Some(build.build(kind::RECONCILING, Status::True, &why, message))
        }
        (None, None) => None,
    };
    conditions.extend(extra);
    conditions
}

/// The condition of `type_` in `conditions`.
#[must_use]
pub fn find<'c, C: Borrow<Condition>>(conditions: &'c [C], type_: &str) -> Option<&'c Condition> {
    conditions
        .iter()
        .map(Borrow::borrow)
        .find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let t0 = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let t1 = Time(Timestamp::from_second(1_800_000_100).unwrap());
        let first = Conditions::new(&[], Some(1), &t0).build(
            kind::READY,
            Status::False,
            "Pending",
            String::new(),
        );
        let previous = [first];
        let same = Conditions::new(&previous, Some(2), &t1).build(
            kind::READY,
            Status::False,
            "Failed",
            "x".into(),
        );
        assert_eq!(same.last_transition_time, t0);
        assert_eq!(same.observed_generation, Some(2));
        let flipped = Conditions::new(&previous, Some(2), &t1).build(
            kind::READY,
            Status::True,
            reason::RUNNING,
            String::new(),
        );
        assert_eq!(flipped.last_transition_time, t1);
        assert_eq!(
            find(&previous, kind::READY).map(|c| c.reason.as_str()),
            Some("Pending")
        );
    }

    #[test]
    fn messages_are_bounded() {
        let t0 = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let long = Conditions::new(&[], Some(1), &t0).build(
            kind::READY,
            Status::False,
            "Pending",
            "é".repeat(10_000),
        );
        assert!(long.message.len() <= MESSAGE_LIMIT && long.message.ends_with('…'));
    }
}
