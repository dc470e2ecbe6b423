//! What the caches hold per VM, in heap bytes: a VirtualMachine as the API server sends it
//! after the operator reconciled it (status included), as the VM cache keeps it; its runner
//! pod as the pod cache keeps it; and the key that names it. Counted with an allocator that
//! tracks every allocation (this binary runs this one test alone); printed with
//! `cargo test --test footprint -- --nocapture`.

#![allow(clippy::unwrap_used)] // test code

use std::alloc::System;
use std::sync::Arc;

use imagemap::core::api::VirtualMachine;
use imagemap::operator::{CachedPod, Projection};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A VM of the scale benchmark, as the API server sends it once the operator wrote its
/// status.
fn reconciled_vm(i: usize) -> serde_json::Value {
    // The VMs of a fan-out change state over minutes: a hundred of them within a second,
    // whose conditions are then equal.
    let transition = format!(
        "2026-12-04T19:{:02}:{:02}Z",
        i / 100 / 60 % 60,
        i / 100 % 60
    );
    let condition = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": transition, "observedGeneration": 1})
    };
    json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
        "metadata": {
            "name": format!("vm-{i:05}"), "namespace": "bench-1-operator-10000",
            "uid": format!("0b1c2d3e-4f50-6172-8394-{i:012}"), "resourceVersion": "123456",
            "generation": 1, "creationTimestamp": "2026-12-04T19:00:00Z",
            "managedFields": [{"manager": "imagemap.dev/operator", "operation": "Apply",
                "apiVersion": "imagemap.dev/v1alpha1", "time": "2026-12-04T19:00:00Z",
                "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:phase": {}, "f:podName": {}}}}]
        },
        "spec": {
            "liveReload": true,
            "guest": {"rootDisk": {"image": "neondatabase/vm-compute-node-v17:latest"}},
            "runnerImage": "neondatabase/neonvm-runner:v1",
            "terminationGracePeriodSeconds": 0
        },
        "status": {
            "phase": "Running", "podName": format!("vm-{i:05}-a1b2c3d4e5"), "restartCount": 0,
            "observedGeneration": 1,
            "resolvedImages": [
                {"slot": "rootDisk", "requested": "neondatabase/vm-compute-node-v17:latest",
                 "resolved": "localhost:5000/compute:1",
                 "source": {"kind": "ImageMapping", "namespace": "bench-1-operator-10000",
                            "name": "tilt", "rule": 0, "match": "repository"}},
                {"slot": "runner", "requested": "neondatabase/neonvm-runner:v1",
                 "resolved": "docker.io/neondatabase/neonvm-runner:v1"}
            ],
            "conditions": [
                condition("Ready", "True", "Running", "the runner pod runs"),
                condition("ImagesResolved", "True", "Resolved", "every image slot resolved"),
                condition("ImagesCurrent", "True", "Current", "the pod runs the resolved images"),
                condition("Stalled", "False", "Running", ""),
                condition("Reconciling", "False", "Running", "")
            ]
        }
    })
}

/// The bytes `make` leaves allocated per item, for `n` items kept.
fn per_item<T>(n: usize, make: impl Fn(usize) -> T) -> (usize, Vec<T>) {
    let region = Region::new(GLOBAL);
    let kept: Vec<T> = (0..n).map(make).collect();
    let change = region.change();
    let held = i128::try_from(change.bytes_allocated).unwrap()
        - i128::try_from(change.bytes_deallocated).unwrap()
        + i128::try_from(change.bytes_reallocated).unwrap();
    (usize::try_from(held).unwrap() / n, kept)
}

#[test]
fn what_the_caches_hold_per_vm() {
    const N: usize = 1000;
    // The objects as a watch receives them (made before counting).
    let vm_bytes: Vec<Vec<u8>> = (0..N)
        .map(|i| serde_json::to_vec(&reconciled_vm(i)).unwrap())
        .collect();
    let (vm_cached, vms) = per_item(N, |i| {
        let mut vm: VirtualMachine = serde_json::from_slice(&vm_bytes[i]).unwrap();
        Projection::project(&mut vm);
        Arc::new(vm)
    });
    let pod_bytes: Vec<Vec<u8>> = vms
        .iter()
        .map(|vm| {
            let status = vm.status.clone().unwrap_or_default();
            let mut pod: Pod =
                imagemap::core::runner_pod::build(vm, &status.resolved_image_values(), 0).unwrap();
            pod.metadata.uid = Some("5f6e7d8c-9b0a-1928-3746-556473829100".into());
            pod.metadata.resource_version = Some("123457".into());
            serde_json::to_vec(&pod).unwrap()
        })
        .collect();
    let (pod_cached, _pods) = per_item(N, |i| {
        let mut pod: CachedPod = serde_json::from_slice(&pod_bytes[i]).unwrap();
        Projection::project(&mut pod);
        Arc::new(pod)
    });
    let (key, _keys) = per_item(N, |i| ObjectRef::from_obj(vms[i].as_ref()));
    let (status, _statuses) = per_item(N, |i| vms[i].status.clone());
    println!(
        "per VM: cached VirtualMachine {vm_cached} B (inline {} B, its status {status} B), \
         cached pod {pod_cached} B (inline {} B), ObjectRef key {key} B",
        size_of::<VirtualMachine>(),
        size_of::<CachedPod>()
    );
    // What a VM costs the two caches, with one key, as measured when written (2.1 KiB;
    // 5.3 before the caches shared equal conditions, resolved images, pod specs and pod
    // statuses and kept a pod's label and annotations out of their maps; 6.9 before they
    // compacted what they keep): a bound that catches a field kept by mistake, or slack.
    assert!(vm_cached + pod_cached + key < 5 << 9);
}
