//! The writes of objects the operator reconciles: statuses by server-side apply with one
//! field manager (skipped when nothing changed), and pod creates, deletes and metadata
//! patches.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The field manager of the operator's status applies and pod writes.
pub const FIELD_MANAGER: &str = "imagemap.dev/operator";

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The object changed.
    Changed,
    /// Nothing to write: the object already held it (or already had it done).
    Unchanged,
    /// The object is gone.
    Gone,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Server-side applies `status` to the status subresource of `name`, unless `current` (the
/// cached status) already equals it.
pub async fn apply_status<K, S>(
    api: &Api<K>,
    name: &str,
    current: Option<&S>,
    status: &S,
) -> Result<Written, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(Written::Unchanged);
    }
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch_status(name, &params, &Patch::Apply(&patch)).await {
        Ok(_) => Ok(Written::Changed),
        Err(e) if is_status(&e, 404) => Ok(Written::Gone),
        Err(e) => Err(e),
    }
}

/// Creates a pod; one that already exists (a reconcile that crashed after creating it:
/// pod names are deterministic) is not an error.
pub async fn create_pod(api: &Api<Pod>, pod: &Pod) -> Result<Written, kube::Error> {
    match api.create(&PostParams::default(), pod).await {
        Ok(_) => Ok(Written::Changed),
        Err(e) if is_status(&e, 409) => Ok(Written::Unchanged),
        Err(e) => Err(e),
    }
}

/// Puts the label naming its VM back on a runner pod that lost it (someone edited the
/// pod), so that the pod cache, which selects runner pods by that label, holds it again;
/// `uid` is a precondition (another pod of that name is left alone: 409).
pub async fn relabel_pod(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    vm: &str,
) -> Result<Written, kube::Error> {
    patch_pod_metadata(
        api,
        name,
        uid,
        &json!({"labels": {crate::core::runner_pod::VM_LABEL: vm}}),
    )
    .await
}

/// Merges `metadata` (labels, annotations) into pod `name` if it is still the pod of `uid`.
pub async fn patch_pod_metadata(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    metadata: &serde_json::Value,
) -> Result<Written, kube::Error> {
    let mut metadata = metadata.clone();
    metadata["uid"] = json!(uid);
    let patch = json!({ "metadata": metadata });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Written::Changed),
        // Gone, or another pod of that name now.
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(Written::Gone),
        Err(e) => Err(e),
    }
}

/// What deleting a pod did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodDeletion {
    /// The pod is gone: deleted at once.
    Gone,
    /// The pod was gone already (404).
    NotFound,
    /// The pod terminates first: its deletion event follows when it is gone.
    Terminating,
    /// Another pod of that name exists (the UID precondition failed): nothing was deleted.
    Replaced,
}

/// Whether a DELETE's response shows the pod gone: the API server returns the object as it
/// was deleted, with a grace period of 0 and no finalizers left, when it removed it at once.
fn gone(pod: &Pod) -> bool {
    pod.metadata.deletion_grace_period_seconds == Some(0) && pod.finalizers().is_empty()
}

/// Deletes a pod with a UID precondition (and `grace`, when given, as its grace period);
/// the response says whether it is gone.
pub async fn delete_pod(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    grace: Option<u32>,
) -> Result<PodDeletion, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        grace_period_seconds: grace,
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(either) => Ok(match either.left() {
            Some(pod) if !gone(&pod) => PodDeletion::Terminating,
            _ => PodDeletion::Gone,
        }),
        Err(e) if is_status(&e, 404) => Ok(PodDeletion::NotFound),
        Err(e) if is_status(&e, 409) => Ok(PodDeletion::Replaced),
        Err(e) => Err(e),
    }
}
