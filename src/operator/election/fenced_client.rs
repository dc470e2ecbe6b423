//! The leader's API client, fenced at the socket: every write to a connection's socket —
//! TLS records included — is checked against the [`Fence`] right before it is made. A check
//! any earlier (when a request is issued, or when its connection task starts a turn) leaves
//! a window: a process frozen after the check resumes and sends what it had in hand.
//!
//! The stack is kube's own (`kube::Client::try_from`: the same TLS, timeouts, auth, extra
//! headers and retries), built here because kube offers no other way to put something
//! between its connector and the socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::fence::{Fence, FenceClosed};
use crate::api_requests::ApiRequests;

/// A client like `kube::Client::try_from(config)` whose sockets take bytes only while
/// `fence` is open; it also refuses writes early with a clear error ([`Fence`] as a layer),
/// and counts its requests into `requests`.
pub fn fenced_client(
    config: &Config,
    fence: &Fence,
    requests: &ApiRequests,
) -> Result<Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let fenced = FencedConnector {
        inner: http,
        fence: fence.clone(),
    };
    let https = config.rustls_https_connector_with_connector(fenced)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper_client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper_client)
        .map_response(|response: http::Response<hyper::body::Incoming>| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        })
        .boxed();
    Ok(
        ClientBuilder::new(service, config.default_namespace.clone())
            .with_layer(fence)
            .with_layer(&requests.layer())
            .build(),
    )
}

/// Wraps each connection a connector makes in a [`FencedStream`].
#[derive(Debug, Clone)]
pub struct FencedConnector<C> {
    inner: C,
    fence: Fence,
}

type Connecting<T, E> = Pin<Box<dyn Future<Output = Result<FencedStream<T>, E>> + Send>>;

impl<C> Service<Uri> for FencedConnector<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
    C::Response: 'static,
{
    type Response = FencedStream<C::Response>;
    type Error = C::Error;
    type Future = Connecting<C::Response, C::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let fence = self.fence.clone();
        Box::pin(async move {
            let inner = connecting.await?;
            Ok(FencedStream { inner, fence })
        })
    }
}

/// A socket that refuses every write once the fence is closed.
#[derive(Debug)]
pub struct FencedStream<T> {
    inner: T,
    fence: Fence,
}

impl<T> FencedStream<T> {
    fn check(&self) -> io::Result<()> {
        if self.fence.is_open() {
            Ok(())
        } else {
            Err(io::Error::other(FenceClosed))
        }
    }
}

impl<T: Read + Unpin> Read for FencedStream<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for FencedStream<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for FencedStream<T> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use hyper_util::rt::TokioIo;
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn write(
        stream: &mut FencedStream<TokioIo<tokio::io::DuplexStream>>,
        bytes: &[u8],
    ) -> io::Result<usize> {
        std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write(cx, bytes)).await
    }

    #[tokio::test]
    async fn a_socket_takes_bytes_only_while_the_fence_is_open() {
        let (near, mut far) = tokio::io::duplex(64);
        let fence = Fence::new();
        let mut stream = FencedStream {
            inner: TokioIo::new(near),
            fence: fence.clone(),
        };
        assert!(
            write(&mut stream, b"early").await.is_err(),
            "closed until opened"
        );
        fence.open_until(Instant::now() + Duration::from_mins(1));
        assert_eq!(write(&mut stream, b"sent").await.unwrap(), 4);
        fence.close();
        let refused = write(&mut stream, b"late").await.unwrap_err();
        assert!(refused.to_string().contains("Lease"), "{refused}");
        drop(stream);
        let mut got = String::new();
        far.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "sent");
    }
}
