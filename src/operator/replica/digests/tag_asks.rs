//! The followed tags this replica admitted without a digest: what it asks the leader to
//! check, so that later pods are pinned. Admission only records the tag in memory (a map
//! insert under a lock, never a call); once per tag — again only when it is admitted
//! unpinned [`ASK_AGAIN_AFTER`] after its last ask — the asks change, and the leader learns
//! them in memory (the replica that leads) or from the ConfigMap every replica writes its
//! own key of (`asks_publisher`; the leader's `asks_watcher` reads it). At most
//! [`MAX_ASKS`] are kept, and at most [`MAX_ASKS_PER_NAMESPACE`] of one namespace's rules,
//! so that one tenant's tags never push out another's; the oldest are dropped first (a
//! dropped tag stays followed while the leader's passes find pods using it). Each ask
//! carries a number the replica gives it, so that the leader tells an ask made again from
//! one it already answered.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::operator::replica::digests::followed::{Followed, FollowedBy};

/// Most asks a replica keeps (and a document holds).
pub const MAX_ASKS: usize = 256;
/// Most asks a replica keeps of one namespace's rules.
pub const MAX_ASKS_PER_NAMESPACE: usize = 32;
/// How long after its last ask a tag admitted unpinned again is asked again.
pub const ASK_AGAIN_AFTER: Duration = Duration::from_secs(30);
/// The largest document read.
pub const MAX_DOCUMENT: usize = 64 * 1024;
/// The longest reference an ask carries.
const MAX_REFERENCE: usize = 512;

/// One ask: a followed tag, and the number the replica gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ask {
    pub followed: Followed,
    pub number: u64,
}

/// The asks of this replica, and whom to tell when they change.
#[derive(Debug, Default)]
pub struct TagAsks {
    inner: Mutex<Inner>,
    /// Woken when an ask was made.
    pub changed: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    asks: HashMap<Followed, (u64, Instant)>,
    last: u64,
}

impl Inner {
    /// Drops the oldest ask of those `of` selects.
    fn drop_oldest(&mut self, of: impl Fn(&Followed) -> bool) {
        let oldest = self
            .asks
            .iter()
            .filter(|(f, _)| of(f))
            .min_by_key(|(_, (number, _))| *number)
            .map(|(f, _)| f.clone());
        if let Some(oldest) = oldest {
            self.asks.remove(&oldest);
        }
    }
}

impl TagAsks {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each update leaves the map whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `followed` was admitted unpinned at `now`: asked, unless it was lately.
    pub fn ask(&self, followed: Followed, now: Instant) {
        let mut inner = self.lock();
        if inner
            .asks
            .get(&followed)
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) < ASK_AGAIN_AFTER)
        {
            return;
        }
        inner.last += 1;
        let number = inner.last;
        let by = followed.by.clone();
        inner.asks.insert(followed, (number, now));
        if matches!(by, FollowedBy::Namespace(_))
            && inner.asks.keys().filter(|f| f.by == by).count() > MAX_ASKS_PER_NAMESPACE
        {
            inner.drop_oldest(|f| f.by == by);
        }
        if inner.asks.len() > MAX_ASKS {
            inner.drop_oldest(|_| true);
        }
        drop(inner);
        self.changed.notify_one();
    }

    /// The asks made, in order.
    pub fn asks(&self) -> Vec<Ask> {
        let mut asks: Vec<Ask> = self
            .lock()
            .asks
            .iter()
            .map(|(followed, (number, _))| Ask {
                followed: followed.clone(),
                number: *number,
            })
            .collect();
        asks.sort_by_key(|a| a.number);
        asks
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    reference: String,
    /// The namespace whose rules follow it; absent: the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    number: u64,
}

/// The document of `asks` (at most [`MAX_ASKS`] and [`MAX_DOCUMENT`] bytes: the newest
/// kept).
#[must_use]
pub fn encode(asks: &[Ask]) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut bytes = 2;
    for ask in asks.iter().rev().take(MAX_ASKS) {
        let entry = Entry {
            reference: ask.followed.reference.clone(),
            namespace: match &ask.followed.by {
                FollowedBy::Cluster => None,
                FollowedBy::Namespace(ns) => Some(ns.clone()),
            },
            number: ask.number,
        };
        let Ok(json) = serde_json::to_string(&entry) else {
            continue;
        };
        if bytes + json.len() + 1 > MAX_DOCUMENT {
            break;
        }
        bytes += json.len() + 1;
        entries.push(json);
    }
    entries.reverse();
    format!("[{}]", entries.join(","))
}

/// The asks a document holds (at most [`MAX_ASKS`]); entries without a reference are left
/// out.
pub fn decode(text: &str) -> Result<Vec<Ask>, String> {
    if text.len() > MAX_DOCUMENT {
        return Err(format!(
            "{} bytes, over the {MAX_DOCUMENT}-byte bound",
            text.len()
        ));
    }
    let entries: Vec<Entry> =
        serde_json::from_str(text).map_err(|e| format!("not a list of asks: {e}"))?;
    Ok(entries
        .into_iter()
        .take(MAX_ASKS)
        .filter(|e| !e.reference.is_empty() && e.reference.len() <= MAX_REFERENCE)
        .map(|e| Ask {
            followed: Followed {
                reference: e.reference,
                by: e
                    .namespace
                    .map_or(FollowedBy::Cluster, FollowedBy::Namespace),
            },
            number: e.number,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn followed(reference: &str) -> Followed {
        Followed {
            reference: reference.into(),
            by: FollowedBy::Namespace("dev".into()),
        }
    }

    #[test]
    fn a_tag_is_asked_once_and_again_only_after_a_while() {
        let asks = TagAsks::default();
        let now = Instant::now();
        asks.ask(followed("r.io/app:dev"), now);
        asks.ask(followed("r.io/app:dev"), now + Duration::from_secs(1));
        asks.ask(followed("r.io/web:dev"), now);
        let made = asks.asks();
        assert_eq!(made.len(), 2);
        assert_eq!(made[0].number, 1);
        asks.ask(followed("r.io/app:dev"), now + ASK_AGAIN_AFTER);
        let again = asks.asks();
        assert_eq!(again.len(), 2);
        assert_eq!(again[1].followed, followed("r.io/app:dev"));
        assert_eq!(again[1].number, 3, "asked again under a new number");
    }

    #[test]
    fn at_most_so_many_asks_are_kept_the_oldest_dropped() {
        let asks = TagAsks::default();
        let now = Instant::now();
        // Spread over 16 namespaces: none holds more than its share.
        let of = |i: usize| Followed {
            reference: format!("r.io/app:{i}"),
            by: FollowedBy::Namespace(format!("ns{}", i % 16)),
        };
        for i in 0..=MAX_ASKS {
            let at = now + Duration::from_millis(u64::try_from(i).unwrap());
            asks.ask(of(i), at);
        }
        let made = asks.asks();
        assert_eq!(made.len(), MAX_ASKS);
        assert!(made.iter().all(|a| a.followed != of(0)));
    }

    #[test]
    fn one_namespace_keeps_at_most_its_share_and_never_pushes_out_another() {
        let asks = TagAsks::default();
        let now = Instant::now();
        let of = |ns: &str, reference: &str| Followed {
            reference: reference.into(),
            by: FollowedBy::Namespace(ns.into()),
        };
        asks.ask(of("quiet", "r.io/db:dev"), now);
        asks.ask(
            Followed {
                reference: "r.io/base:stable".into(),
                by: FollowedBy::Cluster,
            },
            now,
        );
        for i in 0..MAX_ASKS {
            let at = now + Duration::from_millis(u64::try_from(i).unwrap());
            asks.ask(of("noisy", &format!("r.io/app:{i}")), at);
        }
        let made = asks.asks();
        let noisy: Vec<&Ask> = made
            .iter()
            .filter(|a| a.followed.by == FollowedBy::Namespace("noisy".into()))
            .collect();
        assert_eq!(noisy.len(), MAX_ASKS_PER_NAMESPACE);
        assert_eq!(
            noisy[0].followed.reference,
            format!("r.io/app:{}", MAX_ASKS - MAX_ASKS_PER_NAMESPACE),
            "the namespace's newest are kept"
        );
        assert!(
            made.iter()
                .any(|a| a.followed == of("quiet", "r.io/db:dev"))
        );
        assert!(made.iter().any(|a| a.followed.by == FollowedBy::Cluster));
        assert_eq!(made.len(), MAX_ASKS_PER_NAMESPACE + 2);
    }

    #[test]
    fn a_document_reads_back_what_was_written_and_is_bounded() {
        let asks = vec![
            Ask {
                followed: followed("r.io/app:dev"),
                number: 1,
            },
            Ask {
                followed: Followed {
                    reference: "r.io/web:dev".into(),
                    by: FollowedBy::Cluster,
                },
                number: 2,
            },
        ];
        assert_eq!(decode(&encode(&asks)).unwrap(), asks);
        assert!(decode("{}").is_err());
        assert!(decode(&" ".repeat(MAX_DOCUMENT + 1)).is_err());
        let long = vec![
            Ask {
                followed: followed(&"r".repeat(2_000)),
                number: 1,
            };
            100
        ];
        assert!(encode(&long).len() <= MAX_DOCUMENT);
        assert!(
            decode(&encode(&long)).unwrap().is_empty(),
            "over-long references are left out"
        );
    }
}
