//! The write fence of a leader: writes pass only until a deadline that each successful
//! renewal of the Lease moves to the time the renewal was sent plus the renew deadline.
//! The renew deadline is shorter than the lease duration, and another replica takes over
//! only after a whole lease duration without a renewal as seen from its side, so the old
//! leader's writes end before a new leader's can begin — also when the old one was frozen
//! (`SIGSTOP`, a stalled node) and wakes up with reconciles half done: the deadline is on
//! the monotonic clock, which counts the frozen time, and every write request is checked
//! as it leaves.
//!
//! It acts twice on the operator's client. As a tower layer ([`Fence`] is one) it refuses
//! write requests — every verb but get, list and watch — while the fence is closed, with an
//! error that says why. And under the client's connections ([`super::fenced_client`]) it
//! refuses every write to a socket, so that not even a request that passed the layer just
//! before a freeze can leave after it. The elector renews the Lease through a client of
//! its own.

use std::future::{Ready, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::Either;
use http::Request;
use tower::{Layer, Service};

use crate::api_requests::{WRITE_VERBS, classify};

/// A write refused because the fence was closed.
#[derive(Debug, thiserror::Error)]
#[error("not sent: this replica's hold on the Lease has lapsed (it may no longer lead)")]
pub struct FenceClosed;

/// The fence; clones share it.
#[derive(Debug, Clone)]
pub struct Fence {
    inner: Arc<Deadline>,
}

#[derive(Debug)]
struct Deadline {
    base: Instant,
    /// Nanoseconds from `base` until which writes pass; 0: closed.
    until: AtomicU64,
}

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

impl Fence {
    /// A closed fence.
    pub fn new() -> Fence {
        Fence {
            inner: Arc::new(Deadline {
                base: Instant::now(),
                until: AtomicU64::new(0),
            }),
        }
    }

    /// Lets writes pass until `deadline` (never moving an open deadline backwards).
    pub fn open_until(&self, deadline: Instant) {
        let nanos = deadline
            .saturating_duration_since(self.inner.base)
            .as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        self.inner.until.fetch_max(nanos, Ordering::AcqRel);
    }

    /// Refuses every write from now on.
    pub fn close(&self) {
        self.inner.until.store(0, Ordering::Release);
    }

    /// Whether a write may leave at `at`.
    pub fn is_open_at(&self, at: Instant) -> bool {
        let until = self.inner.until.load(Ordering::Acquire);
        until != 0 && at < self.inner.base + Duration::from_nanos(until)
    }

    /// Whether a write may leave now.
    pub fn is_open(&self) -> bool {
        self.is_open_at(Instant::now())
    }
}

impl<S> Layer<S> for Fence {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.clone(),
        }
    }
}

/// The service made by the [`Fence`] layer.
#[derive(Debug, Clone)]
pub struct FencedService<S> {
    inner: S,
    fence: Fence,
}

/// Whether the fence applies to a request: a write, other than to a Lease.
pub fn is_fenced(method: &http::Method, path: &str, query: Option<&str>) -> bool {
    let (verb, resource) = classify(method, path, query);
    WRITE_VERBS.contains(&verb) && resource != "leases"
}

impl<S, B> Service<Request<B>> for FencedService<S>
where
    S: Service<Request<B>>,
    S::Error: From<FenceClosed>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if is_fenced(req.method(), req.uri().path(), req.uri().query()) && !self.fence.is_open() {
            tracing::warn!(method = %req.method(), path = req.uri().path(), "write refused: the Lease hold has lapsed");
            return Either::Left(ready(Err(FenceClosed.into())));
        }
        Either::Right(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn writes_pass_only_before_the_deadline_and_never_after_close() {
        let fence = Fence::new();
        let t0 = Instant::now();
        assert!(!fence.is_open_at(t0), "closed until first opened");
        fence.open_until(t0 + Duration::from_secs(10));
        assert!(fence.is_open_at(t0 + Duration::from_secs(9)));
        assert!(!fence.is_open_at(t0 + Duration::from_secs(10)));
        // A late renewal response cannot pull the deadline back.
        fence.open_until(t0 + Duration::from_secs(5));
        assert!(fence.is_open_at(t0 + Duration::from_secs(9)));
        fence.close();
        assert!(!fence.is_open_at(t0));
    }

    #[test]
    fn every_write_but_the_leases_own_is_fenced() {
        let pods = "/api/v1/namespaces/a/pods";
        assert!(is_fenced(&Method::POST, pods, None));
        assert!(is_fenced(&Method::DELETE, &format!("{pods}/p"), None));
        assert!(is_fenced(
            &Method::PATCH,
            "/apis/imagemap.dev/v1alpha1/namespaces/a/virtualmachines/v/status",
            None
        ));
        assert!(is_fenced(
            &Method::POST,
            "/apis/events.k8s.io/v1/namespaces/a/events",
            None
        ));
        assert!(!is_fenced(&Method::GET, pods, Some("watch=true")));
        assert!(!is_fenced(&Method::GET, pods, None));
        assert!(!is_fenced(
            &Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/l",
            None
        ));
    }

    #[tokio::test]
    async fn a_refused_write_is_never_sent() {
        use tower::ServiceExt;
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        let inner = tower::service_fn(move |_req: Request<()>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, tower::BoxError>(http::Response::new(())) }
        });
        let fence = Fence::new();
        let svc = fence.layer(inner);
        let write = || Request::post("/api/v1/namespaces/a/pods").body(()).unwrap();
        let err = svc.clone().oneshot(write()).await.unwrap_err();
        assert!(err.to_string().contains("Lease"), "{err}");
        assert_eq!(sent.load(Ordering::SeqCst), 0);
        let read = Request::get("/api/v1/namespaces/a/pods").body(()).unwrap();
        svc.clone().oneshot(read).await.unwrap();
        fence.open_until(Instant::now() + Duration::from_mins(1));
        svc.oneshot(write()).await.unwrap();
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }
}
