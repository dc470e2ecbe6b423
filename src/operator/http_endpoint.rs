//! A small HTTP/1 server for the operator's own endpoints (probes and metrics, registry
//! notifications): each connection served on its own task by one handler.

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// Serves `handle` on `listener` until the future is dropped; `what` names the endpoint in
/// logs.
/// A plain-text response with status `code`.
pub fn text(code: hyper::StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = code;
    response
}

pub async fn serve<F, Fut>(
    listener: tokio::net::TcpListener,
    what: &'static str,
    handle: F,
) -> std::io::Result<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    tracing::info!(addr = ?listener.local_addr().ok(), "serving {what}");
    loop {
        let (stream, _) = listener.accept().await?;
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = handle(req);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "{what}: connection");
            }
        });
    }
}
