//! Which audit verb and resource a request is.

use http::Method;

use super::request_counts::OTHER_RESOURCE;

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

/// The most objects a LIST may ask for in one page: a LIST without a `limit`, or with a
/// larger one, is recorded as unbounded.
pub const MAX_LIST_LIMIT: u64 = 500;

/// Whether a request of `verb` with `query` is a LIST whose answer is not bounded to
/// [`MAX_LIST_LIMIT`] objects (no `limit`, `limit=0`, or a larger one).
pub fn unbounded_list(verb: &str, query: Option<&str>) -> bool {
    if verb != "list" {
        return false;
    }
    let limit = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("limit="))
        .and_then(|n| n.parse::<u64>().ok());
    !limit.is_some_and(|n| (1..=MAX_LIST_LIMIT).contains(&n))
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
