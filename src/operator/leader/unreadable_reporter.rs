//! Reports the objects the operator cannot read (`read::watches::invalid_objects`): each is
//! logged, counted in `imagemap_invalid_objects_total`, and a Warning Event on it says what
//! to fix.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::core::v1::ObjectReference;

use crate::operator::observe::metrics::Metrics;
use crate::operator::replica::watches::invalid_objects::Unreadable;
use crate::operator::writes::event_recorder::EventRecorder;

/// Event reason of an object the operator cannot read.
pub const INVALID_OBJECT: &str = "InvalidObject";

/// The Event's object reference for `u`.
fn regarding(u: &Unreadable) -> ObjectReference {
    let meta = &u.object.metadata;
    ObjectReference {
        api_version: Some(u.api_version.clone()),
        kind: Some(u.kind.clone()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// Reports each unreadable object (in the log, `metrics` and a Warning Event through
/// `recorder`), until the watches stop.
pub async fn report(
    mut unreadable: UnboundedReceiver<Unreadable>,
    metrics: Arc<Metrics>,
    recorder: EventRecorder,
) {
    while let Some(u) = unreadable.next().await {
        let meta = &u.object.metadata;
        tracing::warn!(
            kind = %u.kind,
            namespace = ?meta.namespace,
            name = ?meta.name,
            error = %crate::core::excerpt::excerpt(&u.object.error),
            "cannot read object; skipped until it is fixed"
        );
        metrics.invalid_object();
        let message = format!(
            "imagemap cannot read this {}: {}; it is ignored until it is fixed",
            u.kind,
            crate::core::excerpt::excerpt(&u.object.error)
        );
        recorder.warn(regarding(&u), INVALID_OBJECT, message).await;
    }
}
