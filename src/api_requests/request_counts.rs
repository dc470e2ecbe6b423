//! The counts themselves: what a request is keyed by (verb, resource, code), the shared
//! handle that reads them, and the client built with the counting layer on its stack.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The verbs that change state on the server.
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The resource label of requests outside the resource API (discovery, `/version`, `/healthz`, ...).
pub const OTHER_RESOURCE: &str = "other";

/// What one counted request is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The audit verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for requests outside the resource API the lower case HTTP method.
    pub verb: &'static str,
    /// The plural resource with its subresource, e.g. `pods`, `virtualmachines/status`;
    /// [`OTHER_RESOURCE`] for requests outside the resource API.
    pub resource: String,
    /// The HTTP status code (`"200"`), `"error"` when no response came back, or `"cancelled"`
    /// when the request was dropped before its response.
    pub code: String,
}

impl RequestKey {
    /// Whether the verb is one of [`WRITE_VERBS`].
    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb)
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.verb, self.resource, self.code)
    }
}

/// Shared request counts; cheap to clone (all clones count into the same table).
#[derive(Debug, Clone, Default)]
pub struct ApiRequests {
    counts: Arc<Mutex<BTreeMap<RequestKey, u64>>>,
    /// LISTs sent without a bounded `limit`, by resource.
    unbounded: Arc<Mutex<BTreeMap<String, u64>>>,
    /// The crash hook: abort the process once this many writes have had their response
    /// (0: never).
    abort_after_writes: Arc<AtomicU64>,
}

impl ApiRequests {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of all counts so far.
    pub fn snapshot(&self) -> BTreeMap<RequestKey, u64> {
        self.lock().clone()
    }

    /// The number of requests so far whose key matches `pred`.
    pub fn count(&self, pred: impl Fn(&RequestKey) -> bool) -> u64 {
        self.lock()
            .iter()
            .filter(|(key, _)| pred(key))
            .map(|(_, n)| n)
            .sum()
    }

    /// The number of write requests ([`WRITE_VERBS`]) so far, whatever their outcome.
    pub fn writes(&self) -> u64 {
        self.count(RequestKey::is_write)
    }

    /// The number of requests so far.
    pub fn total(&self) -> u64 {
        self.count(|_| true)
    }

    /// Forgets all counts so far.
    pub fn reset(&self) {
        self.lock().clear();
        self.unbounded().clear();
    }

    /// The LISTs sent so far without a `limit` of at most
    /// [`MAX_LIST_LIMIT`](super::MAX_LIST_LIMIT), by resource.
    pub fn unbounded_lists(&self) -> BTreeMap<String, u64> {
        self.unbounded().clone()
    }

    pub(super) fn record_unbounded_list(&self, resource: &str) {
        *self.unbounded().entry(resource.to_owned()).or_insert(0) += 1;
    }

    fn unbounded(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.unbounded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A fault-injection hook for crash tests: the process aborts — no cleanup, as if
    /// killed — right after the response to its `n`th write request arrives, before the
    /// caller sees it.
    pub fn abort_after_writes(&self, n: u64) {
        self.abort_after_writes.store(n, Ordering::Relaxed);
    }

    pub(super) fn record(&self, verb: &'static str, resource: String, code: String) {
        let key = RequestKey {
            verb,
            resource,
            code,
        };
        let write = key.is_write();
        let mut counts = self.lock();
        *counts.entry(key).or_insert(0) += 1;
        let limit = self.abort_after_writes.load(Ordering::Relaxed);
        if write && limit != 0 {
            let writes: u64 = counts
                .iter()
                .filter(|(k, _)| k.is_write())
                .map(|(_, n)| n)
                .sum();
            if writes >= limit {
                eprintln!("aborting after write request {writes} (--abort-after-writes)");
                std::process::abort();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<RequestKey, u64>> {
        // Nothing panics while holding the lock, and the counts stay consistent if it did.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
