//! What a replica knows of NeonVM: its VMs (`crate::core::neonvm::NeonVm`), each runner pod's
//! images by slot, and the migrations not yet over. Empty while NeonVM's CRDs do not exist.
//! Whoever acts on a change waits on [`NeonVmState::changed`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::core::namespaced_name::NamespacedName;
use crate::core::neonvm::NeonVm;

/// A runner pod (or a migration's target pod) of a NeonVM VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerPod {
    pub name: String,
    pub uid: String,
    /// The VM's name (the pod's `vm.neon.tech/name` label).
    pub vm: String,
    /// Its images by slot (`rootDisk`, `kernel`, `extraInitContainers/NAME`, `runner`).
    pub images: BTreeMap<String, String>,
    /// Being deleted.
    pub deleting: bool,
    /// Its phase.
    pub phase: Option<String>,
}

/// A VirtualMachineMigration: its VM, and whether it is over (`Succeeded` or `Failed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub vm: String,
    pub over: bool,
}

#[derive(Debug, Default)]
struct Inner {
    present: bool,
    vms: HashMap<NamespacedName, Arc<NeonVm>>,
    pods: HashMap<NamespacedName, RunnerPod>,
    migrations: HashMap<NamespacedName, Migration>,
}

/// NeonVM as this replica knows it.
#[derive(Debug, Default)]
pub struct NeonVmState {
    inner: Mutex<Inner>,
    /// Woken at every change.
    pub changed: Notify,
}

impl NeonVmState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each update is one insert or remove: a panicking holder left whole maps.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut Inner)) {
        f(&mut self.lock());
        // One listener (the leader's reloader): a stored permit wakes it once, however many
        // changes came meanwhile.
        self.changed.notify_one();
    }

    /// NeonVM's CRDs exist (or, `false`, no longer: everything is forgotten).
    pub fn set_present(&self, present: bool) {
        self.update(|inner| {
            if !present {
                *inner = Inner::default();
            }
            inner.present = present;
        });
    }

    /// Whether NeonVM's CRDs exist.
    #[must_use]
    pub fn present(&self) -> bool {
        self.lock().present
    }

    pub fn vm(&self, key: NamespacedName, vm: Option<NeonVm>) {
        self.update(|inner| match vm {
            Some(vm) => {
                inner.vms.insert(key, Arc::new(vm));
            }
            None => {
                inner.vms.remove(&key);
            }
        });
    }

    pub fn pod(&self, key: NamespacedName, pod: Option<RunnerPod>) {
        self.update(|inner| match pod {
            Some(pod) => {
                inner.pods.insert(key, pod);
            }
            None => {
                inner.pods.remove(&key);
            }
        });
    }

    pub fn migration(&self, key: NamespacedName, migration: Option<Migration>) {
        self.update(|inner| match migration {
            Some(m) => {
                inner.migrations.insert(key, m);
            }
            None => {
                inner.migrations.remove(&key);
            }
        });
    }

    /// Keeps only the VMs, pods or migrations (by `which`) that a re-list found.
    pub fn retain(&self, which: Kind, namespace: Option<&str>, found: &[NamespacedName]) {
        let found: std::collections::HashSet<&NamespacedName> = found.iter().collect();
        let keep =
            |k: &NamespacedName| found.contains(k) || namespace.is_some_and(|ns| k.namespace != ns);
        self.update(|inner| match which {
            Kind::Vms => inner.vms.retain(|k, _| keep(k)),
            Kind::Pods => inner.pods.retain(|k, _| keep(k)),
            Kind::Migrations => inner.migrations.retain(|k, _| keep(k)),
        });
    }

    /// Every VM.
    #[must_use]
    pub fn vms(&self) -> Vec<Arc<NeonVm>> {
        self.lock().vms.values().cloned().collect()
    }

    /// The runner pod of `vm`: the one its status names, else its one pod not being deleted.
    #[must_use]
    pub fn runner_pod(&self, vm: &NeonVm) -> Option<RunnerPod> {
        let inner = self.lock();
        if let Some(name) = &vm.pod_name {
            let key = NamespacedName::new(&vm.namespace, name);
            return inner.pods.get(&key).cloned();
        }
        let mut live = inner
            .pods
            .iter()
            .filter(|(k, p)| k.namespace == vm.namespace && p.vm == vm.name && !p.deleting);
        match (live.next(), live.next()) {
            (Some((_, pod)), None) => Some(pod.clone()),
            _ => None,
        }
    }

    /// The images the runner pod of the VM `name` in `namespace` runs, by slot.
    #[must_use]
    pub fn runner_images(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let vm = self
            .lock()
            .vms
            .get(&NamespacedName::new(namespace, name))
            .cloned()?;
        self.runner_pod(&vm).map(|p| p.images)
    }

    /// Whether a migration of `vm` is not over.
    #[must_use]
    pub fn migration_under_way(&self, vm: &NeonVm) -> bool {
        self.lock()
            .migrations
            .iter()
            .any(|(k, m)| k.namespace == vm.namespace && m.vm == vm.name && !m.over)
    }
}

/// What a re-list covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Vms,
    Pods,
    Migrations,
}
