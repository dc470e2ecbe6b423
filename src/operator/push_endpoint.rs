//! The endpoint registries post push notifications to (`--registry-notifications-*`):
//! a pushed tag that VMs follow is checked at once instead of at the next poll. Requests
//! must carry the configured bearer token; what they say is only a hint (see
//! [`crate::registry::push`]).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::Context;
use super::http_endpoint::text;
use super::token_file::TokenFile;
use crate::registry::push::{authorized, pushed_tags};

/// The largest envelope read.
const BODY_LIMIT: usize = 1 << 20;

/// Serves notifications on `listener` until the operator stops.
pub async fn serve(listener: tokio::net::TcpListener, token: Arc<TokenFile>, ctx: Arc<Context>) {
    super::http_endpoint::serve(listener, "registry notifications", move |req| {
        let (token, ctx) = (Arc::clone(&token), Arc::clone(&ctx));
        async move { handle(req, &token.token(), &ctx).await }
    })
    .await;
}

async fn handle(req: Request<Incoming>, token: &str, ctx: &Context) -> Response<Full<Bytes>> {
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
        tracing::warn!("registry notification refused: missing or wrong bearer token");
        return text(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    let Ok(body) = Limited::new(req.into_body(), BODY_LIMIT).collect().await else {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "envelope too large or cut short",
        );
    };
    let tags = match pushed_tags(&body.to_bytes()) {
        Ok(tags) => tags,
        Err(e) => return text(StatusCode::BAD_REQUEST, crate::excerpt::excerpt(&e)),
    };
    let now = Instant::now();
    let mut followed = 0;
    for tag in &tags {
        if ctx.followed.check_now(tag, now) {
            tracing::info!(reference = %tag, "pushed: checking the followed tag now");
            followed += 1;
        }
    }
    if followed > 0 {
        ctx.followed.wake.notify_one();
    }
    text(StatusCode::OK, "")
}
