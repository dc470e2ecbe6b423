//! The endpoint registries post push notifications to (`--registry-notifications-*`):
//! a pushed tag that VMs follow is checked at once instead of at the next poll. Requests
//! must carry the configured bearer token; what they say is only a hint (see
//! [`crate::registry::push`]). Every replica serves it; one that does not lead answers 503
//! with `Retry-After`, which registries retry — so a Service in front of all replicas
//! reaches the leader without knowing which it is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use crate::operator::http_endpoint::text;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::options::token_file::TokenFile;
use crate::registry::Registries;
use crate::registry::push::{authorized, pushed_tags};

/// The largest envelope read.
const BODY_LIMIT: usize = 1 << 20;

/// Notifications refused so far, and when (seconds since the first) that was last said.
static REFUSED: AtomicU64 = AtomicU64::new(0);
static LAST_WARNED: AtomicU64 = AtomicU64::new(0);
static STARTED: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// How soon a registry should send again a notification a replica that does not lead
/// refused (seconds).
const RETRY_AFTER: &str = "5";

/// What a notification acts on: the followed tags, checked now at their registries (the
/// cluster's local registry renames what was pushed to it).
#[derive(Debug, Clone)]
pub struct Pushed {
    pub followed: Arc<FollowedTags>,
    pub registries: Arc<Registries>,
}

/// What the endpoint acts on while the operator runs (leads).
#[derive(Default)]
pub struct Running(RwLock<Option<Pushed>>);

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Running")
            .field(&self.get().is_some())
            .finish()
    }
}

impl Running {
    /// The operator runs, acting on `pushed` (`None`: it stopped, or does not lead).
    pub fn set(&self, pushed: Option<Pushed>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = pushed;
    }

    fn get(&self) -> Option<Pushed> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Serves notifications on `listener`, acting on the operator while `running` holds it,
/// until the future is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    token: Arc<TokenFile>,
    running: Arc<Running>,
) {
    crate::operator::http_endpoint::serve(listener, "registry notifications", move |req| {
        let (token, running) = (Arc::clone(&token), Arc::clone(&running));
        async move { handle(req, &token.token(), &running).await }
    })
    .await;
}

async fn handle(req: Request<Incoming>, token: &str, running: &Running) -> Response<Full<Bytes>> {
    if req.method() != Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST registry notifications here",
        );
    }
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !authorized(header, token) {
        // Any pod may send these: said at most once a minute, with how many.
        let refused = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
        let now = STARTED.elapsed().as_secs().max(1);
        let last = LAST_WARNED.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= 60)
            && LAST_WARNED
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                refused,
                "registry notifications refused: missing or wrong bearer token"
            );
        }
        return text(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    let Some(ctx) = running.get() else {
        let mut response = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica does not lead: retry (another one takes notifications)",
        );
        response.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static(RETRY_AFTER),
        );
        return response;
    };
    let Ok(body) = Limited::new(req.into_body(), BODY_LIMIT).collect().await else {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "envelope too large or cut short",
        );
    };
    let tags = match pushed_tags(&body.to_bytes()) {
        Ok(tags) => tags,
        Err(e) => return text(StatusCode::BAD_REQUEST, crate::core::excerpt::excerpt(&e)),
    };
    let now = Instant::now();
    // A push to the cluster's local registry by any of its names is one to its own name.
    let local = ctx.registries.local_registry();
    let mut followed = 0;
    for pushed in tags {
        let tag = local
            .as_ref()
            .and_then(|l| l.rename(&pushed))
            .unwrap_or(pushed)
            .to_string();
        if ctx.followed.check_now(&tag, now) {
            tracing::info!(reference = %tag, "pushed: checking the followed tag now");
            followed += 1;
        }
    }
    if followed > 0 {
        ctx.followed.wake.notify_one();
    }
    text(StatusCode::OK, "")
}
