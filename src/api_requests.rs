//! Counting the API requests a kube [`Client`] makes, by verb, resource and HTTP status code.
//!
//! [`client_with_counter`] builds a client equal to `Client::try_from(config)` with an
//! [`ApiRequestsLayer`] on top of its stack; the returned [`ApiRequests`] handle reads the
//! counts. Verbs and resources follow the Kubernetes audit vocabulary (`list`, `watch`, `get`,
//! `create`, `update`, `patch`, `delete`, `deletecollection`; `pods`, `virtualmachines/status`)
//! so that they line up with the API server's own `apiserver_request_total` metric. Object names
//! and namespaces never appear in a key, so the number of keys stays small.
//!
//! A request is recorded once, when its response headers arrive (code `"200"`, `"404"`, ...), when
//! the inner service fails (code `"error"`), or when the caller drops the request before either
//! (code `"cancelled"`). A watch is therefore counted when its stream opens, not when it ends.
//! The layer sits outside kube's own retry layer: a request that kube retried (429/503/504) is
//! counted once, with the status of the last attempt.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use http::{Method, Request, Response};
use kube::client::ClientBuilder;
use kube::{Client, Config};
use tower::{Layer, Service};

/// The verbs that change state on the server.
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The resource label of requests outside the resource API (discovery, `/version`, `/healthz`, ...).
pub const OTHER_RESOURCE: &str = "other";

/// What one counted request is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The audit verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for requests outside the resource API the lower case HTTP method.
    pub verb: &'static str,
    /// The plural resource with its subresource, e.g. `pods`, `virtualmachines/status`;
    /// [`OTHER_RESOURCE`] for requests outside the resource API.
    pub resource: String,
    /// The HTTP status code (`"200"`), `"error"` when no response came back, or `"cancelled"`
    /// when the request was dropped before its response.
    pub code: String,
}

impl RequestKey {
    /// Whether the verb is one of [`WRITE_VERBS`].
    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb)
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.verb, self.resource, self.code)
    }
}

/// Shared request counts; cheap to clone (all clones count into the same table).
#[derive(Debug, Clone, Default)]
pub struct ApiRequests {
    counts: Arc<Mutex<BTreeMap<RequestKey, u64>>>,
}

impl ApiRequests {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tower layer that counts into this table, for `ClientBuilder::with_layer`.
    pub fn layer(&self) -> ApiRequestsLayer {
        ApiRequestsLayer {
            requests: self.clone(),
        }
    }

    /// A copy of all counts so far.
    pub fn snapshot(&self) -> BTreeMap<RequestKey, u64> {
        self.lock().clone()
    }

    /// The number of requests so far whose key matches `pred`.
    pub fn count(&self, pred: impl Fn(&RequestKey) -> bool) -> u64 {
        self.lock()
            .iter()
            .filter(|(key, _)| pred(key))
            .map(|(_, n)| n)
            .sum()
    }

    /// The number of write requests ([`WRITE_VERBS`]) so far, whatever their outcome.
    pub fn writes(&self) -> u64 {
        self.count(RequestKey::is_write)
    }

    /// The number of requests so far.
    pub fn total(&self) -> u64 {
        self.count(|_| true)
    }

    /// Forgets all counts so far.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn record(&self, verb: &'static str, resource: String, code: String) {
        *self
            .lock()
            .entry(RequestKey {
                verb,
                resource,
                code,
            })
            .or_insert(0) += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<RequestKey, u64>> {
        // Nothing panics while holding the lock, and the counts stay consistent if it did.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
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

/// The tower layer counting requests into an [`ApiRequests`].
#[derive(Debug, Clone)]
pub struct ApiRequestsLayer {
    requests: ApiRequests,
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

/// Classifies a request like the API server's audit log does: the verb, and the plural resource
/// with its subresource (`pods`, `virtualmachines/status`). Requests outside the resource API
/// (`/api`, `/apis/<group>/<version>`, `/version`, ...) get the lower case HTTP method as verb
/// and [`OTHER_RESOURCE`] as resource.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let Some(target) = resource_target(path) else {
        return (non_resource_verb(method), OTHER_RESOURCE.to_owned());
    };
    let watch = target.watch_prefix || query.is_some_and(has_watch_param);
    let verb = match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if target.has_name => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if target.has_name => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, target.resource)
}

/// The resource part of a resource API path.
struct Target {
    /// `resource` or `resource/subresource`.
    resource: String,
    /// Whether the path names one object (rather than a collection).
    has_name: bool,
    /// Whether the path used the deprecated `/watch/` prefix.
    watch_prefix: bool,
}

/// Parses `/api/v1/[watch/][namespaces/<ns>/]<resource>[/<name>[/<subresource>[/...]]]` and the
/// same under `/apis/<group>/<version>/`, like `k8s.io/apiserver`'s `RequestInfoFactory`.
fn resource_target(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut rest: &[&str] = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    let watch_prefix = if let ["watch", tail @ ..] = rest {
        rest = tail;
        true
    } else {
        false
    };
    // `namespaces/<ns>/<resource>...` is a namespaced resource, except that `namespaces/<name>`,
    // `namespaces/<name>/status` and `namespaces/<name>/finalize` are the namespaces resource.
    if let ["namespaces", _namespace, tail @ ..] = rest
        && let [resource, ..] = tail
        && !matches!(*resource, "status" | "finalize")
    {
        rest = tail;
    }
    match rest {
        [] => None,
        [resource] => Some(Target {
            resource: (*resource).to_owned(),
            has_name: false,
            watch_prefix,
        }),
        [resource, _name] => Some(Target {
            resource: (*resource).to_owned(),
            has_name: true,
            watch_prefix,
        }),
        [resource, _name, subresource, ..] => Some(Target {
            resource: format!("{resource}/{subresource}"),
            has_name: true,
            watch_prefix,
        }),
    }
}

/// Whether a query string's first `watch` parameter is a true value (Go's `strconv.ParseBool`).
fn has_watch_param(query: &str) -> bool {
    query
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .find(|(key, _)| *key == "watch")
        .is_some_and(|(_, value)| matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// The audit verb of a request outside the resource API: its lower case method.
fn non_resource_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn c(method: Method, path_and_query: &str) -> (&'static str, String) {
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        classify(&method, path, query)
    }

    fn is(verb: &'static str, resource: &str) -> (&'static str, String) {
        (verb, resource.to_owned())
    }

    #[test]
    fn core_namespaced() {
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/pods"),
            is("list", "pods")
        );
        assert_eq!(
            c(
                Method::GET,
                "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=500"
            ),
            is("list", "pods")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/pods/p"),
            is("get", "pods")
        );
        assert_eq!(
            c(Method::POST, "/api/v1/namespaces/ns/pods?fieldManager=x"),
            is("create", "pods")
        );
        assert_eq!(
            c(Method::PUT, "/api/v1/namespaces/ns/pods/p"),
            is("update", "pods")
        );
        assert_eq!(
            c(Method::PATCH, "/api/v1/namespaces/ns/pods/p"),
            is("patch", "pods")
        );
        assert_eq!(
            c(Method::DELETE, "/api/v1/namespaces/ns/pods/p"),
            is("delete", "pods")
        );
        assert_eq!(
            c(Method::DELETE, "/api/v1/namespaces/ns/pods?labelSelector=a"),
            is("deletecollection", "pods")
        );
        assert_eq!(
            c(Method::POST, "/api/v1/namespaces/ns/events"),
            is("create", "events")
        );
    }

    #[test]
    fn all_namespaces_and_cluster_scoped() {
        assert_eq!(c(Method::GET, "/api/v1/pods"), is("list", "pods"));
        assert_eq!(c(Method::GET, "/api/v1/nodes/n1"), is("get", "nodes"));
        assert_eq!(
            c(Method::GET, "/api/v1/nodes/n1/proxy/metrics"),
            is("get", "nodes/proxy")
        );
        assert_eq!(
            c(
                Method::GET,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            ),
            is("list", "customresourcedefinitions")
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.example.com"
            ),
            is("patch", "customresourcedefinitions")
        );
    }

    #[test]
    fn namespaces_resource() {
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces"),
            is("list", "namespaces")
        );
        assert_eq!(
            c(Method::POST, "/api/v1/namespaces"),
            is("create", "namespaces")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns"),
            is("get", "namespaces")
        );
        assert_eq!(
            c(Method::DELETE, "/api/v1/namespaces/ns"),
            is("delete", "namespaces")
        );
        assert_eq!(
            c(Method::PUT, "/api/v1/namespaces/ns/status"),
            is("update", "namespaces/status")
        );
        assert_eq!(
            c(Method::PUT, "/api/v1/namespaces/ns/finalize"),
            is("update", "namespaces/finalize")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces?watch=true"),
            is("watch", "namespaces")
        );
        // A resource inside a namespace called "namespaces" is still that resource.
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/namespaces/pods"),
            is("list", "pods")
        );
    }

    #[test]
    fn custom_resources_and_subresources() {
        let vms = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines";
        assert_eq!(c(Method::GET, vms), is("list", "virtualmachines"));
        assert_eq!(
            c(Method::GET, &format!("{vms}/vm")),
            is("get", "virtualmachines")
        );
        assert_eq!(
            c(
                Method::PATCH,
                &format!("{vms}/vm/status?fieldManager=imagemap")
            ),
            is("patch", "virtualmachines/status")
        );
        assert_eq!(
            c(Method::PUT, &format!("{vms}/vm/status")),
            is("update", "virtualmachines/status")
        );
        assert_eq!(
            c(Method::GET, &format!("{vms}/vm/status")),
            is("get", "virtualmachines/status")
        );
        assert_eq!(
            c(Method::POST, "/api/v1/namespaces/ns/pods/p/eviction"),
            is("create", "pods/eviction")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/pods/p/log?follow=true"),
            is("get", "pods/log")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/pods/p/proxy/a/b/c"),
            is("get", "pods/proxy")
        );
        assert_eq!(
            c(
                Method::PUT,
                "/apis/apps/v1/namespaces/ns/deployments/d/scale"
            ),
            is("update", "deployments/scale")
        );
    }

    #[test]
    fn watches() {
        let pods = "/api/v1/namespaces/ns/pods";
        assert_eq!(
            c(Method::GET, &format!("{pods}?watch=true")),
            is("watch", "pods")
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}?watch=1")),
            is("watch", "pods")
        );
        assert_eq!(
            c(
                Method::GET,
                &format!(
                    "{pods}?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=12"
                )
            ),
            is("watch", "pods")
        );
        assert_eq!(
            c(
                Method::GET,
                &format!(
                    "{pods}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                )
            ),
            is("watch", "pods")
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}?watch=false")),
            is("list", "pods")
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}?watch=0")),
            is("list", "pods")
        );
        assert_eq!(c(Method::GET, &format!("{pods}?watch")), is("list", "pods"));
        assert_eq!(
            c(Method::GET, &format!("{pods}?watchy=true")),
            is("list", "pods")
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}?nowatch=true")),
            is("list", "pods")
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}?fieldSelector=watch%3Dtrue")),
            is("list", "pods")
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}/p?watch=true")),
            is("watch", "pods")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/watch/namespaces/ns/pods"),
            is("watch", "pods")
        );
        assert_eq!(
            c(Method::GET, "/apis/kubevirt.io/v1/watch/virtualmachines"),
            is("watch", "virtualmachines")
        );
        assert_eq!(
            c(Method::GET, "/api/v1/watch/namespaces/ns"),
            is("watch", "namespaces")
        );
        // `watch` only changes reads.
        assert_eq!(
            c(Method::DELETE, &format!("{pods}?watch=true")),
            is("deletecollection", "pods")
        );
    }

    #[test]
    fn non_resource_paths() {
        assert_eq!(c(Method::GET, "/api"), is("get", OTHER_RESOURCE));
        assert_eq!(c(Method::GET, "/api/v1"), is("get", OTHER_RESOURCE));
        assert_eq!(c(Method::GET, "/apis"), is("get", OTHER_RESOURCE));
        assert_eq!(
            c(Method::GET, "/apis/kubevirt.io"),
            is("get", OTHER_RESOURCE)
        );
        assert_eq!(
            c(Method::GET, "/apis/kubevirt.io/v1"),
            is("get", OTHER_RESOURCE)
        );
        assert_eq!(
            c(Method::GET, "/apis/kubevirt.io/v1/"),
            is("get", OTHER_RESOURCE)
        );
        assert_eq!(c(Method::GET, "/version"), is("get", OTHER_RESOURCE));
        assert_eq!(c(Method::GET, "/healthz"), is("get", OTHER_RESOURCE));
        assert_eq!(
            c(Method::GET, "/openapi/v3/apis/kubevirt.io/v1"),
            is("get", OTHER_RESOURCE)
        );
        assert_eq!(c(Method::POST, "/"), is("post", OTHER_RESOURCE));
        assert_eq!(c(Method::GET, ""), is("get", OTHER_RESOURCE));
        assert_eq!(c(Method::GET, "/api/v1/watch"), is("get", OTHER_RESOURCE));
    }

    #[test]
    fn odd_paths_and_methods() {
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/pods/"),
            is("list", "pods")
        );
        assert_eq!(c(Method::GET, "//api//v1/pods/p"), is("get", "pods"));
        assert_eq!(c(Method::HEAD, "/api/v1/pods/p"), is("get", "pods"));
        assert_eq!(c(Method::OPTIONS, "/api/v1/pods"), is("other", "pods"));
        assert_eq!(
            c(Method::OPTIONS, "/version"),
            is("options", OTHER_RESOURCE)
        );
    }

    #[test]
    fn no_names_or_namespaces_in_labels() {
        for (method, path) in [
            (Method::GET, "/api/v1/namespaces/secret-ns/pods/secret-name"),
            (
                Method::PATCH,
                "/apis/kubevirt.io/v1/namespaces/secret-ns/virtualmachines/secret-name/status",
            ),
            (Method::DELETE, "/api/v1/namespaces/secret-ns"),
        ] {
            let (_, resource) = classify(
                &method,
                path,
                Some("fieldSelector=metadata.name%3Dsecret-name"),
            );
            assert!(!resource.contains("secret"), "{path}: {resource}");
        }
    }

    #[test]
    fn counts() {
        let requests = ApiRequests::new();
        let clone = requests.clone();
        clone.record("list", "pods".into(), "200".into());
        clone.record("list", "pods".into(), "200".into());
        clone.record("patch", "virtualmachines/status".into(), "200".into());
        clone.record("create", "events".into(), "error".into());
        clone.record("get", "pods".into(), "404".into());
        assert_eq!(requests.total(), 5);
        assert_eq!(requests.writes(), 2);
        assert_eq!(requests.count(|k| k.verb == "list"), 2);
        assert_eq!(requests.count(|k| k.resource == "pods"), 3);
        let snapshot = requests.snapshot();
        assert_eq!(snapshot.len(), 4);
        let key = RequestKey {
            verb: "list",
            resource: "pods".into(),
            code: "200".into(),
        };
        assert_eq!(snapshot.get(&key), Some(&2));
        assert_eq!(key.to_string(), "list pods 200");
        requests.reset();
        assert_eq!(clone.total(), 0);
    }

    /// A service answering every request with the status code in its `x-status` header, or an
    /// error when there is none.
    #[derive(Clone)]
    struct Echo;

    impl Service<Request<()>> for Echo {
        type Response = Response<()>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<Response<()>, &'static str>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<()>) -> Self::Future {
            let result = match req.headers().get("x-status") {
                Some(status) => {
                    let status = status.to_str().unwrap().parse::<u16>().unwrap();
                    let mut response = Response::new(());
                    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                    Ok(response)
                }
                None => Err("connection refused"),
            };
            std::future::ready(result)
        }
    }

    fn request(method: Method, uri: &str, status: Option<u16>) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(status) = status {
            builder = builder.header("x-status", status);
        }
        builder.body(()).unwrap()
    }

    #[tokio::test]
    async fn layer_records_status_error_and_cancellation() {
        use tower::ServiceExt as _;

        let requests = ApiRequests::new();
        let service = requests.layer().layer(Echo);
        let pods = "/api/v1/namespaces/ns/pods";

        let ok = service
            .clone()
            .oneshot(request(Method::GET, pods, Some(200)))
            .await;
        assert_eq!(ok.map(|r| r.status().as_u16()), Ok(200));
        let conflict = service
            .clone()
            .oneshot(request(Method::PUT, &format!("{pods}/p"), Some(409)))
            .await;
        assert_eq!(conflict.map(|r| r.status().as_u16()), Ok(409));
        let err = service
            .clone()
            .oneshot(request(
                Method::POST,
                "https://example.test:6443/api/v1/namespaces/ns/events",
                None,
            ))
            .await;
        assert_eq!(err.map(|_| ()), Err("connection refused"));

        // Dropped before it was polled: counted as cancelled, once.
        let mut svc = service.clone();
        let future = svc.call(request(
            Method::GET,
            &format!("{pods}?watch=true"),
            Some(200),
        ));
        drop(future);

        // Polled to completion and then dropped: counted once, not as cancelled as well.
        let future = svc.call(request(Method::DELETE, &format!("{pods}/p"), Some(200)));
        let _ = future.await;

        let expected: BTreeMap<RequestKey, u64> = [
            (("list", "pods", "200"), 1),
            (("update", "pods", "409"), 1),
            (("create", "events", "error"), 1),
            (("watch", "pods", "cancelled"), 1),
            (("delete", "pods", "200"), 1),
        ]
        .into_iter()
        .map(|((verb, resource, code), n)| {
            (
                RequestKey {
                    verb,
                    resource: resource.into(),
                    code: code.into(),
                },
                n,
            )
        })
        .collect();
        assert_eq!(requests.snapshot(), expected);
        assert_eq!(requests.writes(), 3);
    }

    #[test]
    fn layer_over_infallible_services_compiles() {
        fn assert_service<S: Service<Request<kube::client::Body>>>(_: &S) {}
        let service = tower::service_fn(|_: Request<kube::client::Body>| async {
            Ok::<_, Infallible>(Response::new(kube::client::Body::empty()))
        });
        assert_service(&ApiRequests::new().layer().layer(service));
    }

    #[tokio::test]
    #[ignore = "needs a control plane: run scripts/test"]
    async fn counts_a_real_clients_requests() {
        use futures::TryStreamExt as _;
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
        use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, WatchParams};

        let config = Config::infer().await.unwrap();
        let (client, requests) = client_with_counter(config).unwrap();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let key = |verb, resource: &str, code: &str| RequestKey {
            verb,
            resource: resource.to_owned(),
            code: code.to_owned(),
        };

        namespaces.list(&ListParams::default()).await.unwrap();
        namespaces.get("default").await.unwrap();
        assert!(
            config_maps
                .get_opt("api-requests-absent")
                .await
                .unwrap()
                .is_none()
        );
        let name = format!("api-requests-{}", std::process::id());
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        config_maps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        assert!(
            config_maps
                .create(&PostParams::default(), &cm)
                .await
                .is_err()
        );
        config_maps
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        let stream = config_maps
            .watch(&WatchParams::default().timeout(1), "0")
            .await
            .unwrap();
        let _ = stream.try_collect::<Vec<_>>().await;

        let snapshot = requests.snapshot();
        let expected: BTreeMap<RequestKey, u64> = [
            (key("list", "namespaces", "200"), 1),
            (key("get", "namespaces", "200"), 1),
            (key("get", "configmaps", "404"), 1),
            (key("create", "configmaps", "201"), 1),
            (key("create", "configmaps", "409"), 1),
            (key("delete", "configmaps", "200"), 1),
            (key("watch", "configmaps", "200"), 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(snapshot, expected);
        assert_eq!(requests.writes(), 3);
        assert_eq!(requests.count(|k| k.verb == "list"), 1);
    }
}
