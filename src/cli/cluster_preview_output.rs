//! What `imagemap resolve --cluster` prints: the VMs', workloads' and NeonVM VMs' tables, or
//! the same as JSON. Called by [`super::cluster_preview`]; calls only the pure previews' types.

use serde_json::{Value, json};

use super::preview_scope::PreviewScope;
use super::report::{problem_json, source_json};
use super::table;
use crate::core::neonvm_preview::NeonVmPreview;
use crate::core::vm_preview::{PodFate, Preview, SlotChange, VmPreview};
use crate::core::workload_preview::WorkloadPreview;

/// The workloads a change alters, and how many it leaves as they are.
pub(super) type Workloads = (Vec<WorkloadPreview>, usize);

/// NeonVM's VMs a change alters, and how many it leaves as they are.
pub(super) type NeonVms = (Vec<NeonVmPreview>, usize);

/// What happens to a VM's pod, as the table says it.
fn pod_cell(v: &VmPreview) -> &'static str {
    match v.action {
        PodFate::Recreate => "recreated (liveReload)",
        PodFate::RestartRequired => "kept: RestartRequired",
        PodFate::Create => "created",
        PodFate::Keep => "kept: images do not resolve",
        PodFate::Remove => "removed with the VM",
        PodFate::Unchanged => "unchanged",
    }
}

fn image_cell(image: Option<&String>, follow_tag: bool) -> String {
    match image {
        Some(i) if follow_tag => format!("{i} (follows tag)"),
        Some(i) => i.clone(),
        None => "-".into(),
    }
}

/// One row per changed slot: `named` and `action` on the first only.
fn slot_rows(named: &str, action: &str, shown: &[&SlotChange]) -> Vec<[String; 5]> {
    shown
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (named, action) = if i == 0 {
                (named.to_string(), action.to_string())
            } else {
                (String::new(), String::new())
            };
            let after = match &s.after {
                Ok(image) => image_cell(Some(image), s.follow_tag),
                Err(e) => format!("error: {e}"),
            };
            [
                named,
                action,
                s.slot.clone(),
                image_cell(s.now.as_ref(), false),
                after,
            ]
        })
        .collect()
}

/// The workloads' table: each changed container, now and after, and what happens to the
/// pods.
fn workloads_table(workloads: &Workloads) -> String {
    let mut rows = vec![[
        "WORKLOAD".to_string(),
        "PODS".into(),
        "CONTAINER".into(),
        "NOW".into(),
        "AFTER".into(),
    ]];
    for w in &workloads.0 {
        let named = format!("{} {}/{}", w.kind.name(), w.namespace, w.name);
        let shown: Vec<&SlotChange> = w.slots.iter().filter(|s| s.changes()).collect();
        rows.extend(slot_rows(&named, w.fate.describe(), &shown));
    }
    let mut out = if rows.len() > 1 {
        table::render(&rows)
    } else {
        "no workload changes\n".to_string()
    };
    let unchanged = match workloads.1 {
        1 => "1 workload or pod unchanged\n".to_string(),
        n => format!("{n} workloads and pods unchanged\n"),
    };
    out.push_str(&unchanged);
    out
}

/// NeonVM's VMs' table (none when there are none): each changed slot, now and after, and
/// what happens to the runner pod.
fn neonvm_table(neonvms: &NeonVms) -> String {
    let mut rows = vec![[
        "NEONVM VIRTUALMACHINE".to_string(),
        "POD".into(),
        "SLOT".into(),
        "NOW".into(),
        "AFTER".into(),
    ]];
    for v in &neonvms.0 {
        let named = format!("{}/{}", v.namespace, v.name);
        let shown: Vec<&SlotChange> = v.slots.iter().filter(|s| s.changes()).collect();
        rows.extend(slot_rows(&named, v.fate(), &shown));
    }
    if rows.len() == 1 && neonvms.1 == 0 {
        return String::new();
    }
    let mut out = if rows.len() > 1 {
        table::render(&rows)
    } else {
        "no NeonVM VirtualMachine changes\n".to_string()
    };
    let unchanged = match neonvms.1 {
        1 => "1 NeonVM VirtualMachine unchanged\n".to_string(),
        n => format!("{n} NeonVM VirtualMachines unchanged\n"),
    };
    out.push_str(&unchanged);
    out
}

pub(super) fn to_table(
    p: &Preview,
    workloads: &Workloads,
    neonvms: &NeonVms,
    scope: &PreviewScope,
) -> String {
    let mut rows = vec![[
        "VIRTUALMACHINE".to_string(),
        "POD".into(),
        "SLOT".into(),
        "NOW".into(),
        "AFTER".into(),
    ]];
    for v in &p.vms {
        let vm = format!("{}/{}", v.namespace, v.name);
        let shown: Vec<&SlotChange> = v.slots.iter().filter(|s| s.changes()).collect();
        if shown.is_empty() {
            rows.push([
                vm,
                pod_cell(v).into(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            continue;
        }
        rows.extend(slot_rows(&vm, pod_cell(v), &shown));
    }
    let mut out = if rows.len() > 1 {
        table::render(&rows)
    } else {
        "no VirtualMachine changes\n".to_string()
    };
    let unchanged = match p.unchanged {
        1 => "1 VirtualMachine unchanged\n".to_string(),
        n => format!("{n} VirtualMachines unchanged\n"),
    };
    out.push_str(&unchanged);
    out.push_str(&workloads_table(workloads));
    out.push_str(&neonvm_table(neonvms));
    out.push_str(&scope.to_string());
    out.push('\n');
    out
}

pub(super) fn to_json(
    p: &Preview,
    workloads: &Workloads,
    neonvms: &NeonVms,
    scope: &PreviewScope,
) -> Value {
    let neonvm_vms: Vec<Value> = neonvms
        .0
        .iter()
        .map(|v| {
            let images: Vec<Value> = v.slots.iter().map(slot_json).collect();
            json!({"namespace": v.namespace, "name": v.name, "pod": v.fate(), "images": images})
        })
        .collect();
    let changed: Vec<Value> = workloads
        .0
        .iter()
        .map(|w| {
            let images: Vec<Value> = w.slots.iter().map(slot_json).collect();
            json!({
                "kind": w.kind.name(),
                "namespace": w.namespace,
                "name": w.name,
                "pods": w.fate.as_str(),
                "images": images,
            })
        })
        .collect();
    let vms: Vec<Value> = p
        .vms
        .iter()
        .map(|v| {
            let images: Vec<Value> = v.slots.iter().map(slot_json).collect();
            json!({
                "namespace": v.namespace,
                "name": v.name,
                "liveReload": v.live_reload,
                "pod": v.action.as_str(),
                "images": images,
                "problems": v.new_problems,
            })
        })
        .collect();
    let problems: Vec<Value> = p.new_problems.iter().map(problem_json).collect();
    json!({
        "virtualMachines": vms,
        "workloads": changed,
        "unchangedWorkloads": workloads.1,
        "neonvmVirtualMachines": neonvm_vms,
        "unchangedNeonvmVirtualMachines": neonvms.1,
        "unchanged": p.unchanged,
        "problems": problems,
        "namespaces": scope.namespaces(),
        "allNamespaces": scope == &PreviewScope::All,
    })
}

fn slot_json(s: &SlotChange) -> Value {
    json!({
        "slot": s.slot,
        "now": s.now,
        "after": s.after.as_ref().ok(),
        "error": s.after.as_ref().err(),
        "changes": s.changes(),
        "followTag": s.follow_tag,
        "source": s.rule.as_ref().map(source_json),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_names_the_namespaces_looked_at() {
        let scope = PreviewScope::Namespaces(["e2e-preview".into(), "default".into()].into());
        let nothing = Preview::default();
        let none = (Vec::new(), 0);
        assert_eq!(
            to_table(&nothing, &none, &(Vec::new(), 0), &scope),
            "no VirtualMachine changes\n0 VirtualMachines unchanged\n\
             no workload changes\n0 workloads and pods unchanged\n\
             namespaces: default, e2e-preview\n"
        );
        let json = to_json(&nothing, &none, &(Vec::new(), 0), &scope);
        assert_eq!(json["namespaces"], json!(["default", "e2e-preview"]));
        assert_eq!(json["allNamespaces"], false);
        assert!(
            to_table(&nothing, &none, &(Vec::new(), 0), &PreviewScope::All)
                .ends_with("\nall namespaces\n")
        );
        let json = to_json(&nothing, &none, &(Vec::new(), 0), &PreviewScope::All);
        assert_eq!(json["namespaces"], Value::Null);
        assert_eq!(json["allNamespaces"], true);
    }

    #[test]
    fn neonvm_vms_get_a_table_of_their_own_only_when_there_are_some() {
        let vm = NeonVmPreview {
            namespace: "dev".into(),
            name: "db".into(),
            reloaded: true,
            slots: vec![SlotChange {
                slot: "runner".into(),
                now: Some("neonvm-runner:latest".into()),
                after: Ok("neonvm-runner:tilt-1".into()),
                rule: None,
                follow_tag: false,
            }],
        };
        let table = neonvm_table(&(vec![vm.clone()], 2));
        assert!(table.starts_with("NEONVM VIRTUALMACHINE"), "{table}");
        assert!(table.contains("dev/db"), "{table}");
        assert!(table.contains("reloaded"), "{table}");
        assert!(table.contains("neonvm-runner:tilt-1"), "{table}");
        assert!(
            table.ends_with("2 NeonVM VirtualMachines unchanged\n"),
            "{table}"
        );
        assert_eq!(neonvm_table(&(Vec::new(), 0)), "");
        assert_eq!(
            neonvm_table(&(Vec::new(), 1)),
            "no NeonVM VirtualMachine changes\n1 NeonVM VirtualMachine unchanged\n"
        );
        let json = to_json(
            &Preview::default(),
            &(Vec::new(), 0),
            &(vec![vm], 2),
            &PreviewScope::All,
        );
        assert_eq!(json["neonvmVirtualMachines"][0]["pod"], "reloaded");
        assert_eq!(
            json["neonvmVirtualMachines"][0]["images"][0]["after"],
            "neonvm-runner:tilt-1"
        );
        assert_eq!(json["unchangedNeonvmVirtualMachines"], 2);
    }
}
