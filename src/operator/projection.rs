//! What the caches keep of each object: only the fields the operator reads, so that memory
//! grows by a small, fixed amount per VM and per pod.

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Namespace, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::runner_pod::{IMAGES_HASH_ANNOTATION, RESTART_COUNT_ANNOTATION};

/// What a cache keeps of an object of a kind.
pub trait Projection {
    /// Drops what the operator never reads.
    fn project(&mut self);
}

impl Projection for Pod {
    fn project(&mut self) {
        pod(self);
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

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reader of any kind needs: managed fields and kubectl's copy of the object.
pub fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

fn name_and_image(c: &Container) -> Container {
    Container {
        name: c.name.clone(),
        image: c.image.clone(),
        ..Container::default()
    }
}

/// A runner pod as the operator reads it: identity, labels, owners, the two annotations, its
/// containers' names and images, and its phase, scheduling verdict and readiness.
pub fn pod(pod: &mut Pod) {
    metadata(&mut pod.metadata);
    if let Some(annotations) = pod.metadata.annotations.as_mut() {
        annotations.retain(|k, _| k == IMAGES_HASH_ANNOTATION || k == RESTART_COUNT_ANNOTATION);
    }
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        init_containers: spec
            .init_containers
            .map(|cs| cs.iter().map(name_and_image).collect()),
        containers: spec.containers.iter().map(name_and_image).collect(),
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|status| {
        let statuses = |cs: Option<Vec<ContainerStatus>>| {
            cs.map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        ready: c.ready,
                        ..ContainerStatus::default()
                    })
                    .collect()
            })
        };
        PodStatus {
            phase: status.phase,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            container_statuses: statuses(status.container_statuses),
            init_container_statuses: statuses(status.init_container_statuses),
            ..PodStatus::default()
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ResolvedImage, VirtualMachine, VirtualMachineSpec};
    use crate::runner_pod::{self, pod_images, pod_images_hash, pod_phase, pod_restart_count};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn a_projected_pod_reads_back_the_same() {
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
        let mut pod = runner_pod::build(&vm, &images, 2).unwrap();
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            host_ip: Some("10.0.0.1".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "runner".into(),
                ready: true,
                image: "runner:1".into(),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        let full = pod.clone();
        super::pod(&mut pod);
        assert_eq!(pod_images(&pod), pod_images(&full));
        assert_eq!(pod_images_hash(&pod), pod_images_hash(&full));
        assert_eq!(pod_restart_count(&pod), Some(2));
        assert_eq!(pod_phase(&pod), pod_phase(&full));
        assert_eq!(
            pod.metadata.owner_references,
            full.metadata.owner_references
        );
        assert_eq!(pod.metadata.labels, full.metadata.labels);
        assert!(pod.metadata.managed_fields.is_none());
        let spec = pod.spec.as_ref().unwrap();
        assert!(spec.tolerations.is_none() && spec.volumes.is_none());
        assert!(spec.init_containers.as_ref().unwrap()[2].command.is_none());
        assert!(
            serde_json::to_string(&pod).unwrap().len()
                < serde_json::to_string(&full).unwrap().len()
        );
    }
}
