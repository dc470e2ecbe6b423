//! What the caches keep of each object: only the fields the operator reads, so that memory
//! grows by a small, fixed amount per VM and per pod. (Pods are read into a type of their
//! own, [`CachedPod`].)

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::operator::watches::cached_pod::CachedPod;

/// What a cache keeps of an object of a kind.
pub trait Projection {
    /// Drops what the operator never reads.
    fn project(&mut self);
}

impl Projection for CachedPod {
    fn project(&mut self) {
        CachedPod::project(self);
        compact(self);
    }
}

impl Projection for Namespace {
    fn project(&mut self) {
        namespace(self);
    }
}

// Every field of these is read (the spec to build pods and resolve, the status to compare).
impl Projection for VirtualMachine {
    fn project(&mut self) {
        metadata(&mut self.metadata);
        compact(self);
    }
}

impl Projection for ImageMapping {
    fn project(&mut self) {
        metadata(&mut self.metadata);
    }
}

impl Projection for ClusterImageMapping {
    fn project(&mut self) {
        metadata(&mut self.metadata);
    }
}

/// Reallocates `object` at its size: a JSON parser grows lists as it reads them (five
/// conditions take the room of eight) — for a cached VM and its pod, 1.4 KiB of 6.9
/// (tests/footprint.rs), kept for as long as the object is cached.
fn compact<K: Clone>(object: &mut K) {
    *object = object.clone();
}

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reader of any kind needs: managed fields and kubectl's copy of the object.
pub fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// A namespace as `namespaceSelector`s read it: its name and labels.
pub fn namespace(ns: &mut Namespace) {
    ns.metadata = ObjectMeta {
        name: ns.metadata.name.take(),
        labels: ns.metadata.labels.take(),
        resource_version: ns.metadata.resource_version.take(),
        uid: ns.metadata.uid.take(),
        ..ObjectMeta::default()
    };
    ns.spec = None;
    ns.status = None;
}
