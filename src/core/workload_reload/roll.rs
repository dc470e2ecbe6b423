//! The next step of a workload's roll, from what is seen now — its status, its labelled
//! pods and what changed for each — and what live reload remembers of it while it leads;
//! and the Events that tell the roll on the workload and its pods.
//!
//! One pod at a time: the next is evicted only once the evicted one is going, a replacement
//! exists, every pod not going is Available (`minReadySeconds` included) and the workload's
//! status says so. Nothing is evicted while the workload's own rollout is under way, while it is
//! short of Available pods, or once a replacement came back unmapped (admission did not
//! answer: evicting more would only bring more unmapped pods).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::core::excerpt::excerpt_to;
use crate::core::notice::Notice;
use crate::core::stale_slot::{StaleSlot, listed};
use crate::core::workload_reload::live_pod::{LivePod, UNMAPPED_REPLACEMENT_ANNOTATION};
use crate::core::workload_reload::workload_status::{RolloutProgress, WorkloadStatus};

/// How long an evicted pod's replacement may take to be Available before the roll is
/// reported stalled (it still waits).
pub const STALLED_AFTER: Duration = Duration::from_mins(5);

/// The eviction under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    pub name: String,
    pub uid: String,
    /// The UIDs of the workload's pods when it was evicted: any other is a replacement.
    pub known: BTreeSet<String>,
    pub at: Timestamp,
}

/// What live reload remembers of a workload while it leads. Nothing of it is needed to
/// start again: a new leader compares what runs with what the rules say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollMemory {
    pub evicted: Option<Evicted>,
    /// Replacements that came back unmapped: never evicted.
    pub unmapped: BTreeSet<String>,
    /// Pods evicted since the roll started (0: no roll).
    pub replaced: usize,
}

/// A pod of the workload, and what changed for it.
#[derive(Debug, Clone, Copy)]
pub struct RollPod<'a> {
    pub pod: &'a LivePod,
    pub changes: &'a [StaleSlot],
}

/// Why the roll waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// The workload itself is not known yet.
    NotListed,
    /// The evicted pod is going, or its replacement is not yet Available.
    Replacement { evicted: String },
    /// As [`Wait::Replacement`], for longer than [`STALLED_AFTER`].
    Stalled { evicted: String },
    /// The workload's own rollout is under way.
    OwnRollout,
    /// The workload is short of Available pods, or one is going.
    Unavailable,
    /// A replacement came back unmapped.
    UnmappedReplacement { pod: String },
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollStep {
    /// Every pod runs what its rules resolve to (none stale, no eviction under way).
    Current,
    Wait(Wait),
    /// Evict this pod (then record it with [`RollMemory::evicting`]).
    Evict {
        name: String,
        uid: String,
    },
}

impl RollMemory {
    /// Records that `pod` was evicted at `now`, among `pods`.
    pub fn evicting(&mut self, name: &str, uid: &str, pods: &[RollPod<'_>], now: Timestamp) {
        self.evicted = Some(Evicted {
            name: name.to_string(),
            uid: uid.to_string(),
            known: pods.iter().map(|p| p.pod.uid.clone()).collect(),
            at: now,
        });
        self.replaced += 1;
    }
}

/// Whether the eviction under way is over: the pod going or gone, a replacement there,
/// every pod not going Available, and the workload settled. (The next step does not wait
/// for a going pod's grace period to end: it no longer counts as available.)
fn eviction_over(
    evicted: &Evicted,
    status: Option<&WorkloadStatus>,
    pods: &[RollPod<'_>],
    now: Timestamp,
) -> bool {
    let going = pods
        .iter()
        .all(|p| p.pod.uid != evicted.uid || p.pod.deleting);
    let replaced = pods
        .iter()
        .any(|p| !evicted.known.contains(&p.pod.uid) && !p.pod.deleting);
    going && replaced && status.is_some_and(|s| settled(s, pods, now))
}

/// The workload settled, and every pod of it not going Available.
fn settled(status: &WorkloadStatus, pods: &[RollPod<'_>], now: Timestamp) -> bool {
    status.progress == RolloutProgress::Settled
        && pods
            .iter()
            .filter(|p| !p.pod.deleting)
            .all(|p| p.pod.available(status.min_ready_seconds, now))
}

/// The next step for a workload with `status` (`None`: not known yet) and `pods`, given
/// what is remembered of it (updated here: an eviction found over, replacements found
/// unmapped).
#[must_use]
pub fn step(
    status: Option<&WorkloadStatus>,
    pods: &[RollPod<'_>],
    memory: &mut RollMemory,
    now: Timestamp,
) -> RollStep {
    let present: BTreeSet<&str> = pods.iter().map(|p| p.pod.uid.as_str()).collect();
    memory.unmapped.retain(|uid| present.contains(uid.as_str()));
    // Marked by a leader before: remembered across restarts.
    memory.unmapped.extend(
        pods.iter()
            .filter(|p| p.pod.unmapped_replacement)
            .map(|p| p.pod.uid.clone()),
    );
    if let Some(evicted) = &memory.evicted {
        for p in pods {
            if !evicted.known.contains(&p.pod.uid) && !p.pod.mapped && !p.changes.is_empty() {
                memory.unmapped.insert(p.pod.uid.clone());
            }
        }
        if !eviction_over(evicted, status, pods, now) {
            let waited = now.duration_since(evicted.at);
            let evicted = evicted.name.clone();
            if waited.as_secs() >= STALLED_AFTER.as_secs().cast_signed() {
                return RollStep::Wait(Wait::Stalled { evicted });
            }
            return RollStep::Wait(Wait::Replacement { evicted });
        }
        memory.evicted = None;
    }
    // An unmapped replacement holds the roll (and is never evicted) while it exists.
    if let Some(unmapped) = pods.iter().find(|p| memory.unmapped.contains(&p.pod.uid)) {
        return RollStep::Wait(Wait::UnmappedReplacement {
            pod: unmapped.pod.name.clone(),
        });
    }
    let stale = pods
        .iter()
        .filter(|p| !p.changes.is_empty() && !p.pod.deleting);
    let Some(first) = stale.min_by_key(|p| p.pod.name.as_str()) else {
        return RollStep::Current;
    };
    let Some(status) = status else {
        return RollStep::Wait(Wait::NotListed);
    };
    if status.progress == RolloutProgress::OwnRollout {
        return RollStep::Wait(Wait::OwnRollout);
    }
    if !settled(status, pods, now) {
        return RollStep::Wait(Wait::Unavailable);
    }
    RollStep::Evict {
        name: first.pod.name.clone(),
        uid: first.pod.uid.clone(),
    }
}

/// How many pods are still to roll: stale, and not an unmapped replacement.
#[must_use]
pub fn left(pods: &[RollPod<'_>], memory: &RollMemory) -> usize {
    pods.iter()
        .filter(|p| !p.changes.is_empty() && !memory.unmapped.contains(&p.pod.uid))
        .count()
}

fn normal(reason: &'static str, message: String) -> Notice {
    Notice {
        warning: false,
        reason,
        message,
    }
}

fn warning(reason: &'static str, message: String) -> Notice {
    Notice {
        warning: true,
        reason,
        message,
    }
}

/// On the workload: its roll starts.
#[must_use]
pub fn started(left: usize, changes: &[StaleSlot]) -> Notice {
    normal(
        "LiveReloadStarted",
        format!(
            "live reload: rolling {left} pod(s) one at a time by eviction, for {}; the spec is not written",
            listed(changes)
        ),
    )
}

/// On the workload: its roll is over.
#[must_use]
pub fn finished(replaced: usize) -> Notice {
    normal(
        "LiveReloadFinished",
        format!(
            "live reload: {replaced} pod(s) evicted and replaced; every pod runs what its rules resolve to"
        ),
    )
}

/// On the workload: a PodDisruptionBudget refused the eviction of `pod` (`cause`: the API
/// server's words, naming the budget).
#[must_use]
pub fn budget_holds(pod: &str, cause: &str, left: usize) -> Notice {
    warning(
        "DisruptionBudgetHolds",
        format!(
            "live reload waits: evicting pod {pod} would violate its disruption budget ({}); {left} pod(s) left to roll",
            excerpt_to(cause, 300)
        ),
    )
}

/// On the workload: an eviction was refused for good (two budgets over one pod).
#[must_use]
pub fn refused(pod: &str, cause: &str, left: usize) -> Notice {
    warning(
        "EvictionRefused",
        format!(
            "live reload stopped: the eviction of pod {pod} was refused ({}); {left} pod(s) left to roll; fix the cause, then the roll goes on",
            excerpt_to(cause, 300)
        ),
    )
}

/// On the workload: an evicted pod's replacement is not Available after
/// [`STALLED_AFTER`].
#[must_use]
pub fn stalled(evicted: &str, left: usize) -> Notice {
    warning(
        "LiveReloadStalled",
        format!(
            "live reload waits: pod {evicted} was evicted over {} minutes ago and the workload is not yet Available again; {left} pod(s) left to roll",
            STALLED_AFTER.as_secs() / 60
        ),
    )
}

/// On a pod: it came back unmapped after its predecessor was evicted.
#[must_use]
pub fn not_mapped(changes: &[StaleSlot]) -> Notice {
    warning(
        "NotMappedAtAdmission",
        format!(
            "this replacement came back unmapped ({}): admission did not answer for it; it is not evicted again (annotated {UNMAPPED_REPLACEMENT_ANNOTATION}; delete it once admission answers) and the roll waits while it exists",
            listed(changes)
        ),
    )
}

/// On a pod: its images changed, but nothing would recreate it if it were evicted.
#[must_use]
pub fn restart_required(owner: &str, changes: &[StaleSlot]) -> Notice {
    warning(
        "RestartRequired",
        format!(
            "its images changed ({}), but {owner} would not recreate it, so live reload does not evict it: recreate it to run them",
            listed(changes)
        ),
    )
}

#[cfg(test)]
mod tests;
