//! `/livez` and `/readyz` — liveness tied to the VM controller's progress and the watches,
//! readiness to synced caches — and `/metrics`. A replica standing by under leader election
//! is ready while it can take over (it has read the Lease lately) and live while its
//! elector makes progress: so two replicas are both Ready, and a Deployment of them is
//! Available and rolls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use tokio::sync::watch;

use crate::operator::observe::metrics::Metrics;

/// A reconcile running longer than this, or work waiting this long without a reconcile
/// starting, means the VM controller is wedged: the operator is not live.
pub const PROGRESS_LIMIT: Duration = Duration::from_mins(5);
/// Watches failing without a success for this long make the operator not live.
pub const WATCH_FAILURE_LIMIT: Duration = Duration::from_mins(5);

/// A replica standing by is not live when its elector has not looked at the Lease for
/// this long.
pub const ELECTOR_LIMIT: Duration = Duration::from_mins(5);

/// What the probes read. Times are seconds since start (0: never).
#[derive(Debug)]
pub struct Health {
    started: Instant,
    last_watch_ok: AtomicU64,
    last_watch_error: AtomicU64,
    caches_synced: AtomicBool,
    /// The VM controller runs (before, queued work waits for the caches by design).
    controller_running: AtomicBool,
    /// When work for the VM controller was first queued with no reconcile started since.
    unserved_since: AtomicU64,
    /// Start times of the reconciles running now, by a sequence number.
    in_flight: Mutex<BTreeMap<u64, u64>>,
    /// How many reconciles run now, for tasks that wait until none does.
    running_count: watch::Sender<usize>,
    next_reconcile: AtomicU64,
    /// Under leader election, while not leading.
    standing_by: AtomicBool,
    /// When the elector last read or wrote the Lease, and last looked at all.
    lease_seen: AtomicU64,
    elector_looked: AtomicU64,
    /// How stale a Lease read may be for a replica standing by to be ready (seconds).
    lease_fresh_for: AtomicU64,
    /// The replica serves admission: it is ready only once its rules are loaded.
    admits: AtomicBool,
    rules_loaded: AtomicBool,
    /// Stopping: no longer ready, whatever else holds.
    draining: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            started: Instant::now(),
            last_watch_ok: AtomicU64::new(0),
            last_watch_error: AtomicU64::new(0),
            caches_synced: AtomicBool::new(false),
            controller_running: AtomicBool::new(false),
            unserved_since: AtomicU64::new(0),
            in_flight: Mutex::new(BTreeMap::new()),
            running_count: watch::Sender::new(0),
            next_reconcile: AtomicU64::new(0),
            standing_by: AtomicBool::new(false),
            lease_seen: AtomicU64::new(0),
            elector_looked: AtomicU64::new(0),
            lease_fresh_for: AtomicU64::new(0),
            admits: AtomicBool::new(false),
            rules_loaded: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        }
    }
}

/// A reconcile in progress; it ends when this is dropped (finished or cancelled).
#[must_use]
pub struct InFlight<'a> {
    health: &'a Health,
    id: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut running = self.health.running();
        running.remove(&self.id);
        self.health.running_count.send_replace(running.len());
    }
}

impl Health {
    fn now(&self) -> u64 {
        self.started.elapsed().as_secs().max(1)
    }

    fn running(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        // Each update is one insert or remove: a panicking holder left a whole map.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The VM controller starts taking work.
    pub fn controller_started(&self) {
        self.unserved_since.store(0, Ordering::Relaxed);
        self.controller_running.store(true, Ordering::Relaxed);
    }

    /// Work for the VM controller was queued (a watch event or a trigger).
    pub fn demand(&self) {
        if !self.controller_running.load(Ordering::Relaxed) {
            return;
        }
        let _ = self.unserved_since.compare_exchange(
            0,
            self.now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The controller finished a request, successfully or not (a VM that was deleted
    /// meanwhile ends without a reconcile).
    pub fn progressed(&self) {
        self.unserved_since.store(0, Ordering::Relaxed);
    }

    /// A reconcile starts; it counts as running until the returned guard is dropped.
    pub fn reconcile_started(&self) -> InFlight<'_> {
        self.unserved_since.store(0, Ordering::Relaxed);
        let id = self.next_reconcile.fetch_add(1, Ordering::Relaxed);
        let mut running = self.running();
        running.insert(id, self.now());
        self.running_count.send_replace(running.len());
        InFlight { health: self, id }
    }

    /// How many reconciles run, as it changes.
    #[must_use]
    pub fn running_reconciles(&self) -> watch::Receiver<usize> {
        self.running_count.subscribe()
    }

    /// A watch delivered an event (`true`) or failed (`false`).
    pub fn watch_result(&self, ok: bool) {
        let slot = if ok {
            &self.last_watch_ok
        } else {
            &self.last_watch_error
        };
        slot.store(self.now(), Ordering::Relaxed);
    }

    /// The replica serves admission: it is ready only once what admission answers from is
    /// loaded.
    pub fn admits(&self) {
        self.admits.store(true, Ordering::Relaxed);
    }

    /// What admission answers from was loaded: the rules (compiled from every mapping and
    /// namespace), the digests the leader verified, and the certificate to serve.
    pub fn set_admission_loaded(&self) {
        self.rules_loaded.store(true, Ordering::Relaxed);
    }

    /// The replica stops: it is no longer ready, so that a Service stops sending to it.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Every cache has listed once (and so every CRD exists).
    pub fn set_synced(&self) {
        self.caches_synced.store(true, Ordering::Relaxed);
    }

    /// This replica stands by (`true`) or leads (`false`) under leader election, whose
    /// Lease a replica standing by must have read within `fresh_for` to be ready.
    pub fn stand_by(&self, standing_by: bool, fresh_for: Duration) {
        self.lease_fresh_for
            .store(fresh_for.as_secs().max(1), Ordering::Relaxed);
        self.standing_by.store(standing_by, Ordering::Relaxed);
    }

    /// The elector looked at the Lease; `read`: it read or wrote it.
    pub fn elector_looked(&self, read: bool) {
        let now = self.now();
        self.elector_looked.store(now, Ordering::Relaxed);
        if read {
            self.lease_seen.store(now, Ordering::Relaxed);
        }
    }

    /// `Ok` when live, else why not.
    pub fn live(&self) -> Result<(), String> {
        self.live_at(self.now())
    }

    /// [`Health::live`] at `now` seconds since start.
    fn live_at(&self, now: u64) -> Result<(), String> {
        if self.standing_by.load(Ordering::Relaxed) {
            let looked = self.elector_looked.load(Ordering::Relaxed);
            return if looked > 0 && now.saturating_sub(looked) > ELECTOR_LIMIT.as_secs() {
                Err(format!(
                    "standing by, but the Lease has not been looked at for {}s",
                    now - looked
                ))
            } else {
                Ok(())
            };
        }
        let limit = PROGRESS_LIMIT.as_secs();
        let oldest = self.running().values().min().copied();
        if let Some(started) = oldest
            && now.saturating_sub(started) > limit
        {
            return Err(format!(
                "a VirtualMachine reconcile has run for {}s",
                now - started
            ));
        }
        let unserved = self.unserved_since.load(Ordering::Relaxed);
        if unserved > 0 && now.saturating_sub(unserved) > limit {
            return Err(format!(
                "VirtualMachine work has waited {}s without a reconcile starting",
                now - unserved
            ));
        }
        let (ok, err) = (
            self.last_watch_ok.load(Ordering::Relaxed),
            self.last_watch_error.load(Ordering::Relaxed),
        );
        if err > ok && now.saturating_sub(ok) > WATCH_FAILURE_LIMIT.as_secs() {
            return Err(format!(
                "watches have failed for {}s without progress",
                now - ok
            ));
        }
        Ok(())
    }

    /// `Ok` when ready, else why not.
    pub fn ready(&self) -> Result<(), String> {
        self.ready_at(self.now())
    }

    fn ready_at(&self, now: u64) -> Result<(), String> {
        if self.draining.load(Ordering::Relaxed) {
            return Err("stopping".into());
        }
        if self.admits.load(Ordering::Relaxed) && !self.rules_loaded.load(Ordering::Relaxed) {
            return Err(
                "the rules, the leader's digests or the webhook's certificate are not read yet: admission waits for them"
                    .into(),
            );
        }
        if self.standing_by.load(Ordering::Relaxed) {
            let seen = self.lease_seen.load(Ordering::Relaxed);
            let fresh_for = self.lease_fresh_for.load(Ordering::Relaxed);
            return if seen > 0 && now.saturating_sub(seen) <= fresh_for {
                Ok(())
            } else if seen == 0 {
                Err("standing by: the Lease has not been read yet".into())
            } else {
                Err(format!(
                    "standing by, but the Lease has not been read for {}s: this replica could not take over",
                    now - seen
                ))
            };
        }
        if self.caches_synced.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(
                "caches not synced yet (are the CRDs installed? see `kubectl apply -f crds/`)"
                    .into(),
            )
        }
    }
}

fn respond(result: Result<(), String>) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => crate::operator::http_endpoint::text(StatusCode::OK, "ok\n"),
        Err(why) => crate::operator::http_endpoint::text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{why}\n"),
        ),
    }
}

/// Serves the probes and the metrics on `listener` until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, health: Arc<Health>, metrics: Arc<Metrics>) {
    crate::operator::http_endpoint::serve(listener, "/livez, /readyz and /metrics", move |req| {
        let response = match req.uri().path() {
            "/livez" | "/healthz" => respond(health.live()),
            "/readyz" => respond(health.ready()),
            "/metrics" => {
                let mut r = Response::new(Full::new(Bytes::from(metrics.render())));
                r.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                );
                r
            }
            _ => crate::operator::http_endpoint::text(StatusCode::NOT_FOUND, "not found\n"),
        };
        std::future::ready(response)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_count_follows_reconciles() {
        let health = Health::default();
        let count = health.running_reconciles();
        let first = health.reconcile_started();
        let second = health.reconcile_started();
        assert_eq!(*count.borrow(), 2);
        drop(first);
        assert_eq!(*count.borrow(), 1);
        drop(second);
        assert_eq!(*count.borrow(), 0);
    }

    #[test]
    fn readiness_follows_the_caches() {
        let h = Health::default();
        assert!(h.ready().is_err());
        h.set_synced();
        assert!(h.ready().is_ok());
    }

    #[test]
    fn an_idle_controller_is_live_and_a_wedged_one_is_not() {
        let h = Health::default();
        // Before the controller runs, queued work waits for the caches by design.
        h.demand();
        assert!(h.live_at(10_000).is_ok());
        h.controller_started();
        // Idle: no work, nothing running — live however long.
        assert!(h.live_at(10_000).is_ok());
        // Work queued and served.
        h.unserved_since.store(100, Ordering::Relaxed);
        assert!(h.live_at(399).is_ok());
        assert!(
            h.live_at(401)
                .unwrap_err()
                .contains("waited 301s without a reconcile starting")
        );
        let running = h.reconcile_started();
        assert_eq!(h.unserved_since.load(Ordering::Relaxed), 0);
        let started = h.running()[&running.id];
        assert!(h.live_at(started + 300).is_ok());
        assert!(
            h.live_at(started + 301)
                .unwrap_err()
                .contains("reconcile has run for 301s")
        );
        drop(running);
        assert!(h.live_at(started + 301).is_ok(), "finished: live again");
        // demand() keeps the first unserved time; any finished request serves it (a VM
        // deleted meanwhile is never reconciled).
        h.demand();
        let first = h.unserved_since.load(Ordering::Relaxed);
        assert!(first > 0);
        h.demand();
        assert_eq!(h.unserved_since.load(Ordering::Relaxed), first);
        h.progressed();
        assert!(h.live_at(first + 10_000).is_ok());
    }

    #[test]
    fn a_replica_standing_by_is_ready_while_it_reads_the_lease() {
        let h = Health::default();
        h.stand_by(true, Duration::from_secs(15));
        assert!(h.ready_at(10).unwrap_err().contains("not been read yet"));
        h.lease_seen.store(100, Ordering::Relaxed);
        h.elector_looked.store(100, Ordering::Relaxed);
        assert!(h.ready_at(115).is_ok(), "ready while it can take over");
        assert!(h.ready_at(116).unwrap_err().contains("could not take over"));
        assert!(h.live_at(400).is_ok());
        assert!(h.live_at(401).unwrap_err().contains("standing by"));
        // Leading: readiness follows the caches again.
        h.stand_by(false, Duration::from_secs(15));
        assert!(h.ready_at(115).is_err());
        h.set_synced();
        assert!(h.ready_at(115).is_ok());
    }

    #[test]
    fn failing_watches_without_progress_are_fatal() {
        let h = Health::default();
        h.last_watch_ok.store(100, Ordering::Relaxed);
        h.last_watch_error.store(150, Ordering::Relaxed);
        assert!(
            h.live_at(120).is_ok(),
            "a recent watch failure is not yet fatal"
        );
        assert!(
            h.live_at(401)
                .unwrap_err()
                .contains("watches have failed for 301s")
        );
        h.last_watch_ok.store(400, Ordering::Relaxed);
        assert!(h.live_at(401).is_ok(), "progress after the failures");
    }
}
