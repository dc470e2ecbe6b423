//! What the caches keep of each object: only the fields the operator reads, so that memory
//! grows by a small, fixed amount per VM and per pod, and one copy of what many objects hold
//! alike. (Pods are read into a type of their own, [`CachedPod`].)

use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::core::api::{ClusterImageMapping, ImageMapping, ResolvedImage, VirtualMachine};
use crate::operator::replica::watches::cached_pod::CachedPod;
use crate::operator::replica::watches::interner::{Interner, Shareable};
use crate::operator::watch_toolkit::cache_events::Projection;

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
        if let Some(status) = self.status.as_mut() {
            share(&mut status.resolved_images, &RESOLVED_IMAGES);
            share(&mut status.conditions, &CONDITIONS);
        }
        compact(self);
    }
}

impl Shareable for Condition {
    fn hash_into(&self, state: &mut impl Hasher) {
        self.type_.hash(state);
        self.status.hash(state);
        self.reason.hash(state);
        self.message.hash(state);
        self.last_transition_time.0.hash(state);
        self.observed_generation.hash(state);
    }
}

impl Shareable for ResolvedImage {
    fn hash_into(&self, state: &mut impl Hasher) {
        self.hash(state);
    }
}

/// The VMs' conditions: equal among VMs whose state changed within the same second.
static CONDITIONS: LazyLock<Interner<Condition>> = LazyLock::new(Interner::default);
/// The VMs' resolved images: equal among VMs that ask for the same images.
static RESOLVED_IMAGES: LazyLock<Interner<ResolvedImage>> = LazyLock::new(Interner::default);

/// Replaces each of `values` with the copy `interner` shares.
fn share<T: Shareable + Clone>(values: &mut [Arc<T>], interner: &Interner<T>) {
    for value in values {
        *value = interner.intern(Arc::clone(value));
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
