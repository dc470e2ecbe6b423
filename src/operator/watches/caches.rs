//! The watch caches every task reads, and the views computed from them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::namespaced_name::NamespacedName;
use crate::operator::options::Options;
use crate::operator::watches::cached_pod::CachedPod;
use crate::operator::watches::pod_index::PodIndex;
use crate::rules::{MappingInput, Scope};
use crate::vm_images::{self, VmView};

/// Whether a cache has listed once: marked by its watch stream when every namespace it
/// covers has listed and the store holds the lists. Any number of tasks may wait on it (kube's
/// `Store::wait_until_ready` wakes only the last of several waiters).
#[derive(Debug, Clone, Default)]
pub struct Listed(Arc<watch::Sender<bool>>);

impl Listed {
    /// The cache has listed.
    pub fn mark(&self) {
        self.0
            .send_if_modified(|listed| !std::mem::replace(listed, true));
    }

    /// Whether the cache has listed.
    #[must_use]
    pub fn is_marked(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the cache has listed.
    pub async fn wait(&self) {
        // The sender lives in `self`: the channel cannot close while this waits.
        let _ = self.0.subscribe().wait_for(|listed| *listed).await;
    }
}

/// Which caches have listed.
#[derive(Debug, Clone, Default)]
pub struct CachesListed {
    pub vms: Listed,
    pub pods: Listed,
    pub mappings: Listed,
    pub cluster_mappings: Listed,
    pub namespaces: Listed,
}

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
    pub unreadable_mappings: Arc<crate::operator::watches::unreadable_mappings::UnreadableMappings>,
}

impl Caches {
    /// Labels of a namespace as `namespaceSelector`s see them.
    #[must_use]
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        let ns = self.namespaces.get(&ObjectRef::new(namespace));
        vm_images::namespace_labels(
            namespace,
            ns.as_deref().map_or(&BTreeMap::new(), ResourceExt::labels),
        )
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
    pub fn mapping_inputs(&self, options: &Options) -> Vec<MappingInput> {
        self.mappings
            .state()
            .iter()
            .filter(|m| options.acts_in(&m.namespace().unwrap_or_default()))
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
    pub fn mappings_fingerprint(&self, options: &Options) -> MappingsFingerprint {
        let id = |scope: Scope, meta: &ObjectMeta| {
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
            .filter(|m| options.acts_in(&m.namespace().unwrap_or_default()))
            .map(|m| id(Scope::Namespaced, &m.metadata))
            .chain(
                self.cluster_mappings
                    .state()
                    .iter()
                    .map(|m| id(Scope::Cluster, &m.metadata)),
            )
            .collect();
        out.sort();
        out
    }

    /// The cached VMs the operator acts on, with their namespaces' labels.
    #[must_use]
    pub fn vms_in_scope(&self, options: &Options) -> VmsInScope {
        let vms: Vec<Arc<VirtualMachine>> = self
            .vms
            .state()
            .into_iter()
            .filter(|vm| options.acts_in(&vm.namespace().unwrap_or_default()))
            .collect();
        let labels = vms
            .iter()
            .filter_map(|vm| vm.namespace())
            .map(|ns| {
                let l = self.namespace_labels(&ns);
                (ns, l)
            })
            .collect();
        VmsInScope {
            vms,
            labels,
            none: BTreeMap::new(),
        }
    }
}

/// See [`Caches::mappings_fingerprint`].
pub type MappingsFingerprint = Vec<(
    Scope,
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

#[cfg(test)]
mod tests {
    use crate::operator::watches::caches::Listed;

    #[tokio::test]
    async fn every_waiter_wakes_when_a_cache_has_listed() {
        let listed = Listed::default();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let l = listed.clone();
                tokio::spawn(async move { l.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        listed.mark();
        for w in waiters {
            w.await.unwrap();
        }
        // Marked once, waiting returns at once.
        listed.wait().await;
    }
}
