//! The runner pod cache: every event of a runner pod updates the pod index and asks for a
//! reconcile of the VM that controls it.

use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::api::{GROUP, VirtualMachine};
use crate::operator::vms::pod_expectations::PodExpectations;
use crate::operator::vms::trigger::Trigger;
use crate::operator::vms::writes::{Written, relabel_pod};
use crate::operator::watches::cache_events::CacheEvent;
use crate::operator::watches::cached_pod::CachedPod;
use crate::operator::watches::pod_index::PodIndex;

/// The VM whose controller owner reference `pod` carries.
#[must_use]
pub fn owner_vm(pod: &impl ResourceExt) -> Option<ObjectRef<VirtualMachine>> {
    let owner = pod.owner_references().iter().find(|o| {
        o.controller == Some(true)
            && o.kind == "VirtualMachine"
            && o.api_version.split('/').next() == Some(GROUP)
    })?;
    let vm = ObjectRef::new(&owner.name);
    Some(match pod.namespace() {
        Some(ns) => vm.within(&ns),
        None => vm,
    })
}

/// Whether a pod the cache dropped may still exist: the watch selects runner pods by their
/// label, and a pod that lost it leaves the watch as "deleted" without the deletion
/// timestamp every real deletion carries (a re-list can drop a pod the same way).
fn maybe_unlabelled(pod: &CachedPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
}

/// Runs until `events` (the pod cache's changes) ends. A runner pod that may only have
/// lost its label gets it back (through `client`), so its VM never gets a second pod.
pub async fn run(
    events: impl Stream<Item = CacheEvent<CachedPod>>,
    client: Client,
    index: Arc<PodIndex>,
    expectations: Arc<PodExpectations>,
    trigger: Trigger,
) {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            CacheEvent::ListStarted(scope) => expectations.list_started(scope),
            CacheEvent::Listed(scope) => expectations.listed(scope),
            CacheEvent::Applied(pod) => observed(&pod, &index, &expectations, &trigger, true),
            CacheEvent::Deleted(pod) => {
                if maybe_unlabelled(&pod)
                    && let Some(vm) = owner_vm(&pod)
                {
                    let api: Api<Pod> = Api::namespaced(
                        client.clone(),
                        vm.namespace.as_deref().unwrap_or_default(),
                    );
                    let uid = pod.uid().unwrap_or_default();
                    match relabel_pod(&api, &pod.name_any(), &uid, &vm.name).await {
                        // Back in the cache with its next event: nothing was deleted.
                        Ok(Written::Changed) => {
                            tracing::info!(pod = %pod.name_any(), %vm, "runner pod had lost its label; put it back");
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(pod = %pod.name_any(), %vm, error = %e, "could not put a runner pod's label back");
                        }
                    }
                }
                observed(&pod, &index, &expectations, &trigger, false);
            }
            // Pods are validated by the API server: every one is readable.
            CacheEvent::Invalid(_) | CacheEvent::InvalidGone(_) => {}
        }
    }
}

fn observed(
    pod: &CachedPod,
    index: &PodIndex,
    expectations: &PodExpectations,
    trigger: &Trigger,
    exists: bool,
) {
    let Some(vm) = owner_vm(pod) else { return };
    let name = pod.name_any();
    if exists {
        index.insert(vm.clone(), name.clone());
    } else {
        index.remove(&vm, &name);
    }
    expectations.observed(
        &vm,
        &name,
        !exists || pod.metadata.deletion_timestamp.is_some(),
    );
    trigger.reconcile(vm);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(owner: OwnerReference) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.namespace = Some("dev".into());
        p.metadata.owner_references = Some(vec![owner]);
        p
    }

    #[test]
    fn only_a_controlling_virtual_machine_owns_a_pod() {
        let owner = OwnerReference {
            api_version: "imagemap.dev/v1alpha1".into(),
            kind: "VirtualMachine".into(),
            name: "vm".into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        };
        assert_eq!(
            owner_vm(&pod(owner.clone())),
            Some(ObjectRef::new("vm").within("dev"))
        );
        let not_controller = OwnerReference {
            controller: None,
            ..owner.clone()
        };
        assert_eq!(owner_vm(&pod(not_controller)), None);
        let other_group = OwnerReference {
            api_version: "neonvm.io/v1".into(),
            ..owner
        };
        assert_eq!(owner_vm(&pod(other_group)), None);
    }
}
