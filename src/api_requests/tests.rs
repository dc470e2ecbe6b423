use std::collections::BTreeMap;
use std::convert::Infallible;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tower::{Layer, Service};

use super::*;

#[allow(clippy::needless_pass_by_value)] // Reads as `c(Method::GET, path)` in the tables.
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
            &format!("{pods}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
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

#[test]
fn a_list_is_unbounded_without_a_limit_of_at_most_500() {
    for (verb, query, unbounded) in [
        ("list", None, true),
        ("list", Some("labelSelector=a%3Db"), true),
        ("list", Some("limit=0"), true),
        ("list", Some("limit=501"), true),
        ("list", Some("limit=abc"), true),
        ("list", Some("labelSelector=a&limit=500"), false),
        ("list", Some("limit=1&continue=x"), false),
        ("watch", None, false),
        ("get", None, false),
    ] {
        assert_eq!(unbounded_list(verb, query), unbounded, "{verb} {query:?}");
    }
}
