//! Objects the operator cannot read — a tenant wrote something the CRD accepts but the
//! operator's types do not (an integer out of range in an extra init container, say). Each
//! is skipped, never blocking its watch; it is logged, counted in
//! `imagemap_invalid_objects_total`, and a Warning Event on it says what to fix.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::error_boundary::InvalidObject;

use crate::operator::context::Context;

/// Event reason of an object the operator cannot read.
pub const INVALID_OBJECT: &str = "InvalidObject";

/// An unreadable object and the kind it was watched as.
#[derive(Debug)]
pub struct Unreadable {
    pub api_version: String,
    pub kind: String,
    pub object: Box<InvalidObject>,
}

/// Where the watches send unreadable objects, and the stream the reporter reads.
#[must_use]
pub fn channel() -> (UnboundedSender<Unreadable>, UnboundedReceiver<Unreadable>) {
    unbounded()
}

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

/// Reports each unreadable object, until the watches stop.
pub async fn report(ctx: Arc<Context>, mut unreadable: UnboundedReceiver<Unreadable>) {
    while let Some(u) = unreadable.next().await {
        let meta = &u.object.metadata;
        tracing::warn!(
            kind = %u.kind,
            namespace = ?meta.namespace,
            name = ?meta.name,
            error = %crate::excerpt::excerpt(&u.object.error),
            "cannot read object; skipped until it is fixed"
        );
        ctx.observers.metrics.invalid_object();
        let message = format!(
            "imagemap cannot read this {}: {}; it is ignored until it is fixed",
            u.kind,
            crate::excerpt::excerpt(&u.object.error)
        );
        ctx.recorder
            .warn(regarding(&u), INVALID_OBJECT, message)
            .await;
    }
}
