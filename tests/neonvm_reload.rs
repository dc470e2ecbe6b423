//! Live reload of NeonVM's own VirtualMachines, against the real `neonvm-controller`: a
//! mapping change, or a followed tag pushed, replaces a live-reload VM's runner pod (NeonVM
//! creates the next one, which the webhook maps); a VM without the label, or under
//! `restartPolicy: Never`, keeps its pod and is told; pods NeonVM created while imagemap was
//! down are found when it is back, and a live-reload VM's pod is replaced once. Run with
//! `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::neonvm::{NeonVm, RUNNER_IMAGE, vm_resource};
use support::webhooks::WebhookOperator;
use support::*;

const ROOT_DISK: &str = "registry.test/neondatabase/vm-compute-node-v17:latest";

/// A NeonVM VM `name` running [`ROOT_DISK`], live-reloaded when `live`, under `policy`.
fn neonvm_vm(name: &str, live: bool, policy: &str) -> DynamicObject {
    let labels = if live {
        json!({"imagemap.dev/live-reload": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "vm.neon.tech/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": policy,
            "guest": {
                "cpus": {"min": 1, "max": 1, "use": 1},
                "memorySlotSize": "1Gi",
                "memorySlots": {"min": 1, "max": 1, "use": 1},
                "rootDisk": {"image": ROOT_DISK, "size": "1Gi"},
            }
        }
    }))
    .unwrap()
}

/// A namespace with NeonVM's controller running, and the ImageMapping `disk` mapping the
/// root disk to `to`.
struct Bed {
    client: Client,
    ns: String,
    vms: Api<DynamicObject>,
    pods: Api<Pod>,
    neonvm: NeonVm,
}

impl Bed {
    async fn start(name: &str, rule: Value) -> Bed {
        let neonvm = NeonVm::start().await;
        let client = client().await;
        install_crds(&client).await;
        let ns = fresh_namespace(&client, name).await;
        let bed = Bed {
            vms: Api::namespaced_with(client.clone(), &ns, &vm_resource()),
            pods: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            neonvm,
        };
        bed.set_rule(rule).await;
        bed
    }

    async fn set_rule(&self, rule: Value) {
        let mapping = json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": "disk"}, "spec": {"rules": [rule]},
        });
        Api::<imagemap::core::api::ImageMapping>::namespaced(self.client.clone(), &self.ns)
            .patch(
                "disk",
                &PatchParams::apply("neonvm-test").force(),
                &Patch::Apply(&mapping),
            )
            .await
            .unwrap();
    }

    async fn create(&self, vm: &DynamicObject) {
        self.vms.create(&PostParams::default(), vm).await.unwrap();
    }

    /// The VM `name` once Running with a pod whose root disk is `disk`: (pod, restartCount).
    async fn running_with(
        &self,
        name: &str,
        disk: &str,
        operator: &WebhookOperator,
    ) -> (String, i64) {
        let deadline = Instant::now() + WAIT;
        loop {
            let vm = self.vms.get(name).await.unwrap();
            if vm.data["status"]["phase"] == "Running"
                && let Some(pod) = vm.data["status"]["podName"].as_str()
                && self.disk(pod).await.as_deref() == Some(disk)
            {
                let restarts = vm.data["status"]["restartCount"].as_i64().unwrap_or(0);
                return (pod.to_string(), restarts);
            }
            assert!(
                Instant::now() < deadline,
                "{name} never ran a pod with {disk}: {}\noperator:\n{}\ncontroller:\n{}",
                vm.data["status"],
                operator.process.logs(),
                self.neonvm.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The root disk image of pod `name`.
    async fn disk(&self, name: &str) -> Option<String> {
        let pod = self.pods.get_opt(name).await.unwrap()?;
        pod.spec?
            .init_containers?
            .into_iter()
            .find(|c| c.name == "init")?
            .image
    }

    /// The reasons of the Events on the NeonVM VM `name`, with their messages.
    async fn events(&self, name: &str) -> Vec<(String, String)> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.involved_object.api_version.as_deref() == Some("vm.neon.tech/v1")
            })
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    async fn wait_event(&self, name: &str, reason: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some((_, message)) = self
                .events(name)
                .await
                .into_iter()
                .find(|(r, _)| r == reason)
            {
                return message;
            }
            assert!(
                Instant::now() < deadline,
                "no {reason} Event on {name}: {:?}",
                self.events(name).await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn operator(&self, extra: &[&str]) -> WebhookOperator {
        let mut args = vec!["--neonvm-default-runner-image", RUNNER_IMAGE];
        args.extend_from_slice(extra);
        WebhookOperator::start(&self.ns, ROOT_DISK, &args).await
    }
}

fn disk_rule(to: &str) -> Value {
    json!({"match": {"repository": "registry.test/neondatabase/vm-compute-node-v17"}, "to": to})
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_mapping_change_replaces_a_live_reload_vms_runner_pod_and_tells_the_others() {
    let bed = Bed::start("neonvm-reload", disk_rule("k3d-registry:5000/disk:tilt-1")).await;
    let operator = bed.operator(&[]).await;
    bed.create(&neonvm_vm("live", true, "Always")).await;
    bed.create(&neonvm_vm("steady", false, "Always")).await;
    bed.create(&neonvm_vm("never", true, "Never")).await;
    let (live_pod, live_restarts) = bed
        .running_with("live", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    let (steady_pod, _) = bed
        .running_with("steady", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    let (never_pod, _) = bed
        .running_with("never", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;

    // A new build: the rule points at a new tag.
    let changed = Instant::now();
    bed.set_rule(disk_rule("k3d-registry:5000/disk:tilt-2"))
        .await;
    let (new_pod, restarts) = bed
        .running_with("live", "k3d-registry:5000/disk:tilt-2", &operator)
        .await;
    let reloaded = changed.elapsed();
    assert_ne!(new_pod, live_pod, "a new runner pod");
    assert_eq!(restarts, live_restarts + 1, "NeonVM counts the restart");
    let message = bed.wait_event("live", "RunnerPodReplaced").await;
    assert!(
        message.contains("tilt-1 → k3d-registry:5000/disk:tilt-2"),
        "{message}"
    );
    // The others keep their pods, and are told why.
    let steady = bed.wait_event("steady", "RestartRequired").await;
    assert!(steady.contains("imagemap.dev/live-reload=true"), "{steady}");
    let never = bed.wait_event("never", "RestartRequired").await;
    assert!(never.contains("restartPolicy Never"), "{never}");
    for (vm, pod) in [("steady", &steady_pod), ("never", &never_pod)] {
        let now = bed.vms.get(vm).await.unwrap();
        assert_eq!(
            now.data["status"]["podName"].as_str(),
            Some(pod.as_str()),
            "{vm} kept its pod"
        );
        assert!(
            bed.pods
                .get_opt(pod)
                .await
                .unwrap()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        );
    }
    // The mapping's status counts NeonVM's VMs as imagemap's: three affected, two waiting
    // for a restart.
    let mappings: Api<imagemap::core::api::ImageMapping> =
        Api::namespaced(bed.client.clone(), &bed.ns);
    let deadline = Instant::now() + WAIT;
    loop {
        let status = mappings
            .get("disk")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if status.affected_vms == Some(3) && status.awaiting_restart_count == Some(2) {
            let mut waiting = status.awaiting_restart.clone();
            waiting.sort();
            assert_eq!(
                waiting,
                [
                    format!("{}/vm.neon.tech/never", bed.ns),
                    format!("{}/vm.neon.tech/steady", bed.ns)
                ]
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the mapping's status never counted the NeonVM VMs: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Visible with kubectl: each slot requested → resolved, the rule, and whether the pod
    // runs it.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args([
            "status",
            "-n",
            &bed.ns,
            "--neonvm-default-runner-image",
            RUNNER_IMAGE,
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let row = |vm: &str, slot: &str| -> String {
        table
            .lines()
            .find(|l| {
                l.starts_with(&format!("{}/{vm} ", bed.ns)) && l.contains(&format!(" {slot} "))
            })
            .unwrap_or_else(|| panic!("no {vm} {slot} row:\n{table}"))
            .to_string()
    };
    let live = row("live", "rootDisk");
    assert!(
        live.contains("k3d-registry:5000/disk:tilt-2")
            && live.contains(&format!("{new_pod}: runs it")),
        "{live}"
    );
    assert!(
        live.contains(&format!("ImageMapping {}/disk rule 0", bed.ns)),
        "{live}"
    );
    let steady = row("steady", "rootDisk");
    assert!(
        steady.contains("runs k3d-registry:5000/disk:tilt-1 (not this)"),
        "{steady}"
    );
    assert!(row("live", "runner").contains("runs it"));
    println!("imagemap status:\n{table}");
    // `imagemap explain` says why each runs what it runs: the live-reload VM runs what its
    // rules map now; the steady one a stale image until it restarts.
    let explained = |vm: &str| -> Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_imagemap"))
            .args(["explain", &format!("virtualmachines.vm.neon.tech/{vm}")])
            .args(["-n", &bed.ns, "-o", "json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "explain {vm}: {e}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let root_disk = |doc: &Value| -> (String, String) {
        let slot = doc["slots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["slot"] == "rootDisk")
            .unwrap_or_else(|| panic!("no rootDisk slot: {doc}"))
            .clone();
        (
            slot["verdict"].as_str().unwrap_or_default().to_string(),
            slot["runs"].as_str().unwrap_or_default().to_string(),
        )
    };
    let live_doc = explained("live");
    assert_eq!(
        root_disk(&live_doc),
        (
            "mapped-current".to_string(),
            "k3d-registry:5000/disk:tilt-2".to_string()
        ),
        "{live_doc}"
    );
    let steady_doc = explained("steady");
    assert_eq!(root_disk(&steady_doc).0, "mapped-stale", "{steady_doc}");
    // `imagemap resolve --cluster` previews the next build for NeonVM's VMs too: the
    // live-reload VM reloaded, the others told to restart.
    let change = std::env::temp_dir().join(format!("{}-next-build.yaml", bed.ns));
    std::fs::write(
        &change,
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: disk, namespace: {}}}\n\
             spec:\n  rules:\n  - match: {{repository: registry.test/neondatabase/vm-compute-node-v17}}\n    to: k3d-registry:5000/disk:tilt-3\n",
            bed.ns
        ),
    )
    .unwrap();
    let preview = std::process::Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args(["resolve", "--cluster", "-n", &bed.ns, "-o", "json"])
        .args(["--neonvm-default-runner-image", RUNNER_IMAGE])
        .args(["-f", change.to_str().unwrap()])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&preview.stdout).unwrap_or_else(|e| {
        panic!(
            "resolve --cluster: {e}\n{}",
            String::from_utf8_lossy(&preview.stderr)
        )
    });
    let mut fates: Vec<(String, String, String)> = shown["neonvmVirtualMachines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let disk = v["images"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["slot"] == "rootDisk")
                .unwrap();
            (
                v["name"].as_str().unwrap().to_string(),
                v["pod"].as_str().unwrap().to_string(),
                disk["after"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    fates.sort();
    let fate = |vm: &str, pod: &str| {
        (
            vm.to_string(),
            pod.to_string(),
            "k3d-registry:5000/disk:tilt-3".to_string(),
        )
    };
    assert_eq!(
        fates,
        [
            fate("live", "reloaded"),
            fate("never", "restartRequired"),
            fate("steady", "restartRequired"),
        ],
        "{shown}"
    );
    // Replaced once, checked after everything else waited: one RunnerPodReplaced, the same
    // pod still running, no further restart.
    let replaced = bed
        .events("live")
        .await
        .into_iter()
        .filter(|(r, _)| r == "RunnerPodReplaced")
        .count();
    assert_eq!(replaced, 1);
    let now = bed.vms.get("live").await.unwrap();
    assert_eq!(
        now.data["status"]["podName"].as_str(),
        Some(new_pod.as_str())
    );
    assert_eq!(
        now.data["status"]["restartCount"].as_i64().unwrap_or(0),
        restarts
    );
    // The live-reload VM's pod carries the label too (NeonVM copies the VM's labels), yet
    // live reload for workloads leaves it to NeonVM's: one DELETE, no eviction.
    let requests = |verb: &str, resource: &str| {
        operator.process.metric(&format!(
            "imagemap_api_requests_total{{verb=\"{verb}\",resource=\"{resource}\","
        ))
    };
    assert!((requests("delete", "pods") - 1.0).abs() < f64::EPSILON);
    assert!(requests("create", "pods/eviction").abs() < f64::EPSILON);
    assert!(operator.process.metric("imagemap_pods_evicted_total").abs() < f64::EPSILON);
    for vm in ["live", "steady", "never"] {
        for (reason, message) in bed.events(vm).await {
            println!("event on {vm}: {reason}: {message}");
        }
    }
    println!(
        "NeonVM live reload: mapping change → the new runner pod running with the new root disk: {:.2} s",
        reloaded.as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_followed_tag_pushed_moves_a_live_reload_vm_to_the_new_digest() {
    let registry = support::registry::TestRegistry::start("neonvm-push").await;
    let host = registry.host();
    let first = registry.push("disk", "dev", "build 1");
    let tag = format!("{host}/disk:dev");
    let mut rule = disk_rule(&tag);
    rule["followTag"] = json!(true);
    let bed = Bed::start("neonvm-push", rule).await;
    let operator = bed
        .operator(&[
            "--allowed-registries",
            &host,
            "--insecure-registries",
            &host,
            "--tag-poll-interval",
            "500ms",
        ])
        .await;
    bed.create(&neonvm_vm("live", true, "Always")).await;
    // The first pod may be admitted before the leader verified the tag: it then runs the tag
    // unpinned, and live reload replaces it with the pinned one.
    let (pod, _) = bed
        .running_with("live", &format!("{tag}@{first}"), &operator)
        .await;
    let pushed = Instant::now();
    let second = registry.push("disk", "dev", "build 2");
    let (next, _) = bed
        .running_with("live", &format!("{tag}@{second}"), &operator)
        .await;
    let moved = pushed.elapsed();
    assert_ne!(next, pod);
    println!(
        "NeonVM live reload: followed tag pushed → the new runner pod running with the new digest: {:.2} s",
        moved.as_secs_f64()
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn pods_created_while_imagemap_was_down_are_found_and_a_live_reload_vms_is_replaced_once() {
    let bed = Bed::start("neonvm-missed", disk_rule("k3d-registry:5000/disk:tilt-1")).await;
    let operator = bed.operator(&[]).await;
    bed.create(&neonvm_vm("live", true, "Always")).await;
    bed.create(&neonvm_vm("steady", false, "Always")).await;
    let (live_pod, _) = bed
        .running_with("live", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    let (steady_pod, _) = bed
        .running_with("steady", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    // imagemap stops (its configuration goes with it); NeonVM goes on: its pods come back
    // unmapped.
    drop(operator);
    for pod in [&live_pod, &steady_pod] {
        bed.pods
            .delete(pod, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }
    let unmapped = |vm: &'static str, old: String| {
        let bed = &bed;
        async move {
            let deadline = Instant::now() + WAIT;
            loop {
                let now = bed.vms.get(vm).await.unwrap();
                if let Some(pod) = now.data["status"]["podName"].as_str()
                    && *pod != old
                    && now.data["status"]["phase"] == "Running"
                    && bed.disk(pod).await.as_deref() == Some(ROOT_DISK)
                {
                    return (
                        pod.to_string(),
                        now.data["status"]["restartCount"].as_i64().unwrap_or(0),
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "NeonVM never recreated {vm}'s pod: {}",
                    now.data["status"]
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let (live_unmapped, live_restarts) = unmapped("live", live_pod).await;
    let (steady_unmapped, _) = unmapped("steady", steady_pod).await;
    // imagemap is back: the live-reload VM's pod is replaced once, the other is reported.
    let operator = bed.operator(&[]).await;
    let (mapped, restarts) = bed
        .running_with("live", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    assert_ne!(mapped, live_unmapped);
    assert_eq!(restarts, live_restarts + 1, "replaced once");
    let steady = bed.wait_event("steady", "RestartRequired").await;
    assert!(
        steady.contains(&format!(
            "rootDisk {ROOT_DISK} → k3d-registry:5000/disk:tilt-1"
        )),
        "{steady}"
    );
    assert_eq!(
        bed.vms.get("steady").await.unwrap().data["status"]["podName"].as_str(),
        Some(steady_unmapped.as_str())
    );
    // Still replaced once after the other VM's report came.
    let live = bed.vms.get("live").await.unwrap();
    assert_eq!(
        live.data["status"]["podName"].as_str(),
        Some(mapped.as_str())
    );
    assert_eq!(
        live.data["status"]["restartCount"].as_i64().unwrap_or(0),
        restarts
    );
}

/// A VirtualMachineMigration of the VM `vm`.
fn migration(vm: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachineMigration",
        "metadata": {"name": format!("{vm}-move")},
        "spec": {"vmName": vm},
    }))
    .unwrap()
}

fn migration_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("vm.neon.tech", "v1", "VirtualMachineMigration"),
        "virtualmachinemigrations",
    )
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn during_a_migration_no_runner_pod_is_deleted_and_the_target_runs_the_sources_images() {
    let bed = Bed::start("neonvm-migrate", disk_rule("k3d-registry:5000/disk:tilt-1")).await;
    let operator = bed.operator(&[]).await;
    bed.create(&neonvm_vm("live", true, "Always")).await;
    bed.create(&neonvm_vm("steady", false, "Always")).await;
    let (live_pod, _) = bed
        .running_with("live", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    bed.running_with("steady", "k3d-registry:5000/disk:tilt-1", &operator)
        .await;
    let migrations: Api<DynamicObject> =
        Api::namespaced_with(bed.client.clone(), &bed.ns, &migration_resource());
    // The live-reload VM starts migrating; then the rule changes: its pod stays.
    migrations
        .create(&PostParams::default(), &migration("live"))
        .await
        .unwrap();
    wait_for(bed.vms.clone(), "live", |vm: Option<&DynamicObject>| {
        vm.is_some_and(|vm| {
            matches!(
                vm.data["status"]["phase"].as_str(),
                Some("PreMigrating" | "Migrating")
            )
        })
    })
    .await;
    bed.set_rule(disk_rule("k3d-registry:5000/disk:tilt-2"))
        .await;
    wait_until(WAIT, "live reload waits for the migration", || {
        operator
            .process
            .logs()
            .contains("live reload waits: a migration is under way")
    })
    .await;
    let source = bed.pods.get(&live_pod).await.unwrap();
    assert!(
        source.metadata.deletion_timestamp.is_none(),
        "the source runner pod is not deleted during the migration"
    );
    // A VM whose pod runs the old root disk migrates: its target pod runs what the source
    // runs, not what the rule says now.
    migrations
        .create(&PostParams::default(), &migration("steady"))
        .await
        .unwrap();
    let target = wait_for(
        migrations.clone(),
        "steady-move",
        |m: Option<&DynamicObject>| {
            m.is_some_and(|m| m.data["status"]["targetPodName"].as_str().is_some())
        },
    )
    .await;
    let target = target.data["status"]["targetPodName"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + WAIT;
    let disk = loop {
        if let Some(disk) = bed.disk(&target).await {
            break disk;
        }
        assert!(
            Instant::now() < deadline,
            "no target pod {target}:\n{}",
            bed.neonvm.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        disk, "k3d-registry:5000/disk:tilt-1",
        "the target runs the source's root disk"
    );
}
