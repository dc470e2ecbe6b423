//! The tags VMs and pods follow (`followTag`), the digest each points to, and who uses it.
//! Reconciles say which references a VM follows; the leader's passes over the pods which
//! ones the pods of each namespace use, and the replicas' asks which ones a pod was just
//! admitted with unpinned, so that later pods are pinned; and for whom: a tag a ClusterImageMapping
//! rule names is the cluster's; one an ImageMapping rule follows, or one the VM chose itself
//! through a cluster rule that does not fix the repository (a `prefix` or `regex` rule: the
//! VM names the path), is its namespace's — each checked on its own, with the credentials
//! that serve its follower and within its follower's share of the checks. The tag follower checks each distinct followed tag once
//! per interval, however many VMs use it, and learns which VMs to reconcile when its digest
//! moved. A failed check never drops a known digest: running pods are never touched because
//! a registry misbehaves. The replicas' asks are kept in [`asked_tags`].

pub mod asked_tags;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::core::namespaced_name::NamespacedName;
use tokio::sync::Notify;

use crate::core::rules::{MappingKey, MappingScope};
use crate::operator::replica::digests::followed::{Followed, FollowedBy};
use crate::registry::RegistryError;

/// What is known of one followed reference (`registry/repository:tag`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Never checked yet: the check is under way.
    Pending,
    /// The digest the tag points to; `error`: the last check failed and this is the last
    /// digest known.
    Known {
        digest: Option<String>,
        error: Option<RegistryError>,
    },
}

/// Who follows a tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Follower {
    /// A VM: reconciled when the digest moves.
    Vm(NamespacedName),
    /// The pods of a namespace, as the last pass over them found them: kept checked while
    /// pods use the tag, so that later pods are pinned to a digest verified lately.
    PodsIn(String),
    /// The replicas that admitted a pod with the tag and no digest, until a pass over the
    /// pods answers them.
    Asked,
    /// A NeonVM VM (its live reload acts when the digest moves).
    NeonVm(NamespacedName),
}

#[derive(Debug)]
struct TagState {
    users: HashSet<Follower>,
    /// Both `None`: never answered yet.
    digest: Option<String>,
    error: Option<RegistryError>,
    next_check: Instant,
    failures: u32,
    /// A check is under way.
    checking: bool,
    /// Asked for again while a check was under way: due as soon as it ends (what it
    /// answers may predate the push).
    again: bool,
}

impl TagState {
    /// Whether a check has answered (every answer leaves a digest or an error).
    fn answered(&self) -> bool {
        self.digest.is_some() || self.error.is_some()
    }

    /// Due at once: now, or as soon as the check under way ends.
    fn due_now(&mut self, now: Instant) {
        if self.checking {
            self.again = true;
        } else {
            self.next_check = now;
        }
    }
}

/// The longest wait after failed checks.
const MAX_BACKOFF: Duration = Duration::from_mins(5);

/// Followed references and their digests; shared by reconciles and the follower.
#[derive(Debug, Default)]
pub struct FollowedTags {
    inner: Mutex<Inner>,
    /// Woken when a reference is due at once: followed for the first time, or pushed.
    pub wake: Notify,
    /// Woken when the verified digests changed: one moved or was learned, or a tag that had
    /// one is no longer followed.
    pub digests_changed: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    by_follower: HashMap<Follower, Vec<Followed>>,
    tags: HashMap<Followed, TagState>,
    /// When the follower means to look again (`None`: after a full interval, or it is
    /// looking now): an answer due earlier wakes it, a later one need not.
    wake_at: Option<Instant>,
}

impl FollowedTags {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the maps consistent at each step.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `vm` follows `references` (and no others), and what is known of each.
    pub fn follow(
        &self,
        vm: &NamespacedName,
        references: Vec<Followed>,
        now: Instant,
    ) -> Vec<(Followed, Lookup)> {
        self.follow_as(&Follower::Vm(vm.clone()), references, now)
    }

    /// Records that `follower` follows `references` (and no others), and what is known of
    /// each.
    pub fn follow_as(
        &self,
        follower: &Follower,
        references: Vec<Followed>,
        now: Instant,
    ) -> Vec<(Followed, Lookup)> {
        let mut inner = self.lock();
        // Every reconcile comes here; most VMs follow nothing, and the others the same
        // references as last time.
        let mut dropped = false;
        let unchanged = match inner.by_follower.get(follower) {
            None => references.is_empty(),
            Some(before) => *before == references,
        };
        if !unchanged {
            let before = if references.is_empty() {
                inner.by_follower.remove(follower)
            } else {
                inner
                    .by_follower
                    .insert(follower.clone(), references.clone())
            };
            for gone in before.unwrap_or_default() {
                if !references.contains(&gone) {
                    dropped |= inner.release(follower, &gone);
                }
            }
        }
        let mut fresh = false;
        let lookups = references
            .into_iter()
            .map(|r| {
                let state = inner.tags.entry(r.clone()).or_insert_with(|| {
                    fresh = true;
                    TagState {
                        users: HashSet::new(),
                        digest: None,
                        error: None,
                        next_check: now,
                        failures: 0,
                        checking: false,
                        again: false,
                    }
                });
                if !state.users.contains(follower) {
                    state.users.insert(follower.clone());
                }
                let lookup = if state.answered() {
                    Lookup::Known {
                        digest: state.digest.clone(),
                        error: state.error.clone(),
                    }
                } else {
                    Lookup::Pending
                };
                (r, lookup)
            })
            .collect();
        drop(inner);
        if fresh {
            self.wake.notify_one();
        }
        if dropped {
            self.digests_changed.notify_one();
        }
        lookups
    }

    /// Forgets `vm` (deleted): the tags it followed that nothing else follows go.
    pub fn forget(&self, vm: &NamespacedName) {
        self.forget_follower(&Follower::Vm(vm.clone()));
    }

    /// Forgets `follower` (deleted): the tags it followed that nothing else follows go.
    pub fn forget_follower(&self, follower: &Follower) {
        let mut inner = self.lock();
        let mut dropped = false;
        for r in inner.by_follower.remove(follower).unwrap_or_default() {
            dropped |= inner.release(follower, &r);
        }
        drop(inner);
        if dropped {
            self.digests_changed.notify_one();
        }
    }

    /// Takes the references due for a check at `now` (each is then under way until
    /// [`Self::checked`]), and says when the next one not under way is due after them.
    pub fn take_due(&self, now: Instant) -> (Vec<Followed>, Option<Instant>) {
        let mut inner = self.lock();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (reference, state) in &mut inner.tags {
            if state.checking {
                continue;
            }
            if state.next_check <= now {
                state.checking = true;
                due.push(reference.clone());
            } else {
                next = Some(next.map_or(state.next_check, |n| n.min(state.next_check)));
            }
        }
        inner.wake_at = next;
        (due, next)
    }

    /// Records a check of `reference` made at `now`; the next is due after `interval`
    /// (doubled per failure in a row, to at most five minutes). Returns the VMs to
    /// reconcile: all its users when what they report changed (a new digest, the first
    /// answer, an error appearing, changing or clearing).
    pub fn checked(
        &self,
        reference: &Followed,
        result: Result<String, RegistryError>,
        now: Instant,
        interval: Duration,
    ) -> Vec<NamespacedName> {
        let mut inner = self.lock();
        let Some(state) = inner.tags.get_mut(reference) else {
            return Vec::new();
        };
        let before = (state.digest.clone(), state.error.clone());
        match result {
            Ok(digest) => {
                state.digest = Some(digest);
                state.error = None;
                state.failures = 0;
                state.next_check = later(now, interval);
            }
            Err(error) => {
                state.error = Some(error);
                state.failures = state.failures.saturating_add(1);
                let backoff = interval.saturating_mul(1 << state.failures.min(16));
                state.next_check = later(now, backoff.min(MAX_BACKOFF.max(interval)));
            }
        }
        state.checking = false;
        if std::mem::take(&mut state.again) {
            state.next_check = now;
        }
        let after = (state.digest.clone(), state.error.clone());
        let digest_moved = before.0 != after.0;
        let users = if before == after {
            Vec::new()
        } else {
            state
                .users
                .iter()
                .filter_map(|u| match u {
                    Follower::Vm(vm) => Some(vm.clone()),
                    Follower::PodsIn(_) | Follower::Asked | Follower::NeonVm(_) => None,
                })
                .collect()
        };
        // The follower left this reference out when it last chose when to wake up: wake it
        // if it is due before then.
        let next_check = state.next_check;
        let wake = inner.wake_at.is_none_or(|at| next_check < at);
        if wake {
            inner.wake_at = Some(next_check);
        }
        drop(inner);
        if wake {
            self.wake.notify_one();
        }
        if digest_moved {
            self.digests_changed.notify_one();
        }
        users
    }

    /// Every followed reference's verified digest.
    pub fn verified(&self) -> std::collections::BTreeMap<Followed, String> {
        self.lock()
            .tags
            .iter()
            .filter_map(|(k, s)| s.digest.clone().map(|d| (k.clone(), d)))
            .collect()
    }

    /// Whether `reference` is followed (by any VM or pod).
    pub fn follows(&self, reference: &Followed) -> bool {
        self.lock().tags.contains_key(reference)
    }

    /// Makes `reference` due at once for every follower, or right after the check under
    /// way (a push notification named it) — unless its last check failed: a notification
    /// (which anyone holding the token can send) never cuts a failing registry's backoff
    /// short. Whether it is followed.
    pub fn check_now(&self, reference: &str, now: Instant) -> bool {
        let mut inner = self.lock();
        let mut followed = false;
        for (key, state) in &mut inner.tags {
            if key.reference == reference {
                followed = true;
                if state.failures == 0 {
                    state.due_now(now);
                }
            }
        }
        followed
    }

    /// Makes every followed reference due at once (the credentials they are checked with
    /// changed) and wakes the follower; how many there are.
    pub fn check_all_now(&self, now: Instant) -> usize {
        let mut inner = self.lock();
        for state in inner.tags.values_mut() {
            state.due_now(now);
        }
        let n = inner.tags.len();
        drop(inner);
        if n > 0 {
            self.wake.notify_one();
        }
        n
    }

    /// The digest `reference`, as a rule of `mapping` follows it, pointed to at its last
    /// successful check: an ImageMapping's own; for a ClusterImageMapping, the cluster's,
    /// else any namespace's (its status is the administrator's to read).
    pub fn digest_for_mapping(&self, mapping: &MappingKey, reference: &str) -> Option<String> {
        let inner = self.lock();
        let digest = |by: &FollowedBy| {
            inner
                .tags
                .get(&Followed {
                    reference: reference.to_string(),
                    by: by.clone(),
                })
                .and_then(|s| s.digest.clone())
        };
        match (&mapping.scope, &mapping.namespace) {
            (MappingScope::Namespaced, Some(ns)) => digest(&FollowedBy::Namespace(ns.clone())),
            _ => digest(&FollowedBy::Cluster).or_else(|| {
                inner
                    .tags
                    .iter()
                    .filter(|(k, _)| k.reference == reference)
                    .find_map(|(_, s)| s.digest.clone())
            }),
        }
    }

    /// The digest `reference` pointed to at its last successful check.
    pub fn digest(&self, reference: &Followed) -> Option<String> {
        self.lock()
            .tags
            .get(reference)
            .and_then(|s| s.digest.clone())
    }

    /// How many distinct references are followed.
    pub fn len(&self) -> usize {
        self.lock().tags.len()
    }

    /// Whether no reference is followed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `now + wait`, or as far as an `Instant` goes.
fn later(now: Instant, wait: Duration) -> Instant {
    now.checked_add(wait)
        .or_else(|| now.checked_add(Duration::from_hours(24 * 365)))
        .unwrap_or(now)
}

impl Inner {
    /// `follower` no longer follows `reference`; whether a tag with a digest is no longer
    /// followed at all.
    fn release(&mut self, follower: &Follower, reference: &Followed) -> bool {
        if let Some(state) = self.tags.get_mut(reference) {
            state.users.remove(follower);
            if state.users.is_empty() {
                return self
                    .tags
                    .remove(reference)
                    .is_some_and(|s| s.digest.is_some());
            }
        }
        false
    }
}

#[cfg(test)]
mod tests;
