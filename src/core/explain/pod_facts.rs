//! What `imagemap explain` reads of a pod, a pod template, or a NeonVM VM with its runner
//! pod: its labels and annotations (the records), its controller, its slots and the
//! digests its containers were pulled at.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::core::neonvm::NeonVm;
use crate::core::pod::pod_slots::SlotKind;
use crate::core::pod_template::PodTemplate;
use crate::core::workload_reload::{PodOwner, image_id_digest, pod_owner};

/// What explain reads of a pod, a pod template, or a NeonVM VM with its runner pod.
#[derive(Debug, Clone)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub created: Option<Timestamp>,
    pub owner: PodOwner,
    /// The controller owner reference's API group and kind.
    pub controller: Option<(String, String)>,
    /// Each slot's key and the image it names, in pod order.
    pub slots: Vec<(String, String)>,
    /// Slot key → the digest its image was pulled at.
    pub image_ids: BTreeMap<String, String>,
    /// A pod template: no pod runs it yet.
    pub template: bool,
    /// A NeonVM VM's runner pod: the VM, whose spec says what each slot asks for.
    pub neonvm: Option<NeonVm>,
}

impl PodFacts {
    /// A pod as the API server serves it.
    #[must_use]
    pub fn of_pod(pod: &Pod) -> PodFacts {
        let metadata = &pod.metadata;
        let spec = pod.spec.as_ref();
        let containers = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (SlotKind::Init, c))
            .chain(
                spec.map(|s| s.containers.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|c| (SlotKind::Container, c)),
            );
        let slots = containers
            .filter_map(|(kind, c)| Some((kind.key(&c.name), c.image.clone()?)))
            .collect();
        let status = pod.status.as_ref();
        let ids = |kind: SlotKind, statuses: Option<&Vec<ContainerStatus>>| {
            statuses
                .into_iter()
                .flatten()
                .filter_map(move |s| {
                    Some((kind.key(&s.name), image_id_digest(&s.image_id)?.to_string()))
                })
                .collect::<Vec<_>>()
        };
        let mut image_ids: BTreeMap<String, String> = BTreeMap::new();
        image_ids.extend(ids(
            SlotKind::Init,
            status.and_then(|s| s.init_container_statuses.as_ref()),
        ));
        image_ids.extend(ids(
            SlotKind::Container,
            status.and_then(|s| s.container_statuses.as_ref()),
        ));
        let owners = metadata.owner_references.as_deref().unwrap_or_default();
        let controller = owners.iter().find(|o| o.controller == Some(true)).map(|o| {
            let group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            (group.to_string(), o.kind.clone())
        });
        PodFacts {
            namespace: metadata.namespace.clone().unwrap_or_default(),
            name: metadata.name.clone().unwrap_or_default(),
            labels: metadata.labels.clone().unwrap_or_default(),
            annotations: metadata.annotations.clone().unwrap_or_default(),
            created: metadata.creation_timestamp.as_ref().map(|t| t.0),
            owner: pod_owner(owners),
            controller,
            slots,
            image_ids,
            template: false,
            neonvm: None,
        }
    }

    /// A workload's pod template (or a Pod) as `imagemap resolve -f` reads it: what the
    /// pods it makes ask for.
    #[must_use]
    pub fn of_template(template: &PodTemplate) -> PodFacts {
        PodFacts {
            namespace: template.namespace.clone(),
            name: template.name.clone(),
            labels: template.labels.clone(),
            annotations: BTreeMap::new(),
            created: None,
            owner: PodOwner::None,
            controller: None,
            slots: template
                .images
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            image_ids: BTreeMap::new(),
            template: true,
            neonvm: None,
        }
    }

    /// NeonVM's VM `vm` with its runner pod (`None`: none runs now), as NeonVM names the
    /// pod's containers by the VM's slots.
    #[must_use]
    pub fn of_neonvm(vm: &NeonVm, pod: Option<&Pod>) -> PodFacts {
        let mut facts = pod.map_or_else(
            || PodFacts {
                namespace: vm.namespace.clone(),
                name: vm.name.clone(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                created: None,
                owner: PodOwner::VirtualMachine,
                controller: None,
                slots: Vec::new(),
                image_ids: BTreeMap::new(),
                template: true,
                neonvm: None,
            },
            PodFacts::of_pod,
        );
        if let Some(pod) = pod {
            facts.slots = crate::core::neonvm::runner_images(pod)
                .into_iter()
                .collect();
            facts.image_ids.clear();
        }
        facts.neonvm = Some(vm.clone());
        facts
    }
}
