//! `imagemap status`: for every NeonVM VirtualMachine (`vm.neon.tech`) in scope, each slot's
//! requested image → what admission maps it to, the rule behind it, and whether the running
//! runner pod has it — read from the VM, its pod and the rules, through a kubeconfig as
//! kubectl reads it. imagemap never writes NeonVM's objects (its status conditions are one
//! list the controller owns, and it resets the runner pod's labels and annotations), so this
//! is read where it is true now. Read-only: `imagemap-view` and reading NeonVM's VMs and pods
//! suffice.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use super::cluster::runtime;
use super::cluster::{self, Target};
use super::preview_scope::PreviewScope;
use super::resolve_args::{EXIT_OK, EXIT_USAGE, Output, compile_options};
use super::table;
use crate::core::admission::pod_view::Admission;
use crate::core::excerpt::excerpt;
use crate::core::neonvm::reload::LIVE_RELOAD_LABEL;
use crate::core::neonvm::{self, NeonVm};
use crate::core::neonvm_status::{SlotStatus, slot_statuses};

/// Arguments of `imagemap status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The namespace (default: the context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The runner image NeonVM's controller gives a VM that names none, as the operator's
    /// flag of the same name; without it such a VM's runner slot is not shown.
    #[arg(long, value_name = "IMAGE")]
    pub neonvm_default_runner_image: Option<String>,
    /// The operator's `--allowed-registries`, so that what it refuses shows as refused.
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub allowed_registries: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// One VM as shown.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct VmStatus {
    namespace: String,
    name: String,
    live_reload: bool,
    /// Its runner pod, if it has one.
    pod: Option<String>,
    slots: Vec<SlotStatus>,
}

/// The VMs of `scope` with their runner pods; `None` when NeonVM is not installed.
pub(super) async fn read_vms(
    client: &Client,
    scope: &PreviewScope,
) -> Result<Option<Vec<(NeonVm, Option<Pod>)>>, String> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(neonvm::GROUP, "v1", "VirtualMachine"),
        "virtualmachines",
    );
    let namespaces: Vec<Option<String>> = match scope.namespaces() {
        None => vec![None],
        Some(set) => set.iter().cloned().map(Some).collect(),
    };
    let mut out = Vec::new();
    for ns in namespaces {
        let (vms, pods): (Api<DynamicObject>, Api<Pod>) = match &ns {
            Some(ns) => (
                Api::namespaced_with(client.clone(), ns, &resource),
                Api::namespaced(client.clone(), ns),
            ),
            None => (
                Api::all_with(client.clone(), &resource),
                Api::all(client.clone()),
            ),
        };
        let listed = match vms.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "cannot list NeonVM VirtualMachines: {}",
                    excerpt(&e.to_string())
                ));
            }
        };
        let runner_pods = pods
            .list(&ListParams::default().labels(neonvm::VM_NAME_LABEL))
            .await
            .map_err(|e| format!("cannot list runner pods: {}", excerpt(&e.to_string())))?
            .items;
        for object in listed {
            let mut value = object.data.clone();
            value["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
            let Some(vm) = NeonVm::read(&value) else {
                continue;
            };
            let pod = runner_pods
                .iter()
                .find(|p| {
                    p.namespace().as_deref() == Some(vm.namespace.as_str())
                        && vm.pod_name.as_deref() == Some(p.name_any().as_str())
                })
                .cloned();
            out.push((vm, pod));
        }
    }
    Ok(Some(out))
}

/// The POD column of a slot.
fn pod_cell(pod: Option<&str>, slot: &SlotStatus) -> String {
    match (pod, &slot.running) {
        (None, _) => "no pod".into(),
        (Some(pod), _) if slot.current => format!("{pod}: runs it"),
        (Some(pod), Some(running)) => format!("{pod}: runs {running} (not this)"),
        (Some(pod), None) => format!("{pod}: no such container"),
    }
}

/// Runs the command; returns the exit status.
pub fn run(args: &StatusArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some(runtime) = runtime(err) else {
        return EXIT_USAGE;
    };
    let target = Target {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let read = runtime.block_on(async {
        let (client, context_namespace) = cluster::connect(&target).await?;
        let scope = if args.all_namespaces {
            PreviewScope::All
        } else {
            PreviewScope::Namespaces([args.namespace.clone().unwrap_or(context_namespace)].into())
        };
        let (live, notes) = cluster::read(&client, &scope).await?;
        let vms = read_vms(&client, &scope).await?;
        Ok::<_, String>((live, notes, vms))
    });
    let (live, notes, vms) = match read {
        Ok(read) => read,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return EXIT_USAGE;
        }
    };
    for note in notes {
        let _ = writeln!(err, "note: {note}");
    }
    let Some(vms) = vms else {
        let _ = writeln!(
            err,
            "NeonVM is not installed here (no vm.neon.tech VirtualMachines)"
        );
        return EXIT_OK;
    };
    let rules = crate::core::vm_preview::compile(&live, &compile_options(&args.allowed_registries));
    let labels_of = |namespace: &str| {
        crate::core::slot_resolution::namespace_labels(
            namespace,
            live.namespaces.get(namespace).unwrap_or(&BTreeMap::new()),
        )
    };
    let admission = Admission::without_digests(&rules, &labels_of);
    let shown: Vec<VmStatus> = vms
        .into_iter()
        .map(|(vm, pod)| {
            let images = pod.as_ref().map(neonvm::runner_images);
            VmStatus {
                slots: slot_statuses(
                    &vm,
                    images.as_ref(),
                    &admission,
                    args.neonvm_default_runner_image.as_deref(),
                ),
                live_reload: vm.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true"),
                pod: pod.map(|p| p.name_any()),
                namespace: vm.namespace,
                name: vm.name,
            }
        })
        .collect();
    let printed = match args.output {
        Output::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"virtualMachines": shown}))
                .map(|s| s + "\n")
                .unwrap_or_default()
        }
        Output::Table => rendered(&shown),
    };
    let _ = out.write_all(printed.as_bytes());
    EXIT_OK
}

/// The table of `shown`: one row per slot.
fn rendered(shown: &[VmStatus]) -> String {
    let mut rows = vec![[
        "VIRTUALMACHINE (vm.neon.tech)".to_string(),
        "SLOT".into(),
        "REQUESTED".into(),
        "RESOLVED".into(),
        "RULE".into(),
        "POD".into(),
    ]];
    for vm in shown {
        for slot in &vm.slots {
            rows.push([
                format!("{}/{}", vm.namespace, vm.name),
                slot.slot.clone(),
                slot.requested.clone(),
                slot.resolved
                    .clone()
                    .or_else(|| slot.error.as_ref().map(|e| format!("error: {e}")))
                    .unwrap_or_default(),
                slot.rule.clone().unwrap_or_else(|| "-".into()),
                pod_cell(vm.pod.as_deref(), slot),
            ]);
        }
    }
    table::render(&rows)
}
