//! The real NeonVM in the test bed: `neonvm-controller`, built from NeonVM's own source by
//! `scripts/control-plane build`, runs a `vm.neon.tech/v1` VirtualMachine on the kwok nodes
//! (tests/support/neonvm.rs starts and stops it); and a wrong or missing NeonVM source fails
//! the build with a message that says what to fix.

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use support::neonvm::{NeonVm, RUNNER_IMAGE, vm_resource};
use support::*;

const ROOT_DISK: &str = "registry.test/neondatabase/vm-compute-node-v17:test-bed";
const KERNEL: &str = "registry.test/neondatabase/vm-kernel:test-bed";
const NEONVM_SHA256: &str = "c9d6f7186291df9035a5bc24391842ceca5ef075046007019631d64443d9263e";

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_neonvm_vm_runs_under_the_real_controller_with_its_runner_pod() {
    let neonvm = NeonVm::start().await;
    let client = client().await;
    let ns = fresh_namespace(&client, "neonvm").await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vm_resource());
    // No runnerImage: the controller's own VM_RUNNER_IMAGE runs it.
    let vm = neonvm_vm("compute");
    let created = vms.create(&PostParams::default(), &vm).await.unwrap();

    let running = wait_for(vms.clone(), "compute", |vm: Option<&DynamicObject>| {
        vm.is_some_and(|vm| vm.data["status"]["phase"] == "Running")
    })
    .await;
    let pod_name = running.data["status"]["podName"]
        .as_str()
        .unwrap_or_else(|| panic!("a Running VM names its pod: {running:?}"));
    let pod = Api::<Pod>::namespaced(client, &ns)
        .get(pod_name)
        .await
        .unwrap();
    let spec = pod.spec.unwrap();
    let images = |containers: &[k8s_openapi::api::core::v1::Container]| -> Vec<(String, String)> {
        containers
            .iter()
            .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
            .collect()
    };
    let named = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, i)| ((*n).to_string(), (*i).to_string()))
            .collect()
    };
    assert_eq!(
        images(&spec.init_containers.unwrap_or_default()),
        named(&[("init", ROOT_DISK), ("init-kernel", KERNEL)]),
        "the runner pod's init containers"
    );
    assert_eq!(
        images(&spec.containers),
        named(&[("neonvm-runner", RUNNER_IMAGE)]),
        "the runner pod's containers"
    );
    let owner = pod
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .find(|o| o.controller == Some(true))
        .expect("the runner pod has a controller");
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid)),
        ("VirtualMachine", created.metadata.uid),
        "the runner pod belongs to the VM\ncontroller log:\n{}",
        neonvm.logs()
    );
}

/// A NeonVM VM of `name` with [`ROOT_DISK`] and [`KERNEL`], and no runner image.
fn neonvm_vm(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "vm.neon.tech/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "guest": {
                "cpus": {"min": 1, "max": 1, "use": 1},
                "memorySlotSize": "1Gi",
                "memorySlots": {"min": 1, "max": 1, "use": 1},
                "rootDisk": {"image": ROOT_DISK, "size": "1Gi"},
                "kernelImage": KERNEL
            }
        }
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_neonvm_runner_pod_runs_the_images_the_rules_map() {
    let neonvm = NeonVm::start().await;
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "neonvm-mapped").await;
    let mappings: Api<imagemap::core::api::ImageMapping> = Api::namespaced(client.clone(), &ns);
    mappings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "imagemap.dev/v1alpha1",
                "kind": "ImageMapping",
                "metadata": {"name": "tilt"},
                "spec": {"rules": [
                    {"match": {"repository": "registry.test/neondatabase/vm-compute-node-v17"},
                     "to": "k3d-registry:5000/vm-compute-node-v17:tilt-1"},
                    {"match": {"repository": "registry.test/neondatabase/neonvm-runner"},
                     "to": "k3d-registry:5000/neonvm-runner:tilt-1"},
                ]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let _webhook = support::webhooks::WebhookOperator::start(&ns, ROOT_DISK, &[]).await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vm_resource());
    vms.create(&PostParams::default(), &neonvm_vm("compute"))
        .await
        .unwrap();
    let running = wait_for(vms.clone(), "compute", |vm: Option<&DynamicObject>| {
        vm.is_some_and(|vm| vm.data["status"]["phase"] == "Running")
    })
    .await;
    let pod_name = running.data["status"]["podName"].as_str().unwrap();
    let spec = Api::<Pod>::namespaced(client, &ns)
        .get(pod_name)
        .await
        .unwrap()
        .spec
        .unwrap();
    let image = |containers: &[k8s_openapi::api::core::v1::Container], name: &str| {
        containers
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    let init = spec.init_containers.unwrap_or_default();
    assert_eq!(
        image(&init, "init"),
        "k3d-registry:5000/vm-compute-node-v17:tilt-1",
        "the root disk\ncontroller log:\n{}",
        neonvm.logs()
    );
    assert_eq!(
        image(&init, "init-kernel"),
        KERNEL,
        "no rule for the kernel"
    );
    assert_eq!(
        image(&spec.containers, "neonvm-runner"),
        "k3d-registry:5000/neonvm-runner:tilt-1",
        "the controller's default runner image"
    );
}

/// `scripts/control-plane build-neonvm` as `script` (a copy of the script, or the script
/// itself), with its caches in `dir` and no NeonVM setting of the caller's.
fn build_neonvm(script: &Path, dir: &Path, neonvm_src: Option<&Path>) -> Output {
    let mut command = Command::new(script);
    command
        .arg("build-neonvm")
        .env("CONTROL_PLANE_CACHE", dir.join("cache"))
        .env("GOMODCACHE", dir.join("gomod"))
        .env("GOCACHE", dir.join("gobuild"))
        // The module proxy fallback fails at once, as it does where the proxy lacks NeonVM.
        .env("GOPROXY", "off")
        .env_remove("CONTROL_PLANE_ASSETS")
        .env_remove("NEONVM_SHA256")
        .env_remove("NEONVM_SRC");
    if let Some(src) = neonvm_src {
        command.env("NEONVM_SRC", src);
    }
    command.output().unwrap()
}

/// A new, empty directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neonvm-src-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether a neonvm-controller was built anywhere under `dir`.
fn built_under(dir: &Path) -> bool {
    let assets = dir.join("cache/assets");
    std::fs::read_dir(&assets).into_iter().flatten().any(|k8s| {
        std::fs::read_dir(k8s.unwrap().path())
            .into_iter()
            .flatten()
            .any(|e| {
                e.unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("neonvm-")
            })
    })
}

fn failed_with(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the build succeeded:\n{stderr}");
    stderr
}

#[test]
fn a_wrong_neonvm_source_fails_the_build_naming_both_sha256s() {
    let dir = scratch("wrong");
    let src = dir.join("autoscaling-a4bce09e.tar.gz");
    std::fs::write(&src, "not NeonVM's source").unwrap();
    let out = build_neonvm(
        &Path::new(REPO).join("scripts/control-plane"),
        &dir,
        Some(&src),
    );
    let stderr = failed_with(&out);
    let sum = Command::new("sha256sum").arg(&src).output().unwrap();
    let actual = String::from_utf8_lossy(&sum.stdout);
    let actual = actual.split_whitespace().next().unwrap();
    let expected = format!(
        "NeonVM's source {} (NEONVM_SRC) has sha256 {actual}, expected {NEONVM_SHA256}",
        src.display()
    );
    assert!(
        stderr.contains(&expected),
        "missing {expected:?} in:\n{stderr}"
    );
    assert!(!built_under(&dir), "nothing is built from a wrong source");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_neonvm_src_fails_the_build_instead_of_looking_elsewhere() {
    let dir = scratch("missing");
    let src = dir.join("no-such.tar.gz");
    let out = build_neonvm(
        &Path::new(REPO).join("scripts/control-plane"),
        &dir,
        Some(&src),
    );
    let stderr = failed_with(&out);
    assert!(
        stderr.contains(&format!("NEONVM_SRC={}: no such file", src.display())),
        "{stderr}"
    );
    assert!(!built_under(&dir), "nothing is built without a source");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_any_neonvm_source_the_build_fails_naming_where_it_looked() {
    // The script in a repository with no shared/ beside it.
    let dir = scratch("none");
    let script = dir.join("repo/scripts/control-plane");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::copy(Path::new(REPO).join("scripts/control-plane"), &script).unwrap();
    let out = build_neonvm(&script, &dir, None);
    let stderr = failed_with(&out);
    let shared = dir.join("shared/neonvm/autoscaling-a4bce09e.tar.gz");
    for needed in [
        "no NeonVM source: NEONVM_SRC is not set".to_string(),
        format!("{} does not exist", shared.display()),
        "github.com/neondatabase/autoscaling@v0.0.0-20250923121633-a4bce09e4d6b".to_string(),
        format!(
            "Set NEONVM_SRC to NeonVM's tarball (autoscaling-a4bce09e.tar.gz, sha256 {NEONVM_SHA256})"
        ),
    ] {
        assert!(stderr.contains(&needed), "missing {needed:?} in:\n{stderr}");
    }
    assert!(!built_under(&dir), "nothing is built without a source");
    let _ = std::fs::remove_dir_all(&dir);
}
