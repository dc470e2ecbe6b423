//! A small HTTP/1 server for the operator's own endpoints (probes and metrics, registry
//! notifications, and over TLS the admission webhook), built to be reached by any pod: each connection is served on its own
//! task by one handler, and none can be held open — headers (and the wait for the next
//! request on a kept-alive connection) must arrive within [`HEADER_LIMIT`], a handler
//! answers within [`HANDLER_LIMIT`], headers fit in 16 KiB, and at most [`MAX_CONNECTIONS`]
//! are open at once: past
//! that, a new connection takes the place of the oldest one still waiting for a request,
//! or is closed at once when every one is being served. An error accepting a connection
//! (no file descriptor left, say) is retried after a pause, never fatal.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to send a request's headers, and a kept-alive connection
/// may wait for its next request.
pub const HEADER_LIMIT: Duration = Duration::from_secs(10);
/// How long a handler may take (reading a body included).
pub const HANDLER_LIMIT: Duration = Duration::from_secs(10);
/// Most connections open at once, per endpoint.
pub const MAX_CONNECTIONS: usize = 256;
/// Most bytes buffered per connection (a request's headers must fit): 256 connections
/// hold at most a few MiB.
const READ_BUFFER: usize = 16 << 10;
/// The longest pause after a failed `accept`.
const MAX_ACCEPT_PAUSE: Duration = Duration::from_secs(1);

/// A plain-text response with status `code`.
pub fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = code;
    response
}

/// One open connection, as the server tracks it.
#[derive(Debug, Default)]
struct Connection {
    /// A request is being served.
    serving: AtomicBool,
    /// Told to close (another connection takes its place).
    close: Notify,
}

/// The open connections, oldest first.
#[derive(Debug, Default)]
struct Open {
    next: u64,
    connections: BTreeMap<u64, Arc<Connection>>,
}

impl Open {
    /// Makes room for a new connection; `None` when every open one is being served.
    fn admit(&mut self) -> Option<(u64, Arc<Connection>)> {
        if self.connections.len() >= MAX_CONNECTIONS {
            let waiting = self
                .connections
                .iter()
                .find(|(_, c)| !c.serving.load(Ordering::Acquire))
                .map(|(id, _)| *id)?;
            if let Some(evicted) = self.connections.remove(&waiting) {
                evicted.close.notify_one();
            }
        }
        let id = self.next;
        self.next += 1;
        let connection = Arc::new(Connection::default());
        self.connections.insert(id, Arc::clone(&connection));
        Some((id, connection))
    }
}

/// Removes a connection from the open ones when its task ends, however it ends.
struct Leaving {
    open: Arc<Mutex<Open>>,
    id: u64,
}

impl Drop for Leaving {
    fn drop(&mut self) {
        lock(&self.open).connections.remove(&self.id);
    }
}

/// Marks a connection as serving while a handler runs.
struct Serving(Arc<Connection>);

impl Serving {
    fn new(connection: &Arc<Connection>) -> Serving {
        connection.serving.store(true, Ordering::Release);
        Serving(Arc::clone(connection))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.store(false, Ordering::Release);
    }
}

fn lock(open: &Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
    // Each update is one insert or remove: a panicking holder left a whole map.
    open.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves `handle` on `listener` until the future is dropped; `what` names the endpoint in
/// logs.
pub async fn serve<F, Fut>(listener: tokio::net::TcpListener, what: &'static str, handle: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    serve_with(listener, what, None, handle).await;
}

/// [`serve`] over TLS: each connection's handshake with `tls` must end within
/// [`HEADER_LIMIT`].
pub async fn serve_tls<F, Fut>(
    listener: tokio::net::TcpListener,
    what: &'static str,
    tls: TlsAcceptor,
    handle: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    serve_with(listener, what, Some(tls), handle).await;
}

async fn serve_with<F, Fut>(
    listener: tokio::net::TcpListener,
    what: &'static str,
    tls: Option<TlsAcceptor>,
    handle: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    tracing::info!(addr = ?listener.local_addr().ok(), "serving {what}");
    let open = Arc::new(Mutex::new(Open::default()));
    let mut pause = Duration::ZERO;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                pause = Duration::ZERO;
                stream
            }
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was taken:
                // wait a little (the connections held time out), then go on.
                if pause.is_zero() {
                    tracing::warn!(error = %e, "{what}: cannot accept connections; retrying");
                }
                pause = (pause * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_PAUSE);
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let Some((id, connection)) = lock(&open).admit() else {
            tracing::debug!("{what}: every connection is being served; closing a new one");
            drop(stream);
            continue;
        };
        let leaving = Leaving {
            open: Arc::clone(&open),
            id,
        };
        let (handle, tls) = (handle.clone(), tls.clone());
        tokio::spawn(async move {
            let _leaving = leaving;
            match tls {
                None => serve_connection(stream, what, connection, handle).await,
                Some(tls) => match tokio::time::timeout(HEADER_LIMIT, tls.accept(stream)).await {
                    Ok(Ok(stream)) => serve_connection(stream, what, connection, handle).await,
                    Ok(Err(e)) => tracing::debug!(error = %e, "{what}: TLS handshake"),
                    Err(_) => tracing::debug!("{what}: no TLS handshake in time"),
                },
            }
        });
    }
}

/// Serves one connection's requests until it closes, or another connection takes its place.
async fn serve_connection<S, F, Fut>(
    stream: S,
    what: &'static str,
    connection: Arc<Connection>,
    handle: F,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let serving = Arc::clone(&connection);
    let service = hyper::service::service_fn(move |req| {
        let guard = Serving::new(&serving);
        let response = handle(req);
        async move {
            let response = tokio::time::timeout(HANDLER_LIMIT, response)
                .await
                .unwrap_or_else(|_| text(StatusCode::SERVICE_UNAVAILABLE, "no answer in time\n"));
            drop(guard);
            Ok::<_, Infallible>(response)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_LIMIT)
        .max_buf_size(READ_BUFFER)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        served = conn => {
            if let Err(e) = served {
                tracing::debug!(error = %e, "{what}: connection");
            }
        }
        () = connection.close.notified() => {
            tracing::debug!("{what}: a waiting connection closed for a new one");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_the_oldest_waiting_connection_makes_room() {
        let mut open = Open::default();
        let admitted: Vec<_> = (0..MAX_CONNECTIONS)
            .map(|_| open.admit().unwrap())
            .collect();
        // The two oldest are being served: the third oldest goes.
        admitted[0].1.serving.store(true, Ordering::Release);
        admitted[1].1.serving.store(true, Ordering::Release);
        let (id, _) = open.admit().unwrap();
        assert_eq!(id, MAX_CONNECTIONS as u64);
        assert_eq!(open.connections.len(), MAX_CONNECTIONS);
        assert!(!open.connections.contains_key(&2));
        assert!(open.connections.contains_key(&0) && open.connections.contains_key(&1));
        // Every one serving: a new connection is refused.
        for c in open.connections.values() {
            c.serving.store(true, Ordering::Release);
        }
        assert!(open.admit().is_none());
    }
}
