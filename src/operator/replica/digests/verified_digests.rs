//! The digests the leader verified, as every replica holds them: what admission pins a
//! followed tag to. The leader checks tags at their registries and publishes what it
//! verified in one ConfigMap (`imagemap-digests`, key [`DATA_KEY`]) that every replica
//! watches — the channel from the one replica that contacts registries to all that answer
//! admissions. (The mappings' statuses list at most 8 tags per rule, so they cannot be it.)
//!
//! The document is bounded: at most [`MAX_ENTRIES`] digests, read only up to
//! [`MAX_DOCUMENT`] bytes, each entry checked (a digest is `sha256:` and 64 hex digits).

use std::collections::{BTreeMap, HashMap};
use std::sync::{PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use crate::operator::replica::digests::followed::{Followed, FollowedBy};

/// The ConfigMap key holding the document.
pub const DATA_KEY: &str = "digests.json";
/// Most digests published.
pub const MAX_ENTRIES: usize = 4000;
/// The largest document read (a ConfigMap holds at most 1 MiB).
pub const MAX_DOCUMENT: usize = 1 << 20;

/// The digests a replica holds.
#[derive(Debug, Default)]
pub struct VerifiedDigests {
    digests: RwLock<HashMap<Followed, String>>,
    /// Counts the replacements, for whoever acts when the digests change.
    replaced: tokio::sync::watch::Sender<u64>,
}

impl VerifiedDigests {
    /// The digest `followed` points to, as last verified.
    pub fn get(&self, followed: &Followed) -> Option<String> {
        self.digests
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(followed)
            .cloned()
    }

    /// Holds `digests` from now on, in place of what it held.
    pub fn replace(&self, digests: HashMap<Followed, String>) {
        let old = std::mem::replace(
            &mut *self.digests.write().unwrap_or_else(PoisonError::into_inner),
            digests,
        );
        // Freed outside the lock admission reads through.
        drop(old);
        self.replaced.send_modify(|n| *n += 1);
    }

    /// Changes whenever the digests held are replaced.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.replaced.subscribe()
    }
}

/// One published digest.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    reference: String,
    /// The namespace whose rules follow it; absent: the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    digest: String,
}

/// The document publishing `digests` (in order, at most [`MAX_ENTRIES`] and
/// [`MAX_DOCUMENT`] bytes), and how many were left out.
#[must_use]
pub fn encode(digests: &BTreeMap<Followed, String>) -> (String, usize) {
    let mut text = String::from("[");
    let mut published = 0;
    for (f, digest) in digests.iter().take(MAX_ENTRIES) {
        let entry = Entry {
            reference: f.reference.clone(),
            namespace: match &f.by {
                FollowedBy::Cluster => None,
                FollowedBy::Namespace(ns) => Some(ns.clone()),
            },
            digest: digest.clone(),
        };
        let Ok(json) = serde_json::to_string(&entry) else {
            continue;
        };
        if text.len() + json.len() + 2 > MAX_DOCUMENT {
            break;
        }
        if published > 0 {
            text.push(',');
        }
        text.push_str(&json);
        published += 1;
    }
    text.push(']');
    (text, digests.len() - published)
}

/// The digests a document publishes; entries that are not a reference and a digest are
/// left out.
pub fn decode(text: &str) -> Result<HashMap<Followed, String>, String> {
    if text.len() > MAX_DOCUMENT {
        return Err(format!(
            "{} bytes, over the {MAX_DOCUMENT}-byte bound",
            text.len()
        ));
    }
    let entries: Vec<Entry> =
        serde_json::from_str(text).map_err(|e| format!("not a list of digests: {e}"))?;
    Ok(entries
        .into_iter()
        .take(MAX_ENTRIES)
        .filter(|e| is_digest(&e.digest) && !e.reference.is_empty() && e.reference.len() <= 512)
        .map(|e| {
            let by = e
                .namespace
                .map_or(FollowedBy::Cluster, FollowedBy::Namespace);
            (
                Followed {
                    reference: e.reference,
                    by,
                },
                e.digest,
            )
        })
        .collect())
}

fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn followed(reference: &str, ns: Option<&str>) -> Followed {
        Followed {
            reference: reference.into(),
            by: ns.map_or(FollowedBy::Cluster, |n| FollowedBy::Namespace(n.into())),
        }
    }

    #[test]
    fn a_document_reads_back_what_was_published_and_nothing_malformed() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let published = BTreeMap::from([
            (followed("r.io/app:dev", None), digest.clone()),
            (followed("r.io/app:dev", Some("team")), digest.clone()),
        ]);
        let (text, dropped) = encode(&published);
        assert_eq!(dropped, 0);
        let read = decode(&text).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[&followed("r.io/app:dev", Some("team"))], digest);
        let bad = r#"[{"reference":"a","digest":"md5:x"},{"reference":"","digest":"sha256:00"}]"#;
        assert!(decode(bad).unwrap().is_empty());
        assert!(decode("{}").is_err());
        assert!(decode(&" ".repeat(MAX_DOCUMENT + 1)).is_err());
    }

    #[test]
    fn at_most_a_mebibyte_is_published() {
        let digest = format!("sha256:{}", "0".repeat(64));
        let long: BTreeMap<Followed, String> = (0..3000)
            .map(|i| {
                (
                    followed(&format!("r.io/{}:{i}", "a".repeat(400)), None),
                    digest.clone(),
                )
            })
            .collect();
        let (text, dropped) = encode(&long);
        assert!(
            text.len() <= MAX_DOCUMENT && dropped > 0,
            "{} {dropped}",
            text.len()
        );
        assert_eq!(decode(&text).unwrap().len(), 3000 - dropped);
    }

    #[test]
    fn at_most_so_many_digests_are_published() {
        let digest = format!("sha256:{}", "0".repeat(64));
        let many: BTreeMap<Followed, String> = (0..MAX_ENTRIES + 5)
            .map(|i| (followed(&format!("r.io/app:{i}"), None), digest.clone()))
            .collect();
        let (text, dropped) = encode(&many);
        assert_eq!(dropped, 5);
        assert!(text.len() < MAX_DOCUMENT, "{}", text.len());
        assert_eq!(decode(&text).unwrap().len(), MAX_ENTRIES);
    }
}
