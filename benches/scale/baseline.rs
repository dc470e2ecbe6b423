//! The baseline: a plain client doing only the minimum writes the operator's work needs, at
//! the same concurrency — per VM, a pod create and a status patch at cold start; a status
//! patch, a pod delete and a pod create at a change of images.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use imagemap::api::{ImageMapping, VirtualMachine, VirtualMachineStatus, VmPhase};
use imagemap::rules::{CompileOptions, MappingInput, Mode, RuleSet};
use imagemap::runner_pod;
use imagemap::vm_images;

use super::cluster::{CONCURRENCY, is_status, retry};

/// Creates `pod`; one that exists already (a retried create) is done.
async fn create(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    retry("creating a pod", || async {
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

const MANAGER: &str = "imagemap-bench-baseline";

/// The pod and status a VM gets under the rules of `mapping`.
fn desired(vm: &VirtualMachine, rules: &RuleSet) -> anyhow::Result<(Pod, VirtualMachineStatus)> {
    let resolution = vm_images::resolve_vm(
        rules,
        vm,
        &BTreeMap::new(),
        vm_images::DEFAULT_RUNNER_IMAGE,
        Mode::Live,
    );
    let images = resolution.images();
    let pod = runner_pod::build(vm, &images, 0)
        .ok_or_else(|| anyhow::anyhow!("the images of {} do not resolve", vm.name_any()))?;
    let status = VirtualMachineStatus {
        phase: Some(VmPhase::Pending),
        pod_name: Some(pod.name_any()),
        observed_generation: vm.metadata.generation,
        resolved_images: images,
        ..VirtualMachineStatus::default()
    };
    Ok((pod, status))
}

pub fn rules(mapping: &ImageMapping) -> RuleSet {
    RuleSet::compile(&[MappingInput::from(mapping)], &CompileOptions::default())
}

async fn patch_status(
    api: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    status: &VirtualMachineStatus,
) -> anyhow::Result<()> {
    let patch = json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine", "status": status
    });
    api.patch_status(
        &vm.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Cold start: each VM gets its pod and one status patch.
pub async fn cold_start(
    client: &Client,
    vms: &[VirtualMachine],
    rules: &RuleSet,
) -> anyhow::Result<()> {
    stream::iter(vms)
        .map(|vm| async move {
            let ns = vm.namespace().unwrap_or_default();
            let (pod, status) = desired(vm, rules)?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            create(&pods, &pod).await?;
            let vms = Api::namespaced(client.clone(), &ns);
            retry("patching a VM status", || patch_status(&vms, vm, &status)).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await
}

/// A change of images: each VM gets one status patch, its old pod deleted (at once: the
/// benchmark's VMs have a grace period of 0) and its new pod created.
pub async fn fan_out(
    client: &Client,
    vms: &[VirtualMachine],
    old: &RuleSet,
    new: &RuleSet,
) -> anyhow::Result<()> {
    stream::iter(vms)
        .map(|vm| async move {
            let ns = vm.namespace().unwrap_or_default();
            let (old_pod, _) = desired(vm, old)?;
            let (pod, status) = desired(vm, new)?;
            let vms = Api::namespaced(client.clone(), &ns);
            retry("patching a VM status", || patch_status(&vms, vm, &status)).await?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            retry("deleting a pod", || async {
                match pods
                    .delete(&old_pod.name_any(), &DeleteParams::default())
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(e) if is_status(&e, 404) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            })
            .await?;
            create(&pods, &pod).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await
}
