//! The watch caches every task reads, and the views computed from them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::{MappingInput, MappingScope};
use crate::core::slot_resolution;
use crate::core::vm_images::VmView;
use crate::operator::acts_in::ActsIn;
use crate::operator::replica::watches::cached_pod::CachedPod;
use crate::operator::replica::watches::pod_index::PodIndex;
use crate::operator::watch_toolkit::listed::CachesListed;

/// The reflector stores of the operator.
#[derive(Clone)]
pub struct Caches {
    pub vms: Store<VirtualMachine>,
    pub pods: Store<CachedPod>,
    /// The pods of each VM, kept by the pod watcher.
    pub pod_index: Arc<PodIndex>,
    pub mappings: Store<ImageMapping>,
    pub cluster_mappings: Store<ClusterImageMapping>,
    pub namespaces: Store<Namespace>,
    pub listed: CachesListed,
    /// Mappings whose rules are unknown: the VMs they could map change no pod.
    pub unreadable_mappings:
        Arc<crate::operator::replica::watches::unreadable_mappings::UnreadableMappings>,
}

/// The labels of `namespace` in `namespaces` as `namespaceSelector`s see them.
#[must_use]
pub fn namespace_labels(
    namespaces: &Store<Namespace>,
    namespace: &str,
) -> BTreeMap<String, String> {
    let ns = namespaces.get(&ObjectRef::new(namespace));
    slot_resolution::namespace_labels(
        namespace,
        ns.as_deref().map_or(&BTreeMap::new(), ResourceExt::labels),
    )
}

impl Caches {
    /// Labels of a namespace as `namespaceSelector`s see them.
    #[must_use]
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        namespace_labels(&self.namespaces, namespace)
    }

    /// The cached pods of a VM: labelled with its name and controlled by it (its controller
    /// owner reference names this VM's uid: a pod of an earlier VM of the same name is not
    /// its pod).
    #[must_use]
    pub fn pods_of(&self, vm: &VirtualMachine) -> Vec<Pod> {
        let (ns, name, uid) = (vm.namespace().unwrap_or_default(), vm.name_any(), vm.uid());
        self.pod_index
            .pods_of(&NamespacedName::of(vm))
            .into_iter()
            .filter_map(|pod| self.pods.get(&ObjectRef::new(&pod).within(&ns)))
            .filter(|p| {
                p.vm_label() == Some(name.as_str())
                    && p.owner_references()
                        .iter()
                        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
            })
            .map(|p| p.to_pod())
            .collect()
    }

    /// The cached mappings in force for the operator's namespaces, as the engine takes them.
    #[must_use]
    pub fn mapping_inputs(&self, acts_in: &ActsIn) -> Vec<MappingInput> {
        self.mappings
            .state()
            .iter()
            .filter(|m| acts_in.contains(&m.namespace().unwrap_or_default()))
            .map(|m| MappingInput::from(m.as_ref()))
            .chain(
                self.cluster_mappings
                    .state()
                    .iter()
                    .map(|m| MappingInput::from(m.as_ref())),
            )
            .collect()
    }

    /// What identifies the mappings in force as compiled: kind, namespace, name, uid and
    /// generation of each (a status write changes none of them).
    #[must_use]
    pub fn mappings_fingerprint(&self, acts_in: &ActsIn) -> MappingsFingerprint {
        let id = |scope: MappingScope, meta: &ObjectMeta| {
            (
                scope,
                meta.namespace.clone(),
                meta.name.clone(),
                meta.uid.clone(),
                meta.generation,
            )
        };
        let mut out: MappingsFingerprint = self
            .mappings
            .state()
            .iter()
            .filter(|m| acts_in.contains(&m.namespace().unwrap_or_default()))
            .map(|m| id(MappingScope::Namespaced, &m.metadata))
            .chain(
                self.cluster_mappings
                    .state()
                    .iter()
                    .map(|m| id(MappingScope::Cluster, &m.metadata)),
            )
            .collect();
        out.sort();
        out
    }

    /// The cached VMs the operator acts on, with their namespaces' labels.
    #[must_use]
    pub fn vms_in_scope(&self, acts_in: &ActsIn) -> VmsInScope {
        vms_in_scope(&self.vms, &self.namespaces, acts_in)
    }
}

/// The VMs of `vms` the operator acts on, with their namespaces' labels from `namespaces`.
#[must_use]
pub fn vms_in_scope(
    vms: &Store<VirtualMachine>,
    namespaces: &Store<Namespace>,
    acts_in: &ActsIn,
) -> VmsInScope {
    let vms: Vec<Arc<VirtualMachine>> = vms
        .state()
        .into_iter()
        .filter(|vm| acts_in.contains(&vm.namespace().unwrap_or_default()))
        .collect();
    let labels = vms
        .iter()
        .filter_map(|vm| vm.namespace())
        .map(|ns| {
            let l = namespace_labels(namespaces, &ns);
            (ns, l)
        })
        .collect();
    VmsInScope {
        vms,
        labels,
        none: BTreeMap::new(),
    }
}

/// See [`Caches::mappings_fingerprint`].
pub type MappingsFingerprint = Vec<(
    MappingScope,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
)>;

/// The VMs the operator acts on, with their namespaces' labels.
pub struct VmsInScope {
    pub vms: Vec<Arc<VirtualMachine>>,
    labels: BTreeMap<String, BTreeMap<String, String>>,
    none: BTreeMap<String, String>,
}

impl VmsInScope {
    /// Each VM with the labels of its namespace.
    #[must_use]
    pub fn views(&self) -> Vec<VmView<'_>> {
        self.vms
            .iter()
            .map(|vm| VmView {
                vm: vm.as_ref(),
                namespace_labels: vm
                    .namespace()
                    .and_then(|ns| self.labels.get(&ns))
                    .unwrap_or(&self.none),
            })
            .collect()
    }
}
