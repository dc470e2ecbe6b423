//! State shared by the operator's tasks: the caches, the compiled rules, the pods this
//! instance created but has not seen yet, and the recreation budget.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::rules::{CompileOptions, MappingInput, RuleSet};
use crate::runner_pod::VM_LABEL;
use crate::vm_images;

/// The field manager of every write this operator makes.
pub const FIELD_MANAGER: &str = "imagemap.dev/operator";

/// How long a created pod may stay unseen by the cache before it is no longer waited for.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Operator settings (the `imagemap run` flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Runner image of VMs that name none.
    pub default_runner_image: String,
    /// Namespaces to act in; empty: all.
    pub namespaces: Vec<String>,
    /// Registries rewrites may point to; `None`: any.
    pub allowed_registries: Option<Vec<String>>,
    /// Most liveReload pod recreations per minute, over all VMs; 0: no limit.
    pub max_recreates_per_minute: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            default_runner_image: vm_images::DEFAULT_RUNNER_IMAGE.into(),
            namespaces: Vec::new(),
            allowed_registries: None,
            max_recreates_per_minute: 0,
        }
    }
}

/// Everything a reconcile reads.
pub struct Context {
    pub client: Client,
    pub options: Options,
    pub recorder: Recorder,
    pub vms: Store<VirtualMachine>,
    pub pods: Store<Pod>,
    pub mappings: Store<ImageMapping>,
    pub cluster_mappings: Store<ClusterImageMapping>,
    pub namespaces: Store<Namespace>,
    pub progress: Arc<super::Progress>,
    /// Signalled when mapping statuses may need an update.
    pub mapping_status: tokio::sync::Notify,
    rules: RwLock<Arc<RuleSet>>,
    /// Pods created by this instance that the pod cache has not shown yet, by VM.
    expected: Mutex<HashMap<ObjectRef<VirtualMachine>, (String, Instant)>>,
    recreations: Mutex<Vec<Instant>>,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        options: Options,
        recorder: Recorder,
        vms: Store<VirtualMachine>,
        pods: Store<Pod>,
        mappings: Store<ImageMapping>,
        cluster_mappings: Store<ClusterImageMapping>,
        namespaces: Store<Namespace>,
        progress: Arc<super::Progress>,
    ) -> Context {
        Context {
            client,
            options,
            recorder,
            vms,
            pods,
            mappings,
            cluster_mappings,
            namespaces,
            progress,
            mapping_status: tokio::sync::Notify::new(),
            rules: RwLock::new(Arc::new(RuleSet::default())),
            expected: Mutex::new(HashMap::new()),
            recreations: Mutex::new(Vec::new()),
        }
    }

    /// Whether the operator acts in `namespace`.
    pub fn in_scope(&self, namespace: &str) -> bool {
        self.options.namespaces.is_empty() || self.options.namespaces.iter().any(|n| n == namespace)
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules
            .read()
            .map(|r| Arc::clone(&r))
            .unwrap_or_default()
    }

    /// Compiles the cached mappings, installs the result, and returns the previous rules
    /// with the new ones.
    pub fn recompile(&self) -> (Arc<RuleSet>, Arc<RuleSet>) {
        let inputs: Vec<MappingInput> = self
            .mappings
            .state()
            .iter()
            .filter(|m| self.in_scope(&m.namespace().unwrap_or_default()))
            .map(|m| MappingInput::from(m.as_ref()))
            .chain(
                self.cluster_mappings
                    .state()
                    .iter()
                    .map(|m| MappingInput::from(m.as_ref())),
            )
            .collect();
        let options = CompileOptions {
            allowed_registries: self.options.allowed_registries.clone(),
        };
        let new = Arc::new(RuleSet::compile(&inputs, &options));
        let old = match self.rules.write() {
            Ok(mut guard) => std::mem::replace(&mut *guard, Arc::clone(&new)),
            Err(_) => Arc::new(RuleSet::default()),
        };
        (old, new)
    }

    /// Labels of a namespace as `namespaceSelector`s see them.
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        let ns = self.namespaces.get(&ObjectRef::new(namespace));
        vm_images::namespace_labels(
            namespace,
            ns.as_deref()
                .map(|n| n.labels())
                .unwrap_or(&BTreeMap::new()),
        )
    }

    /// The cached pods of a VM: labelled with its name and controlled by it.
    pub fn pods_of(&self, vm: &VirtualMachine) -> Vec<Arc<Pod>> {
        let (ns, name, uid) = (vm.namespace(), vm.name_any(), vm.uid());
        self.pods
            .state()
            .into_iter()
            .filter(|p| {
                p.namespace() == ns
                    && p.labels().get(VM_LABEL) == Some(&name)
                    && p.owner_references()
                        .iter()
                        .any(|o| Some(&o.uid) == uid.as_ref())
            })
            .collect()
    }

    /// The pod created for `vm` that the cache has not shown yet, if any; forgets it once
    /// one of `pods` is it.
    pub fn expected_pod(
        &self,
        vm: &ObjectRef<VirtualMachine>,
        pods: &[Arc<Pod>],
    ) -> Option<String> {
        let mut expected = self.expected.lock().ok()?;
        let (name, since) = expected.get(vm)?.clone();
        // Seen, or never going to be (created and deleted again before the cache caught up).
        if pods.iter().any(|p| p.name_any() == name) || since.elapsed() > EXPECTATION_TIMEOUT {
            expected.remove(vm);
            return None;
        }
        Some(name)
    }

    pub fn expect_pod(&self, vm: ObjectRef<VirtualMachine>, pod: String) {
        if let Ok(mut expected) = self.expected.lock() {
            expected.insert(vm, (pod, Instant::now()));
        }
    }

    pub fn forget_pod(&self, vm: &ObjectRef<VirtualMachine>) {
        if let Ok(mut expected) = self.expected.lock() {
            expected.remove(vm);
        }
    }

    /// Takes one recreation from the per-minute budget; `Err(wait)` when it is spent.
    pub fn take_recreation(&self) -> Result<(), Duration> {
        let limit = self.options.max_recreates_per_minute as usize;
        if limit == 0 {
            return Ok(());
        }
        let Ok(mut times) = self.recreations.lock() else {
            return Ok(());
        };
        let now = Instant::now();
        times.retain(|t| now.duration_since(*t) < Duration::from_secs(60));
        if times.len() >= limit {
            let oldest = times.first().copied().unwrap_or(now);
            return Err(Duration::from_secs(60).saturating_sub(now.duration_since(oldest)));
        }
        times.push(now);
        Ok(())
    }
}
