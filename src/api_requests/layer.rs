//! The tower layer that counts each request of a kube client once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use tower::{Layer, Service};

use kube::client::ClientBuilder;
use kube::{Client, Config};

use super::classify::{classify, unbounded_list};
use super::request_counts::ApiRequests;

/// The tower layer counting requests into an [`ApiRequests`].
#[derive(Debug, Clone)]
pub struct ApiRequestsLayer {
    pub(super) requests: ApiRequests,
}

impl<S> Layer<S> for ApiRequestsLayer {
    type Service = ApiRequestsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiRequestsService {
            inner,
            requests: self.requests.clone(),
        }
    }
}

/// The service made by [`ApiRequestsLayer`].
#[derive(Debug, Clone)]
pub struct ApiRequestsService<S> {
    inner: S,
    requests: ApiRequests,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ApiRequestsService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri().path(), req.uri().query());
        if unbounded_list(verb, req.uri().query()) {
            self.requests.record_unbounded_list(&resource);
        }
        ResponseFuture {
            inner: Box::pin(self.inner.call(req)),
            pending: Some(Pending {
                requests: self.requests.clone(),
                verb,
                resource,
            }),
        }
    }
}

/// The response future of [`ApiRequestsService`]; records the request when it completes or is
/// dropped.
pub struct ResponseFuture<F> {
    inner: Pin<Box<F>>,
    pending: Option<Pending>,
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(self.inner.as_mut().poll(cx));
        if let Some(pending) = self.pending.take() {
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_owned(),
            };
            pending.finish(code);
        }
        Poll::Ready(result)
    }
}

impl<F> Drop for ResponseFuture<F> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.finish("cancelled".to_owned());
        }
    }
}

/// A request not recorded yet.
#[derive(Debug)]
struct Pending {
    requests: ApiRequests,
    verb: &'static str,
    resource: String,
}

impl Pending {
    fn finish(self, code: String) {
        self.requests.record(self.verb, self.resource, code);
    }
}

impl ApiRequests {
    /// A tower layer that counts into this table, for `ClientBuilder::with_layer`.
    pub fn layer(&self) -> ApiRequestsLayer {
        ApiRequestsLayer {
            requests: self.clone(),
        }
    }
}

/// Builds a client like `Client::try_from(config)` (same connector, TLS, auth, retry and
/// tracing stack) that also counts its requests into the returned [`ApiRequests`].
///
/// Like `Client::try_from`, it must be called within a Tokio runtime.
pub fn client_with_counter(config: Config) -> Result<(Client, ApiRequests), kube::Error> {
    let requests = ApiRequests::new();
    let client = ClientBuilder::try_from(config)?
        .with_layer(&requests.layer())
        .build();
    Ok((client, requests))
}
