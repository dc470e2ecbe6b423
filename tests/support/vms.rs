//! VMs, mappings and their pods in a test namespace: the objects the operator tests write
//! and the waits they make.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use imagemap::core::api::{ImageMapping, VirtualMachine, VmPhase};
use imagemap::core::runner_pod::{VM_LABEL, pod_images};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::{client, fresh_namespace, install_crds, wait_list};

pub const COMPUTE: &str = "neondatabase/vm-compute-node-v17:latest";
pub const COMPUTE_NORMALIZED: &str = "docker.io/neondatabase/vm-compute-node-v17:latest";

/// The scheduler name of VMs whose tests play kubelet: no scheduler takes their pods, so
/// kwok leaves them alone (and their deletion is immediate).
pub const UNSCHEDULED: &str = "imagemap-test-unscheduled";

pub fn vm(name: &str, live_reload: bool, policy: &str, disk: &str) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "liveReload": live_reload,
            "restartPolicy": policy,
            "guest": {"rootDisk": {"image": disk}},
            "runnerImage": "neondatabase/neonvm-runner:v1"
        }
    }))
    .unwrap()
}

pub fn mapping(name: &str, rules: &serde_json::Value) -> ImageMapping {
    serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1",
        "kind": "ImageMapping",
        "metadata": {"name": name},
        "spec": {"rules": rules}
    }))
    .unwrap()
}

pub fn tilt_rule(to: &str) -> serde_json::Value {
    json!([{"match": {"repository": "neondatabase/vm-compute-node-v17"}, "to": to}])
}

/// A registry holding `app:dev` (its first build), and the ImageMapping `follow` mapping
/// `example.org/app` to it with `followTag`.
pub struct FollowedApp {
    pub registry: super::registry::TestRegistry,
    pub host: String,
    /// The digest `app:dev` points to.
    pub digest: String,
    /// `HOST/app:dev`.
    pub tag: String,
}

pub struct Env {
    pub client: Client,
    pub ns: String,
    pub vms: Api<VirtualMachine>,
    pub pods: Api<Pod>,
    pub mappings: Api<ImageMapping>,
}

impl Env {
    /// Starts a registry holding `app:dev` and adds the mapping `follow` to it.
    pub async fn follow_app(&self) -> FollowedApp {
        let registry = super::registry::TestRegistry::start(&self.ns).await;
        let host = registry.host();
        let digest = registry.push("app", "dev", "build 1");
        let tag = format!("{host}/app:dev");
        self.add_mapping(
            "follow",
            json!([{"match": {"repository": "example.org/app"}, "to": tag, "followTag": true}]),
        )
        .await;
        FollowedApp {
            registry,
            host,
            digest,
            tag,
        }
    }

    pub async fn add_mapping(&self, name: &str, rules: serde_json::Value) {
        self.mappings
            .create(&PostParams::default(), &mapping(name, &rules))
            .await
            .unwrap();
    }

    pub async fn add_vm(&self, name: &str, live_reload: bool, policy: &str, disk: &str) {
        self.vms
            .create(&PostParams::default(), &vm(name, live_reload, policy, disk))
            .await
            .unwrap();
    }

    /// A VM whose pods no scheduler takes (see [`UNSCHEDULED`]).
    pub async fn add_unscheduled_vm(
        &self,
        name: &str,
        live_reload: bool,
        policy: &str,
        disk: &str,
    ) {
        let mut vm = vm(name, live_reload, policy, disk);
        vm.spec.scheduler_name = Some(UNSCHEDULED.into());
        self.vms.create(&PostParams::default(), &vm).await.unwrap();
    }
}

pub async fn env(prefix: &str) -> Env {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, prefix).await;
    Env {
        vms: Api::namespaced(client.clone(), &ns),
        pods: Api::namespaced(client.clone(), &ns),
        mappings: Api::namespaced(client.clone(), &ns),
        client,
        ns,
    }
}

pub fn pods_of(vm: &str) -> watcher::Config {
    watcher::Config::default().labels(&format!("{VM_LABEL}={vm}"))
}

pub fn live(pods: &[Arc<Pod>]) -> Vec<&Arc<Pod>> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

pub fn root_disk(pod: &Pod) -> String {
    pod_images(pod).get("rootDisk").cloned().unwrap_or_default()
}

pub fn condition<'a>(vm: &'a VirtualMachine, ty: &str) -> Option<(&'a str, &'a str, &'a str)> {
    vm.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

pub fn resolved<'a>(
    vm: &'a VirtualMachine,
    slot: &str,
) -> Option<&'a imagemap::core::api::ResolvedImage> {
    vm.status
        .as_ref()?
        .resolved_images
        .iter()
        .find(|i| i.slot == slot)
        .map(AsRef::as_ref)
}

/// Waits until the VM has exactly one live pod whose root disk is `disk`, and its status
/// names that pod; returns the pod.
pub async fn wait_single_pod(e: &Env, vm_name: &str, disk: &str) -> Arc<Pod> {
    let pod = wait_pod(e, vm_name, disk).await;
    let name = pod.name_any();
    wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        &format!("{vm_name} status names {name}"),
        |vms| {
            vms.iter().any(|v| {
                v.name_any() == vm_name
                    && v.status.as_ref().and_then(|s| s.pod_name.as_deref()) == Some(name.as_str())
            })
        },
    )
    .await;
    pod
}

/// Waits until VM `name` satisfies `pred` (`what` says what is awaited); returns it as seen.
pub async fn wait_vm(
    e: &Env,
    name: &str,
    what: &str,
    pred: impl Fn(&VirtualMachine) -> bool,
) -> VirtualMachine {
    let vms = wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        &format!("{name}: {what}"),
        |vms| vms.iter().any(|v| v.name_any() == name && pred(v)),
    )
    .await;
    vms.iter()
        .find(|v| v.name_any() == name && pred(v))
        .map(|v| (**v).clone())
        .expect("the VM the wait saw")
}

/// Waits until VM `name` is in `phase`; returns it.
pub async fn wait_phase(e: &Env, name: &str, phase: VmPhase) -> VirtualMachine {
    wait_vm(e, name, &format!("phase {phase:?}"), |v| {
        v.status.as_ref().and_then(|s| s.phase) == Some(phase)
    })
    .await
}

/// Waits until VM `name`'s condition `ty` has `reason` and a message containing `text`;
/// returns it.
pub async fn wait_condition(
    e: &Env,
    name: &str,
    ty: &str,
    reason: &str,
    text: &str,
) -> VirtualMachine {
    wait_vm(e, name, &format!("{ty} {reason} ({text:?})"), |v| {
        condition(v, ty).is_some_and(|c| c.1 == reason && c.2.contains(text))
    })
    .await
}

/// Waits until `vm_name` has one pod, live, with `disk` (whether its status names it yet or
/// not: a pod no scheduler or kubelet has reported on is not reported for minutes).
pub async fn wait_pod(e: &Env, vm_name: &str, disk: &str) -> Arc<Pod> {
    let pods = wait_list(
        e.pods.clone(),
        pods_of(vm_name),
        &format!("one pod of {vm_name} with {disk}"),
        |pods| {
            let l = live(pods);
            pods.len() == 1 && l.len() == 1 && root_disk(l[0]) == disk
        },
    )
    .await;
    Arc::clone(&pods[0])
}

/// Waits until the VM's `ImagesResolved` condition has `reason` (and its message contains
/// `text`).
pub async fn wait_resolved_reason(e: &Env, vm_name: &str, reason: &str, text: &str) {
    wait_condition(e, vm_name, "ImagesResolved", reason, text).await;
}

/// Watches every pod of a namespace from its start: never two live pods for one VM.
pub struct NeverTwoLivePods {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<std::sync::Mutex<Seen>>,
}

/// What the pod watch of [`NeverTwoLivePods`] delivered.
#[derive(Default)]
struct Seen {
    /// Watch events (the initial list's included).
    events: usize,
    /// The most live pods seen at once, per VM.
    max: BTreeMap<String, usize>,
}

impl NeverTwoLivePods {
    pub fn watch(e: &Env) -> NeverTwoLivePods {
        let pods_api = e.pods.clone();
        let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
        let into = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let (reader, writer) = kube::runtime::reflector::store::<Pod>();
            let mut stream = watcher(pods_api, watcher::Config::default())
                .reflect(writer)
                .boxed();
            while let Some(event) = stream.next().await {
                if event.is_err() {
                    continue; // the watcher retries on its own
                }
                let mut now: BTreeMap<String, usize> = BTreeMap::new();
                for p in reader
                    .state()
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    let vm = p.labels().get(VM_LABEL).cloned().unwrap_or_default();
                    *now.entry(vm).or_default() += 1;
                }
                let mut seen = into.lock().unwrap();
                seen.events += 1;
                for (vm, n) in now {
                    let m = seen.max.entry(vm).or_default();
                    *m = (*m).max(n);
                }
            }
        });
        NeverTwoLivePods { task, seen }
    }

    /// Fails the test if two live pods of one VM were ever seen — or if the watch
    /// delivered nothing, so that the check would prove nothing.
    pub async fn check(self) {
        self.task.abort();
        // Ended (or cancelled): nothing writes what it saw any more.
        let _ = self.task.await;
        let seen = self.seen.lock().unwrap();
        assert!(
            seen.events > 0,
            "the pod watch delivered nothing: never-two-pods was not checked"
        );
        assert!(
            seen.max.values().all(|&n| n <= 1),
            "two live pods for one VM: {:?}",
            seen.max
        );
    }
}
