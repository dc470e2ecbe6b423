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
//! A LIST without a `limit` of at most [`MAX_LIST_LIMIT`] is also recorded apart, by
//! resource ([`ApiRequests::unbounded_lists`]), when it is sent.
//! The layer sits outside kube's own retry layer: a request that kube retried (429/503/504) is
//! counted once, with the status of the last attempt.

mod classify;
mod layer;
mod request_counts;

pub use classify::{MAX_LIST_LIMIT, classify, unbounded_list};
pub use layer::{ApiRequestsLayer, ApiRequestsService, ResponseFuture, client_with_counter};
pub use request_counts::{ApiRequests, OTHER_RESOURCE, RequestKey, WRITE_VERBS};

#[cfg(test)]
mod tests;
