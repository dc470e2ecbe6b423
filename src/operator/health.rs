//! `/livez` and `/readyz` (liveness tied to real progress, readiness to synced caches) and
//! `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The operator loop must tick at least this often to be live.
pub const HEARTBEAT_LIMIT: Duration = Duration::from_secs(60);
/// Watches failing without a success for this long make the operator not live.
pub const WATCH_FAILURE_LIMIT: Duration = Duration::from_secs(300);

/// What the probes read. Times are seconds since start (0: never).
#[derive(Debug)]
pub struct Health {
    started: Instant,
    heartbeat: AtomicU64,
    last_watch_ok: AtomicU64,
    last_watch_error: AtomicU64,
    caches_synced: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            started: Instant::now(),
            heartbeat: AtomicU64::new(0),
            last_watch_ok: AtomicU64::new(0),
            last_watch_error: AtomicU64::new(0),
            caches_synced: AtomicBool::new(false),
        }
    }
}

impl Health {
    fn now(&self) -> u64 {
        self.started.elapsed().as_secs().max(1)
    }

    /// The operator's main loop is alive.
    pub fn beat(&self) {
        self.heartbeat.store(self.now(), Ordering::Relaxed);
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

    /// Every cache has listed once (and so every CRD exists).
    pub fn set_synced(&self, synced: bool) {
        self.caches_synced.store(synced, Ordering::Relaxed);
    }

    /// `Ok` when live, else why not.
    pub fn live(&self) -> Result<(), String> {
        self.live_at(self.now())
    }

    /// [`Health::live`] at `now` seconds since start.
    fn live_at(&self, now: u64) -> Result<(), String> {
        let beat = self.heartbeat.load(Ordering::Relaxed);
        let grace = HEARTBEAT_LIMIT.as_secs();
        if now > grace && now.saturating_sub(beat) > grace {
            return Err(format!("the operator loop has not run for {}s", now - beat));
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
    let (code, body) = match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    resp
}

/// Serves the probes on `listener` until the future is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    progress: Arc<super::Progress>,
) -> std::io::Result<()> {
    tracing::info!(addr = ?listener.local_addr().ok(), "serving /livez, /readyz and /metrics");
    loop {
        let (stream, _) = listener.accept().await?;
        let progress = Arc::clone(&progress);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let progress = Arc::clone(&progress);
                async move {
                    let health = &progress.health;
                    Ok::<_, Infallible>(match req.uri().path() {
                        "/livez" | "/healthz" => respond(health.live()),
                        "/readyz" => respond(health.ready()),
                        "/metrics" => {
                            let mut r =
                                Response::new(Full::new(Bytes::from(progress.metrics.render())));
                            r.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static(
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                ),
                            );
                            r
                        }
                        _ => {
                            let mut r = respond(Err("not found".into()));
                            *r.status_mut() = StatusCode::NOT_FOUND;
                            r
                        }
                    })
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "probe connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_caches_and_liveness_the_watches() {
        let h = Health::default();
        assert!(h.ready().is_err());
        h.set_synced(true);
        assert!(h.ready().is_ok());
        // Young: live even before the first heartbeat; later, a missing heartbeat is fatal.
        assert!(h.live_at(10).is_ok());
        assert!(h.live_at(61).unwrap_err().contains("has not run"));
        h.heartbeat.store(100, Ordering::Relaxed);
        h.last_watch_ok.store(100, Ordering::Relaxed);
        h.last_watch_error.store(150, Ordering::Relaxed);
        assert!(
            h.live_at(120).is_ok(),
            "a recent watch failure is not yet fatal"
        );
        h.heartbeat.store(401, Ordering::Relaxed);
        assert!(
            h.live_at(401)
                .unwrap_err()
                .contains("watches have failed for 301s")
        );
        h.last_watch_ok.store(400, Ordering::Relaxed);
        assert!(h.live_at(401).is_ok(), "progress after the failures");
    }
}
