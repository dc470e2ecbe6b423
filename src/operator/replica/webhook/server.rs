//! The webhook's HTTPS endpoint: `POST /mutate-pods` takes an AdmissionReview of at most
//! [`BODY_LIMIT`] bytes (a large pod's review is over 1 MiB, and the ephemeral-container
//! update carries the pod twice), with at most [`IN_FLIGHT`] bytes of requests read at once
//! over every connection — a request waits at most 1 s for room among them, and its body must
//! arrive within 3 s, so stalled senders never hold the budget past the API server's 5 s —;
//! it is hardened like the operator's other endpoints (header and handler timeouts, a
//! connection cap).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio_rustls::TlsAcceptor;

use crate::operator::http_endpoint::{serve_tls, text};
use crate::operator::observe::metrics::Metrics;
use crate::operator::replica::webhook::bytes_in_flight::BytesInFlight;
use crate::operator::replica::webhook::handler::Admitter;

/// The path the webhook configuration names.
pub const PATH: &str = "/mutate-pods";
/// The largest AdmissionReview read.
pub const BODY_LIMIT: usize = 6 << 20;
/// Most bytes of requests read at once, over every connection.
pub const IN_FLIGHT: usize = 64 << 20;
/// How long a request may wait for room among the bytes in flight.
const BODY_WAIT: Duration = Duration::from_secs(1);
/// How long a request's body may take to arrive, counted from its headers (the API server
/// gives up after 5 s).
const BODY_READ: Duration = Duration::from_secs(3);

/// When the endpoint last took a request, and whether it drains: while it does, every
/// answer closes its connection, so that no client keeps one to a replica that stops.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    /// Milliseconds since `started` (0: never).
    last_request: AtomicU64,
    draining: AtomicBool,
    /// When draining began, in milliseconds since `started`.
    drain_started: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            started: Instant::now(),
            last_request: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            drain_started: AtomicU64::new(0),
        }
    }
}

impl Activity {
    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn request(&self) {
        self.last_request.store(self.now(), Ordering::Relaxed);
    }

    /// From now on, every answer closes its connection (the first call starts the drain).
    pub fn drain(&self) {
        let _ = self.drain_started.compare_exchange(
            0,
            self.now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        self.draining.store(true, Ordering::Relaxed);
    }

    /// How long the drain has lasted.
    #[must_use]
    pub fn draining_for(&self) -> Duration {
        let started = self.drain_started.load(Ordering::Relaxed);
        Duration::from_millis(self.now().saturating_sub(started))
    }

    /// How long since the last request or the start of the drain, whichever came later.
    #[must_use]
    pub fn idle(&self) -> Duration {
        let last = self
            .last_request
            .load(Ordering::Relaxed)
            .max(self.drain_started.load(Ordering::Relaxed));
        Duration::from_millis(self.now().saturating_sub(last))
    }
}

/// Serves admission on `listener` with `tls`, answering from `admitter` and counting into
/// `metrics`, until the future is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: TlsAcceptor,
    admitter: Admitter,
    metrics: Arc<Metrics>,
    activity: Arc<Activity>,
) {
    let state = Arc::new((admitter, metrics, BytesInFlight::new(IN_FLIGHT)));
    serve_tls(listener, "admission webhook", tls, move |req| {
        let (state, activity) = (Arc::clone(&state), Arc::clone(&activity));
        async move {
            activity.request();
            let (admitter, metrics, in_flight) = &*state;
            let mut response = handle(req, admitter, metrics, in_flight).await;
            if activity.draining.load(Ordering::Relaxed) {
                response.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            response
        }
    })
    .await;
}

async fn handle(
    req: Request<Incoming>,
    admitter: &Admitter,
    metrics: &Metrics,
    in_flight: &BytesInFlight,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    if req.uri().path() != PATH {
        return text(
            StatusCode::NOT_FOUND,
            format!("admission is served at {PATH}\n"),
        );
    }
    if req.method() != Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST AdmissionReviews here\n",
        );
    }
    let length = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if length.is_some_and(|l| l > BODY_LIMIT) {
        metrics.admitted("error", started.elapsed().as_secs_f64(), 0, 0);
        return text(StatusCode::PAYLOAD_TOO_LARGE, too_large());
    }
    // Slow or stalled senders never hold the bytes in flight past the API server's timeout,
    // and a review that fits never waits behind a larger one.
    let Some(_reading) = in_flight
        .reserve(length.unwrap_or(BODY_LIMIT), BODY_WAIT)
        .await
    else {
        metrics.admitted("error", started.elapsed().as_secs_f64(), 0, 0);
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many bytes in flight: retry\n",
        );
    };
    let body = tokio::time::timeout(
        BODY_READ.saturating_sub(started.elapsed()),
        Limited::new(req.into_body(), BODY_LIMIT).collect(),
    )
    .await;
    let body = match body {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => {
            metrics.admitted("error", started.elapsed().as_secs_f64(), 0, 0);
            return text(StatusCode::PAYLOAD_TOO_LARGE, too_large());
        }
        Err(_) => {
            metrics.admitted("error", started.elapsed().as_secs_f64(), 0, 0);
            return text(
                StatusCode::REQUEST_TIMEOUT,
                "the review did not arrive in time\n",
            );
        }
    };
    let answer = admitter.answer(&body.to_bytes());
    let seconds = started.elapsed().as_secs_f64();
    match answer {
        Ok(answered) => {
            metrics.admitted(
                answered.result,
                seconds,
                u64::try_from(answered.unpinned).unwrap_or(u64::MAX),
                u64::try_from(answered.dry_run).unwrap_or(u64::MAX),
            );
            metrics.warned(&answered.warned);
            let mut response = Response::new(Full::new(Bytes::from(answered.body)));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(e) => {
            metrics.admitted("error", seconds, 0, 0);
            tracing::debug!(error = %e, "admission request refused");
            text(StatusCode::BAD_REQUEST, format!("{e}\n"))
        }
    }
}

fn too_large() -> String {
    format!("an AdmissionReview takes at most {BODY_LIMIT} bytes\n")
}
