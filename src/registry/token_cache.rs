//! What to send a registry's repository so it answers: the bearer token its token service
//! issued (until it expires), or basic credentials it asked for — so that a check is one
//! manifest HEAD, not a refusal, a token request and a HEAD. Bounded in entries.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::header::HeaderValue;

/// Most authorizations kept (each at most 8 KiB: a few MiB in all); past it, expired ones
/// go, then all.
const MAX_ENTRIES: usize = 1024;

/// The longest an authorization is reused.
pub const MAX_REUSE: Duration = Duration::from_mins(5);

/// Whom an authorization is for: a registry, a repository, and which credentials
/// (`None`: anonymous; else the entry's index).
pub type Key = (String, String, Option<usize>);

#[derive(Debug, Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<Key, (HeaderValue, Instant)>>,
}

impl TokenCache {
    /// The authorization kept for `key`, while it is valid at `now`.
    pub fn get(&self, key: &Key, now: Instant) -> Option<HeaderValue> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(_, until)| now < *until)
            .map(|(value, _)| value.clone())
    }

    /// Keeps `value` for `key` for `valid` (at most [`MAX_REUSE`]), from `now`.
    pub fn put(&self, key: Key, value: HeaderValue, valid: Duration, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + valid.min(MAX_REUSE)));
    }

    /// Forgets `key` (the registry refused what was kept).
    pub fn forget(&self, key: &Key) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Key {
        ("r.example".into(), format!("app{i}"), None)
    }

    #[test]
    fn an_authorization_is_kept_until_it_expires_and_the_cache_stays_bounded() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        let value = HeaderValue::from_static("Bearer t");
        cache.put(key(0), value.clone(), Duration::from_mins(1), t0);
        assert_eq!(
            cache.get(&key(0), t0 + Duration::from_secs(59)),
            Some(value.clone())
        );
        assert_eq!(cache.get(&key(0), t0 + Duration::from_mins(1)), None);
        cache.put(key(1), value.clone(), Duration::from_hours(1), t0);
        assert_eq!(
            cache.get(&key(1), t0 + MAX_REUSE),
            None,
            "reused at most 5 minutes"
        );
        cache.forget(&key(1));
        for i in 0..MAX_ENTRIES * 2 {
            cache.put(key(i), value.clone(), Duration::from_mins(1), t0);
        }
        assert!(cache.entries.lock().unwrap().len() <= MAX_ENTRIES);
    }
}
