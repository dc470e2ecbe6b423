//! The runner pod cache: every event of a runner pod updates the pod index and asks for a
//! reconcile of the VM that controls it — or, when the pod is gone and a replacement waited
//! for it, hands the replacement over to be created at once.

use std::sync::Arc;

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::{Api, Client};

use crate::core::api::GROUP;
use crate::core::namespaced_name::NamespacedName;
use crate::operator::leader::vms::pod_expectations::PodExpectations;
use crate::operator::leader::vms::replacements::{Replacement, Replacements};
use crate::operator::leader::vms::trigger::Trigger;
use crate::operator::replica::watches::cached_pod::CachedPod;
use crate::operator::replica::watches::pod_index::PodIndex;
use crate::operator::watch_toolkit::cache_events::CacheEvent;
use crate::operator::writes::requests::{Written, relabel_pod};

/// The VM whose controller owner reference `pod` carries.
#[must_use]
pub fn owner_vm(pod: &impl ResourceExt) -> Option<NamespacedName> {
    let owner = pod.owner_references().iter().find(|o| {
        o.controller == Some(true)
            && o.kind == "VirtualMachine"
            && o.api_version.split('/').next() == Some(GROUP)
    })?;
    Some(NamespacedName::new(
        &pod.namespace().unwrap_or_default(),
        &owner.name,
    ))
}

/// Whether a pod the cache dropped may still exist: the watch selects runner pods by their
/// label, and a pod that lost it leaves the watch as "deleted" without the deletion
/// timestamp every real deletion carries (a re-list can drop a pod the same way).
fn maybe_unlabelled(pod: &CachedPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
}

/// What the pod watcher updates and whom it tells.
pub struct Watcher {
    pub client: Client,
    pub index: Arc<PodIndex>,
    pub expectations: Arc<PodExpectations>,
    pub replacements: Arc<Replacements>,
    /// Where a replacement goes once the pod it waited for is gone.
    pub hand_over: UnboundedSender<Replacement>,
    pub trigger: Trigger,
}

/// Runs until `events` (the pod cache's changes) ends. A runner pod that may only have
/// lost its label gets it back (through `client`), so its VM never gets a second pod; a
/// pod gone that a replacement waited for hands the replacement over.
pub async fn run(events: impl Stream<Item = CacheEvent<CachedPod>>, w: Watcher) {
    let Watcher {
        client,
        index,
        expectations,
        replacements,
        hand_over,
        trigger,
    } = w;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            CacheEvent::ListStarted(scope) => expectations.list_started(scope),
            CacheEvent::Listed(scope) => expectations.listed(scope),
            CacheEvent::Applied(pod) => {
                observed(&pod, &index, &expectations, true);
                if let Some(vm) = owner_vm(&pod) {
                    trigger.reconcile(&vm);
                }
            }
            CacheEvent::Deleted(pod) => {
                if maybe_unlabelled(&pod)
                    && let Some(vm) = owner_vm(&pod)
                {
                    let api: Api<Pod> = Api::namespaced(client.clone(), &vm.namespace);
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
                observed(&pod, &index, &expectations, false);
                let Some(vm) = owner_vm(&pod) else { continue };
                match replacements.take_when_gone(&vm, &pod.name_any()) {
                    // Its VM is reconciled once the replacement is created.
                    Some(replacement) => {
                        if let Err(e) = hand_over.unbounded_send(replacement) {
                            // The creator stopped (the operator stops): the reconcile
                            // creates it.
                            trigger.reconcile(&e.into_inner().vm);
                        }
                    }
                    None => trigger.reconcile(&vm),
                }
            }
            // Pods are validated by the API server: every one is readable.
            CacheEvent::Invalid(_) | CacheEvent::InvalidGone(_) => {}
        }
    }
}

fn observed(pod: &CachedPod, index: &PodIndex, expectations: &PodExpectations, exists: bool) {
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
            Some(NamespacedName::new("dev", "vm"))
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
