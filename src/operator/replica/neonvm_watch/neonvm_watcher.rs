//! Finds NeonVM at run time: it watches NeonVM's VirtualMachine CRD by name, and while the
//! CRD exists (established) it watches NeonVM's VMs, their runner pods (label
//! `vm.neon.tech/name`) and their migrations into [`NeonVmState`]; when the CRD goes, it stops
//! and forgets. A cluster without NeonVM costs one idle watch, and holds no readiness.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::core::excerpt::excerpt;
use crate::core::neonvm::{self, NeonVm};
use crate::operator::replica::neonvm_watch::neonvm_state::{
    Kind, Migration, NeonVmState, RunnerPod,
};
use crate::operator::watch_toolkit::scoped_watches::{Relists, key_of, watches};
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// What the watcher reads through, and where it keeps what it read.
pub struct NeonVmWatcher {
    pub client: Client,
    /// The namespaces the operator acts in (empty: all).
    pub namespaces: Vec<String>,
    pub state: Arc<NeonVmState>,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(neonvm::GROUP, "v1", kind), plural)
}

/// Whether the CRD is established: its kind is served.
fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Runs until the future is dropped.
pub async fn run(watcher: NeonVmWatcher) {
    let crds: Api<CustomResourceDefinition> = Api::all(watcher.client.clone());
    let mut events = watcher::watch_object(crds, neonvm::VM_CRD)
        .backoff(WatchBackoff::default())
        .boxed();
    let watcher = Arc::new(watcher);
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    while let Some(event) = events.next().await {
        let present = match event {
            Ok(crd) => crd.as_ref().is_some_and(established),
            Err(e) => {
                tracing::debug!(error = %excerpt(&e.to_string()), "watching NeonVM's CRD");
                continue;
            }
        };
        match (present, running.is_some()) {
            (true, false) => {
                tracing::info!("NeonVM's CRDs exist: serving vm.neon.tech VirtualMachines");
                watcher.state.set_present(true);
                running = Some(tokio::spawn(watch_neonvm(Arc::clone(&watcher))));
            }
            (false, true) => {
                tracing::info!(
                    "NeonVM's CRDs are gone: no longer serving vm.neon.tech VirtualMachines"
                );
                if let Some(task) = running.take() {
                    task.abort();
                }
                watcher.state.set_present(false);
            }
            _ => {}
        }
    }
}

fn read_vm(object: &DynamicObject) -> Option<NeonVm> {
    let mut value = object.data.clone();
    value["metadata"] = serde_json::to_value(&object.metadata).ok()?;
    NeonVm::read(&value)
}

fn read_migration(object: &DynamicObject) -> Option<Migration> {
    let vm = object.data["spec"]["vmName"].as_str()?.to_string();
    let over = matches!(
        object.data["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    Some(Migration { vm, over })
}

fn read_pod(pod: &Pod) -> Option<RunnerPod> {
    let vm = pod.labels().get(neonvm::VM_NAME_LABEL)?.clone();
    pod.spec.as_ref()?;
    let images = neonvm::runner_images(pod);
    Some(RunnerPod {
        name: pod.name_any(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        vm,
        images,
        deleting: pod.metadata.deletion_timestamp.is_some(),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
    })
}

/// Watches NeonVM's VMs, runner pods and migrations until aborted.
async fn watch_neonvm(watcher: Arc<NeonVmWatcher>) {
    let client = watcher.client.clone();
    let dynamic = |resource: ApiResource| {
        let client = client.clone();
        move |ns: Option<&str>| match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource),
            None => Api::<DynamicObject>::all_with(client.clone(), &resource),
        }
    };
    let all = watcher::Config::default();
    let each_dynamic = |api, config| watcher::watcher(api, config).backoff(WatchBackoff::default());
    let mut vms = watches(
        &watcher.namespaces,
        dynamic(resource("VirtualMachine", "virtualmachines")),
        &all,
        each_dynamic,
    );
    let mut migrations = watches(
        &watcher.namespaces,
        dynamic(resource(
            "VirtualMachineMigration",
            "virtualmachinemigrations",
        )),
        &all,
        each_dynamic,
    );
    let pods_client = client.clone();
    let mut pods = watches(
        &watcher.namespaces,
        move |ns: Option<&str>| match ns {
            Some(ns) => Api::<Pod>::namespaced(pods_client.clone(), ns),
            None => Api::<Pod>::all(pods_client.clone()),
        },
        &watcher::Config::default().labels(neonvm::VM_NAME_LABEL),
        |api, config| watcher::watcher(api, config).backoff(WatchBackoff::default()),
    );
    let state = &watcher.state;
    let (mut vm_lists, mut pod_lists, mut migration_lists) =
        (Relists::default(), Relists::default(), Relists::default());
    loop {
        tokio::select! {
            Some((ns, event)) = vms.next() => match event {
                Ok(e) => vm_lists.apply(ns, e, key_of, |k, o: Option<&DynamicObject>| {
                    state.vm(k, o.and_then(read_vm));
                }, |ns, found| state.retain(Kind::Vms, ns, found)),
                Err(e) => failed("NeonVM VirtualMachines", &e),
            },
            Some((ns, event)) = pods.next() => match event {
                Ok(e) => pod_lists.apply(ns, e, key_of, |k, o: Option<&Pod>| {
                    state.pod(k, o.and_then(read_pod));
                }, |ns, found| state.retain(Kind::Pods, ns, found)),
                Err(e) => failed("NeonVM runner pods", &e),
            },
            Some((ns, event)) = migrations.next() => match event {
                Ok(e) => migration_lists.apply(ns, e, key_of, |k, o: Option<&DynamicObject>| {
                    state.migration(k, o.and_then(read_migration));
                }, |ns, found| state.retain(Kind::Migrations, ns, found)),
                Err(e) => failed("NeonVM VirtualMachineMigrations", &e),
            },
            else => return,
        }
    }
}

fn failed(what: &str, e: &watcher::Error) {
    tracing::debug!(error = %excerpt(&e.to_string()), "watching {what}");
}
