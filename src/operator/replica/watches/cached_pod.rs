//! A runner pod as the pod cache keeps it: a type of its own that reads only the fields the
//! operator uses, so that neither the cache nor a list of thousands of pods holds the rest.
//! Specs and statuses are shared between pods that have equal ones (pods of VMs asking for
//! the same images, running alike).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition,
    PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::{Deserialize, Serialize};

use crate::core::runner_pod::{IMAGES_HASH_ANNOTATION, RESTART_COUNT_ANNOTATION, VM_LABEL};
use kube::core::error_boundary::InvalidObject;

use crate::operator::replica::watches::interner::{Interner, Shareable};
use crate::operator::watch_toolkit::cache_events::Arrival;

/// A container's name and image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedContainer {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    #[serde(default)]
    pub init_containers: Vec<CachedContainer>,
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
    /// Whether a deletion waits for the kubelet (see [`crate::core::runner_pod::MIN_GRACE_SECONDS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// A condition's type and status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

/// When a container that ended had started and finished.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedTerminated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// A container's state, as far as it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<CachedTerminated>,
}

/// A container status's name, readiness, and when it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedContainerStatus {
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<CachedContainerState>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default)]
    pub conditions: Vec<CachedCondition>,
    #[serde(default)]
    pub container_statuses: Vec<CachedContainerStatus>,
    #[serde(default)]
    pub init_container_statuses: Vec<CachedContainerStatus>,
}

/// What the operator reads of a runner pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CachedPod {
    pub metadata: ObjectMeta,
    /// The label and annotations the operator reads, moved out of `metadata` by
    /// [`CachedPod::project`].
    #[serde(skip)]
    pub kept: KeptMetadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Arc<CachedPodSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Arc<CachedPodStatus>>,
}

/// The label and annotations of a runner pod the operator reads, each kept as its value: a
/// label or annotation map costs over half a KiB per pod, even with one entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptMetadata {
    /// The VM label's value.
    pub vm: Option<String>,
    pub images_hash: Option<String>,
    pub restart_count: Option<String>,
}

impl Shareable for CachedPodSpec {
    fn hash_into(&self, state: &mut impl Hasher) {
        for c in self.init_containers.iter().chain(&self.containers) {
            c.name.hash(state);
            c.image.hash(state);
        }
        self.termination_grace_period_seconds.hash(state);
    }
}

impl Shareable for CachedPodStatus {
    // Enough to tell statuses apart; equal hashes are compared whole.
    fn hash_into(&self, state: &mut impl Hasher) {
        self.phase.hash(state);
        for c in &self.conditions {
            c.type_.hash(state);
            c.status.hash(state);
        }
        for c in self
            .init_container_statuses
            .iter()
            .chain(&self.container_statuses)
        {
            c.name.hash(state);
            c.ready.hash(state);
        }
    }
}

static SPECS: LazyLock<Interner<CachedPodSpec>> = LazyLock::new(Interner::default);
static STATUSES: LazyLock<Interner<CachedPodStatus>> = LazyLock::new(Interner::default);

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group((): &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version((): &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn api_version((): &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural((): &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl CachedPod {
    /// Keeps of the metadata what the operator reads — the VM label's and the two
    /// annotations' values out of their maps — and shares the spec and status with pods
    /// that have equal ones.
    pub fn project(&mut self) {
        let meta = std::mem::take(&mut self.metadata);
        let mut labels = meta.labels.unwrap_or_default();
        let mut annotations = meta.annotations.unwrap_or_default();
        // (Projected again, a pod keeps what it kept: its maps are gone.)
        let kept = std::mem::take(&mut self.kept);
        self.kept = KeptMetadata {
            vm: labels.remove(VM_LABEL).or(kept.vm),
            images_hash: annotations
                .remove(IMAGES_HASH_ANNOTATION)
                .or(kept.images_hash),
            restart_count: annotations
                .remove(RESTART_COUNT_ANNOTATION)
                .or(kept.restart_count),
        };
        self.metadata = ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            finalizers: meta.finalizers,
            owner_references: meta.owner_references,
            ..ObjectMeta::default()
        };
        self.spec = self.spec.take().map(|s| SPECS.intern(s));
        self.status = self.status.take().map(|s| STATUSES.intern(s));
    }

    /// The value of the VM label.
    #[must_use]
    pub fn vm_label(&self) -> Option<&str> {
        self.kept.vm.as_deref()
    }

    /// The pod with what the cache kept, for the readers of [`Pod`]: of its labels the VM
    /// label, of its annotations the two the operator writes.
    #[must_use]
    pub fn to_pod(&self) -> Pod {
        let containers = |cs: &[CachedContainer]| -> Vec<Container> {
            cs.iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    image: c.image.clone(),
                    ..Container::default()
                })
                .collect()
        };
        let statuses = |cs: &[CachedContainerStatus]| -> Option<Vec<ContainerStatus>> {
            (!cs.is_empty()).then(|| {
                cs.iter()
                    .map(|c| ContainerStatus {
                        name: c.name.clone(),
                        ready: c.ready,
                        state: c.state.as_ref().map(|s| ContainerState {
                            terminated: s.terminated.as_ref().map(|t| ContainerStateTerminated {
                                started_at: t.started_at.clone(),
                                finished_at: t.finished_at.clone(),
                                ..ContainerStateTerminated::default()
                            }),
                            ..ContainerState::default()
                        }),
                        ..ContainerStatus::default()
                    })
                    .collect()
            })
        };
        let kept = |pairs: &[(&str, &Option<String>)]| -> Option<BTreeMap<String, String>> {
            let map: BTreeMap<String, String> = pairs
                .iter()
                .filter_map(|(k, v)| Some(((*k).to_string(), (*v).clone()?)))
                .collect();
            (!map.is_empty()).then_some(map)
        };
        Pod {
            metadata: ObjectMeta {
                labels: kept(&[(VM_LABEL, &self.kept.vm)]),
                annotations: kept(&[
                    (IMAGES_HASH_ANNOTATION, &self.kept.images_hash),
                    (RESTART_COUNT_ANNOTATION, &self.kept.restart_count),
                ]),
                ..self.metadata.clone()
            },
            spec: self.spec.as_ref().map(|s| PodSpec {
                init_containers: (!s.init_containers.is_empty())
                    .then(|| containers(&s.init_containers)),
                containers: containers(&s.containers),
                termination_grace_period_seconds: s.termination_grace_period_seconds,
                ..PodSpec::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                conditions: (!s.conditions.is_empty()).then(|| {
                    s.conditions
                        .iter()
                        .map(|c| PodCondition {
                            type_: c.type_.clone(),
                            status: c.status.clone(),
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                container_statuses: statuses(&s.container_statuses),
                init_container_statuses: statuses(&s.init_container_statuses),
                ..PodStatus::default()
            }),
        }
    }
}

/// Pods are validated fully by the API server: they always decode.
impl Arrival<CachedPod> for CachedPod {
    fn decoded(self) -> Result<CachedPod, Box<InvalidObject>> {
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::api::{ResolvedImage, VirtualMachine, VirtualMachineSpec};
    use crate::core::runner_pod::{
        self, pod_images, pod_images_hash, pod_phase, pod_restart_count, pod_starting,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_cached_pod_reads_back_as_the_pod_it_came_from() {
        let spec: VirtualMachineSpec = serde_yaml_ng::from_str(
            "guest: {rootDisk: {image: disk:1}, kernelImage: k:1}\n\
             extraInitContainers: [{name: setup, image: busybox, command: [sh]}]\n\
             tolerations: [{key: a, operator: Exists}]",
        )
        .unwrap();
        let mut vm = VirtualMachine::new("vm", spec);
        vm.metadata.namespace = Some("dev".into());
        vm.metadata.uid = Some("uid".into());
        let images: Vec<ResolvedImage> = [
            ("rootDisk", "disk:1"),
            ("kernel", "k:1"),
            ("extraInitContainers/setup", "busybox"),
            ("runner", "runner:1"),
        ]
        .into_iter()
        .map(|(slot, image)| ResolvedImage {
            slot: slot.into(),
            requested: image.into(),
            resolved: Some(image.into()),
            ..Default::default()
        })
        .collect();
        let mut full = runner_pod::build(&vm, &images, 2).unwrap();
        full.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        full.metadata.creation_timestamp = Some(Time(Timestamp::from_second(100).unwrap()));
        full.status = Some(PodStatus {
            phase: Some("Running".into()),
            host_ip: Some("10.0.0.1".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "runner".into(),
                ready: true,
                image: "runner:1".into(),
                // (A terminated state, as a finished pod's, to read back too.)
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        started_at: Some(Time(Timestamp::from_second(100).unwrap())),
                        finished_at: Some(Time(Timestamp::from_second(160).unwrap())),
                        exit_code: 1,
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        // Through JSON, as the watch delivers it.
        let mut cached: CachedPod =
            serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        cached.project();
        let once = cached.clone();
        cached.project();
        assert_eq!(cached, once, "projected twice, a pod keeps what it kept");
        let pod = cached.to_pod();
        assert_eq!(pod_images(&pod), pod_images(&full));
        assert_eq!(pod_images_hash(&pod), pod_images_hash(&full));
        assert_eq!(pod_restart_count(&pod), Some(2));
        assert_eq!(pod_phase(&pod), pod_phase(&full));
        assert_eq!(runner_pod::runner_ran(&pod), runner_pod::runner_ran(&full));
        assert!(runner_pod::runner_ran(&pod).is_some());
        let now = Time(Timestamp::from_second(101).unwrap());
        assert_eq!(pod_starting(&pod, &now), pod_starting(&full, &now));
        assert_eq!(
            pod.metadata.owner_references,
            full.metadata.owner_references
        );
        assert_eq!(pod.metadata.labels, full.metadata.labels);
        assert!(pod.metadata.managed_fields.is_none());
        assert!(pod.spec.as_ref().unwrap().tolerations.is_none());
    }
}
