//! Evicts a pod through the Eviction API (`pods/eviction`) with a UID precondition — a
//! StatefulSet's replacement has the same name, and must not be evicted in its place — so
//! that PodDisruptionBudgets hold. Never a delete. What the API server answered is told
//! apart: evicted, gone already, held by a budget (429, to retry with backoff), or refused
//! (the 500 of a pod under two budgets, and any other error).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, EvictParams, Preconditions};
use kube::{Api, Client};

use crate::core::excerpt::excerpt;

/// How long an eviction may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What came of an eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// The pod is being deleted, its grace period honoured.
    Done,
    /// It was gone already, or is another pod now (the precondition failed).
    Gone,
    /// A PodDisruptionBudget does not allow it now: the API server's words (naming the
    /// budget).
    Budget(String),
    /// Refused, and retrying soon would not help (two budgets over the pod, a forbidden
    /// eviction): the API server's words.
    Refused(String),
    /// Failed (no answer in time, a connection error): to retry with backoff.
    Failed(String),
}

/// Evicts the pod `name` of `namespace` if it is still `uid`, with `client` (one kube does
/// not retry).
pub async fn evict(client: &Client, namespace: &str, name: &str, uid: &str) -> Eviction {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    match tokio::time::timeout(TIMEOUT, pods.evict(name, &params)).await {
        Ok(Ok(_)) => Eviction::Done,
        Ok(Err(kube::Error::Api(status))) => match status.code {
            404 | 409 => Eviction::Gone,
            429 => Eviction::Budget(cause(&status)),
            500 | 403 | 422 => Eviction::Refused(cause(&status)),
            _ => Eviction::Failed(cause(&status)),
        },
        Ok(Err(e)) => Eviction::Failed(excerpt(&e.to_string())),
        Err(_) => Eviction::Failed(format!("no answer in {} s", TIMEOUT.as_secs())),
    }
}

/// The API server's words: the first cause's message (a budget names itself there), else
/// the status message; an excerpt.
fn cause(status: &kube::core::Status) -> String {
    let first = status
        .details
        .as_ref()
        .and_then(|d| d.causes.first())
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty());
    excerpt(first.unwrap_or(&status.message))
}
