//! NeonVM installed after imagemap: the operator, started on a cluster without NeonVM's CRDs,
//! is Ready at once; once NeonVM is installed (its CRDs and `neonvm-controller`), it picks
//! it up — a VM's runner pod is mapped at admission and live-reloaded on a rule change —
//! with no restart. Alone in its test binary, so that NeonVM is installed only after the
//! operator started. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::neonvm::{NeonVm, RUNNER_IMAGE, vm_resource};
use support::webhooks::WebhookOperator;
use support::*;

const ROOT_DISK: &str = "registry.test/neondatabase/vm-compute-node-v17:latest";

async fn set_rule(client: &kube::Client, ns: &str, to: &str) {
    let mapping = json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
        "metadata": {"name": "disk"},
        "spec": {"rules": [{"match": {"repository": "registry.test/neondatabase/vm-compute-node-v17"}, "to": to}]},
    });
    Api::<imagemap::core::api::ImageMapping>::namespaced(client.clone(), ns)
        .patch(
            "disk",
            &PatchParams::apply("neonvm-test").force(),
            &Patch::Apply(&mapping),
        )
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn neonvm_installed_after_imagemap_is_picked_up() {
    let client = client().await;
    install_crds(&client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("virtualmachines.vm.neon.tech")
            .await
            .unwrap()
            .is_none(),
        "NeonVM is not installed yet"
    );
    let ns = fresh_namespace(&client, "neonvm-later").await;
    set_rule(&client, &ns, "k3d-registry:5000/disk:tilt-1").await;
    // Ready without NeonVM (the start waits for /readyz).
    let operator = WebhookOperator::start(
        &ns,
        ROOT_DISK,
        &["--neonvm-default-runner-image", RUNNER_IMAGE],
    )
    .await;
    // Then NeonVM is installed.
    let neonvm = NeonVm::start().await;
    wait_until(WAIT, "the operator picks NeonVM up", || {
        operator.process.logs().contains("NeonVM's CRDs exist")
    })
    .await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vm_resource());
    let vm: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
        "metadata": {"name": "compute", "labels": {"imagemap.dev/live-reload": "true"}},
        "spec": {"guest": {
            "cpus": {"min": 1, "max": 1, "use": 1},
            "memorySlotSize": "1Gi",
            "memorySlots": {"min": 1, "max": 1, "use": 1},
            "rootDisk": {"image": ROOT_DISK, "size": "1Gi"}}}
    }))
    .unwrap();
    vms.create(&PostParams::default(), &vm).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for disk in [
        "k3d-registry:5000/disk:tilt-1",
        "k3d-registry:5000/disk:tilt-2",
    ] {
        if disk.ends_with("tilt-2") {
            set_rule(&client, &ns, disk).await;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let now = vms.get("compute").await.unwrap();
            let pod = now.data["status"]["podName"].as_str().map(str::to_string);
            let runs = match (&pod, now.data["status"]["phase"].as_str()) {
                (Some(pod), Some("Running")) => pods
                    .get_opt(pod)
                    .await
                    .unwrap()
                    .and_then(|p| p.spec)
                    .and_then(|s| s.init_containers)
                    .and_then(|c| c.into_iter().find(|c| c.name == "init"))
                    .and_then(|c| c.image),
                _ => None,
            };
            if runs.as_deref() == Some(disk) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the VM never ran {disk} ({runs:?}):\n{}\n{}",
                operator.process.logs(),
                neonvm.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
