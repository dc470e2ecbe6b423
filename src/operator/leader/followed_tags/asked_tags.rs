//! The followed tags the replicas asked the leader to check — each admitted a pod with it
//! and no digest — followed (as [`Follower::Asked`]) until a pass over the pods that began
//! after the ask finds no pod using it: then the ask is answered and dropped, and the tag
//! stays followed only if the pods of a namespace or a VM follow it. An ask made again (a
//! new number) is followed again. Each source (a replica's key, or this replica) is kept
//! apart, so that one replica's asks never replace another's.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use super::{FollowedTags, Follower};
use crate::operator::replica::digests::followed::Followed;
use crate::operator::replica::digests::tag_asks::Ask;

/// Most sources kept (replicas' keys).
pub const MAX_SOURCES: usize = 64;

/// The asks of every source, and the followed tags they go into.
#[derive(Debug)]
pub struct AskedTags {
    followed: Arc<FollowedTags>,
    inner: Mutex<HashMap<String, HashMap<Ask, Seen>>>,
    /// The sources the last pass left with no ask in force.
    answered: Mutex<Vec<String>>,
    /// Woken when a pass left sources with no ask in force.
    pub answered_changed: Notify,
}

/// What the leader knows of one ask.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// When the leader first saw it.
    at: Instant,
    /// A pass that began after it found no pod using the tag.
    answered: bool,
}

impl AskedTags {
    #[must_use]
    pub fn new(followed: Arc<FollowedTags>) -> Self {
        AskedTags {
            followed,
            inner: Mutex::default(),
            answered: Mutex::default(),
            answered_changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<Ask, Seen>>> {
        // Each update leaves the map whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `source` asks `asks` now (and no others).
    pub fn set(&self, source: &str, asks: Vec<Ask>, now: Instant) {
        let mut inner = self.lock();
        if !inner.contains_key(source) && inner.len() >= MAX_SOURCES {
            tracing::warn!(
                source,
                "more than {MAX_SOURCES} replicas ask for followed tags: this one's asks are left out"
            );
            return;
        }
        let before = inner.remove(source).unwrap_or_default();
        let now_asked: HashMap<Ask, Seen> = asks
            .into_iter()
            .map(|ask| {
                let seen = before.get(&ask).copied().unwrap_or(Seen {
                    at: now,
                    answered: false,
                });
                (ask, seen)
            })
            .collect();
        if !now_asked.is_empty() {
            inner.insert(source.to_string(), now_asked);
        }
        self.refollow(&inner, now);
    }

    /// Forgets every source but `kept`.
    pub fn keep_only(&self, kept: &HashSet<String>, now: Instant) {
        let mut inner = self.lock();
        inner.retain(|source, _| kept.contains(source));
        self.refollow(&inner, now);
    }

    /// A pass over every namespace that began at `began` found the pods using `found`: the
    /// asks seen before it whose tag no pod uses are answered. The sources left with no ask
    /// in force are then [`Self::take_answered`].
    pub fn passed(&self, began: Instant, found: &HashSet<Followed>) {
        let mut inner = self.lock();
        for asks in inner.values_mut() {
            for (ask, seen) in asks.iter_mut() {
                if seen.at < began && !found.contains(&ask.followed) {
                    seen.answered = true;
                }
            }
        }
        let done: Vec<String> = inner
            .iter()
            .filter(|(_, asks)| asks.values().all(|s| s.answered))
            .map(|(source, _)| source.clone())
            .collect();
        self.refollow(&inner, Instant::now());
        drop(inner);
        if !done.is_empty() {
            *self.answered.lock().unwrap_or_else(PoisonError::into_inner) = done;
            self.answered_changed.notify_one();
        }
    }

    /// The sources the last pass left with no ask in force (taken: the next call returns
    /// those of a later pass).
    pub fn take_answered(&self) -> Vec<String> {
        std::mem::take(&mut *self.answered.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Follows the tags asked and not answered.
    fn refollow(&self, inner: &HashMap<String, HashMap<Ask, Seen>>, now: Instant) {
        let asked: BTreeSet<Followed> = inner
            .values()
            .flat_map(|asks| asks.iter())
            .filter(|(_, seen)| !seen.answered)
            .map(|(ask, _)| ask.followed.clone())
            .collect();
        self.followed
            .follow_as(&Follower::Asked, asked.into_iter().collect(), now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::replica::digests::followed::FollowedBy;
    use std::time::Duration;

    fn ask(reference: &str, number: u64) -> Ask {
        Ask {
            followed: Followed {
                reference: reference.into(),
                by: FollowedBy::Namespace("dev".into()),
            },
            number,
        }
    }

    #[test]
    fn an_ask_is_followed_until_a_later_pass_finds_no_pod_using_it() {
        let followed = Arc::new(FollowedTags::default());
        let asked = AskedTags::new(Arc::clone(&followed));
        let t0 = Instant::now();
        asked.set("a", vec![ask("r.io/app:dev", 1)], t0);
        asked.set("b", vec![ask("r.io/web:dev", 1)], t0);
        assert!(followed.follows(&ask("r.io/app:dev", 1).followed));
        // A pass that began before the asks answers none of them.
        asked.passed(
            t0.checked_sub(Duration::from_secs(1)).unwrap(),
            &HashSet::new(),
        );
        assert!(asked.take_answered().is_empty());
        assert_eq!(followed.len(), 2);
        // A later pass found pods using app only: web's ask is answered.
        let found = HashSet::from([ask("r.io/app:dev", 1).followed]);
        asked.passed(t0 + Duration::from_secs(1), &found);
        assert_eq!(asked.take_answered(), ["b"]);
        assert!(followed.follows(&ask("r.io/app:dev", 1).followed));
        assert!(!followed.follows(&ask("r.io/web:dev", 1).followed));
        // Asked again, under a new number: followed again.
        asked.set(
            "b",
            vec![ask("r.io/web:dev", 2)],
            t0 + Duration::from_secs(2),
        );
        assert!(followed.follows(&ask("r.io/web:dev", 2).followed));
        // A source gone takes its asks.
        asked.keep_only(&HashSet::from(["b".to_string()]), t0);
        assert!(!followed.follows(&ask("r.io/app:dev", 1).followed));
    }
}
