//! The baseline: a plain client doing only the minimum work the operator's job needs, at the
//! same concurrency — per VM, a pod create and a status patch at cold start; a status
//! patch, a pod delete and a pod create at a change of images, with one live pod per VM:
//! the replacement is created only once the old pod's deletion is observed (its grace
//! period, as the operator's pods have it, runs meanwhile), without holding a worker.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::future::ready;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use imagemap::core::api::{ImageMapping, VirtualMachine, VirtualMachineStatus, VmPhase};
use imagemap::core::rules::{CompileOptions, MappingInput, Mode, RuleSet};
use imagemap::core::runner_pod;
use imagemap::core::vm_images;

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
        resolved_images: images.into_iter().map(std::sync::Arc::new).collect(),
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

/// A change of images: each VM gets one status patch and its old pod deleted (back to
/// back, `CONCURRENCY` at once); each new pod is created as soon as the pod watch shows
/// the old one gone (`CONCURRENCY` at once too).
pub async fn fan_out(
    client: &Client,
    vms: &[VirtualMachine],
    old: &RuleSet,
    new: &RuleSet,
) -> anyhow::Result<()> {
    let Some(ns) = vms.first().and_then(ResourceExt::namespace) else {
        return Ok(());
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // The replacement of each old pod, by the old pod's name.
    let mut replacements: HashMap<String, Pod> = HashMap::new();
    for vm in vms {
        replacements.insert(desired(vm, old)?.0.name_any(), desired(vm, new)?.0);
    }
    // Watch first (and list), so that no deletion goes unseen.
    let (gone_tx, gone) = futures::channel::mpsc::unbounded::<String>();
    let watching = tokio::spawn(watch_deletions(
        pods.clone(),
        replacements.keys().cloned().collect(),
        gone_tx.clone(),
    ));
    let deletes = stream::iter(vms)
        .map(|vm| {
            let (pods, gone_tx) = (pods.clone(), gone_tx.clone());
            async move {
                let (old_pod, _) = desired(vm, old)?;
                let (_, status) = desired(vm, new)?;
                let vms = Api::namespaced(client.clone(), &ns_of(vm));
                retry("patching a VM status", || patch_status(&vms, vm, &status)).await?;
                retry("deleting a pod", || async {
                    match pods
                        .delete(&old_pod.name_any(), &DeleteParams::default())
                        .await
                    {
                        Ok(_) => Ok(()),
                        Err(e) if is_status(&e, 404) => {
                            // Already gone: no watch event may come for it.
                            let _ = gone_tx.unbounded_send(old_pod.name_any());
                            Ok(())
                        }
                        Err(e) => Err(e.into()),
                    }
                })
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>();
    let mut pending: HashSet<String> = replacements.keys().cloned().collect();
    let creates = gone
        .filter_map(move |name| ready(pending.remove(&name).then_some(name)))
        .take(replacements.len())
        .map(|name| {
            let pods = pods.clone();
            let pod = replacements[&name].clone();
            async move { create(&pods, &pod).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>();
    let done = futures::future::try_join(deletes, creates).await;
    watching.abort();
    done.map(|_| ())
}

fn ns_of(vm: &VirtualMachine) -> String {
    vm.namespace().unwrap_or_default()
}

/// Sends the name of each of `names` once the pod watch shows it gone — deleted, or absent
/// from a (re-)list.
async fn watch_deletions(
    pods: Api<Pod>,
    names: HashSet<String>,
    gone: futures::channel::mpsc::UnboundedSender<String>,
) {
    let mut events = watcher(pods, watcher::Config::default()).boxed();
    let mut listed: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Delete(pod)) => {
                let _ = gone.unbounded_send(pod.name_any());
            }
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(pod)) => {
                listed.insert(pod.name_any());
            }
            Ok(watcher::Event::InitDone) => {
                for name in names.iter().filter(|n| !listed.contains(*n)) {
                    let _ = gone.unbounded_send(name.clone());
                }
            }
            Ok(watcher::Event::Apply(_)) | Err(_) => {}
        }
    }
}
