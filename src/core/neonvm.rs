//! NeonVM's VirtualMachines (`vm.neon.tech/v1`) as imagemap reads them, pure and with no
//! NeonVM code: the fields it maps and watches, read from the object as the API server serves
//! it (JSON, so that a field this reader does not know is never lost or refused) — the image
//! slots (root disk, kernel, extra init containers, runner, named as for imagemap's own VMs),
//! the restart policy, the phase and runner pod of its status — and how a runner pod's
//! containers are those slots. What live reload does with a VM: [`reload`]; what its slots
//! resolve to and whether its pod runs it: [`slot_status`].

pub mod reload;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::core::pod::pod_slots::SlotKind;
use crate::core::rules::Requester;
use crate::core::slot_resolution::ImageSlot;
use crate::core::vm_images::{SLOT_EXTRA_PREFIX, SLOT_KERNEL, SLOT_ROOT_DISK, SLOT_RUNNER};

/// NeonVM's API group.
pub const GROUP: &str = "vm.neon.tech";
/// Its VirtualMachine CRD, by name: imagemap has a `virtualmachines` of its own.
pub const VM_CRD: &str = "virtualmachines.vm.neon.tech";
/// Its VirtualMachineMigration CRD.
pub const MIGRATION_CRD: &str = "virtualmachinemigrations.vm.neon.tech";
/// The label NeonVM puts on a VM's runner pods: the VM's name.
pub const VM_NAME_LABEL: &str = "vm.neon.tech/name";
/// The runner pod's container that runs the runner image.
pub const RUNNER_CONTAINER: &str = "neonvm-runner";
/// The init container that runs the root disk image.
pub const ROOT_DISK_CONTAINER: &str = "init";
/// The init container that runs the kernel image.
pub const KERNEL_CONTAINER: &str = "init-kernel";

/// What a NeonVM VM restarts its runner after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeonVmRestartPolicy {
    Always,
    OnFailure,
    Never,
}

/// The phases in which the VM's runner must not be touched: a migration is under way.
const MIGRATING: [&str; 2] = ["PreMigrating", "Migrating"];

/// A NeonVM VirtualMachine, as imagemap reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeonVm {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub root_disk: Option<String>,
    pub kernel: Option<String>,
    /// Extra init containers: name and image.
    pub extra: Vec<(String, String)>,
    /// `spec.runnerImage`; `None`: the controller's own default.
    pub runner: Option<String>,
    pub restart_policy: NeonVmRestartPolicy,
    pub phase: Option<String>,
    /// The runner pod the status names.
    pub pod_name: Option<String>,
}

fn text(value: &Value, path: &[&str]) -> Option<String> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

impl NeonVm {
    /// Reads a VM from the object the API server serves; `None` without a name or namespace.
    #[must_use]
    pub fn read(object: &Value) -> Option<NeonVm> {
        let metadata = object.get("metadata")?;
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let extra = spec
            .get("extraInitContainers")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|c| Some((text(c, &["name"])?, text(c, &["image"])?)))
                    .collect()
            })
            .unwrap_or_default();
        let restart_policy = match text(spec, &["restartPolicy"]).as_deref() {
            Some("Never") => NeonVmRestartPolicy::Never,
            Some("OnFailure") => NeonVmRestartPolicy::OnFailure,
            _ => NeonVmRestartPolicy::Always,
        };
        Some(NeonVm {
            namespace: text(metadata, &["namespace"])?,
            name: text(metadata, &["name"])?,
            uid: text(metadata, &["uid"]).unwrap_or_default(),
            labels: crate::core::pod::records::string_map(metadata.get("labels")),
            root_disk: text(spec, &["guest", "rootDisk", "image"]),
            kernel: text(spec, &["guest", "kernelImage"]),
            extra,
            runner: text(spec, &["runnerImage"]),
            restart_policy,
            phase: text(object, &["status", "phase"]),
            pod_name: text(object, &["status", "podName"]),
        })
    }

    /// The image slots the VM requests, in pod order. The runner's, when the VM names none,
    /// is `default_runner` (`--neonvm-default-runner-image`); without it the runner slot is
    /// left out: imagemap does not know what the controller will run.
    #[must_use]
    pub fn slots(&self, default_runner: Option<&str>) -> Vec<ImageSlot> {
        let slot = |slot: String, requested: &str| ImageSlot {
            slot,
            requested: requested.to_string(),
        };
        let mut slots = Vec::new();
        if let Some(disk) = &self.root_disk {
            slots.push(slot(SLOT_ROOT_DISK.into(), disk));
        }
        if let Some(kernel) = &self.kernel {
            slots.push(slot(SLOT_KERNEL.into(), kernel));
        }
        for (name, image) in &self.extra {
            slots.push(slot(format!("{SLOT_EXTRA_PREFIX}{name}"), image));
        }
        if let Some(runner) = self.runner.as_deref().or(default_runner) {
            slots.push(slot(SLOT_RUNNER.into(), runner));
        }
        slots
    }

    /// Who asks for the VM's images, as admission sees its runner pod: NeonVM copies the VM's
    /// labels onto it, `imagemap.dev/skip` included.
    #[must_use]
    pub fn requester<'a>(
        &'a self,
        namespace_labels: &'a BTreeMap<String, String>,
    ) -> Requester<'a> {
        crate::core::pod::records::pod_requester(&self.namespace, &self.labels, namespace_labels)
    }

    /// Whether a migration is under way by the VM's phase.
    #[must_use]
    pub fn migrating(&self) -> bool {
        self.phase
            .as_deref()
            .is_some_and(|p| MIGRATING.contains(&p))
    }
}

/// The slot of a runner pod's container of `kind` named `name`, named as the VM's slots are.
#[must_use]
pub fn runner_slot(kind: SlotKind, name: &str) -> String {
    match (kind, name) {
        (SlotKind::Init, ROOT_DISK_CONTAINER) => SLOT_ROOT_DISK.into(),
        (SlotKind::Init, KERNEL_CONTAINER) => SLOT_KERNEL.into(),
        (SlotKind::Init, other) => format!("{SLOT_EXTRA_PREFIX}{other}"),
        (SlotKind::Container, RUNNER_CONTAINER) => SLOT_RUNNER.into(),
        (kind, other) => kind.key(other),
    }
}

/// The images a runner pod runs, by the VM's slots.
#[must_use]
pub fn runner_images(pod: &k8s_openapi::api::core::v1::Pod) -> BTreeMap<String, String> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let init = spec.init_containers.iter().flatten();
    init.map(|c| (SlotKind::Init, c))
        .chain(spec.containers.iter().map(|c| (SlotKind::Container, c)))
        .filter_map(|(kind, c)| Some((runner_slot(kind, &c.name), c.image.clone()?)))
        .collect()
}

/// Who controls a pod, by its controller owner reference (`metadata.ownerReferences`): a
/// NeonVM VM's runner pod, or a migration's target pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerOwner {
    /// The runner pod of the VM so named.
    Vm(String),
    /// The target pod of a migration; the VM so named is its other owner.
    Migration { vm: Option<String> },
}

/// Whether the pod of `metadata` is a NeonVM runner pod, and whose.
#[must_use]
pub fn runner_owner(metadata: &Value) -> Option<RunnerOwner> {
    let owners = metadata.get("ownerReferences")?.as_array()?;
    let neonvm = |o: &&Value, kind: &str| {
        text(o, &["apiVersion"]).is_some_and(|v| v.split('/').next() == Some(GROUP))
            && text(o, &["kind"]).as_deref() == Some(kind)
    };
    let controller = owners
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?;
    if neonvm(&controller, "VirtualMachine") {
        return Some(RunnerOwner::Vm(text(controller, &["name"])?));
    }
    if neonvm(&controller, "VirtualMachineMigration") {
        let vm = owners
            .iter()
            .find(|o| neonvm(o, "VirtualMachine"))
            .and_then(|o| text(o, &["name"]));
        return Some(RunnerOwner::Migration { vm });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_neonvm_vm_reads_as_its_slots_and_state() {
        let object = json!({
            "apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
            "metadata": {"name": "compute", "namespace": "dev", "uid": "u1",
                         "labels": {"imagemap.dev/live-reload": "true"}},
            "spec": {"guest": {"rootDisk": {"image": "neondatabase/vm-compute-node-v17:latest"},
                               "kernelImage": "neondatabase/vm-kernel:6"},
                     "extraInitContainers": [{"name": "tools", "image": "busybox"}],
                     "restartPolicy": "Never"},
            "status": {"phase": "Migrating", "podName": "compute-abcde"}
        });
        let vm = NeonVm::read(&object).expect("a VM");
        assert_eq!(vm.restart_policy, NeonVmRestartPolicy::Never);
        assert!(vm.migrating());
        assert_eq!(vm.pod_name.as_deref(), Some("compute-abcde"));
        let slots: Vec<(String, String)> = vm
            .slots(Some("neondatabase/neonvm-runner:v1"))
            .into_iter()
            .map(|s| (s.slot, s.requested))
            .collect();
        assert_eq!(
            slots,
            [
                (
                    "rootDisk".into(),
                    "neondatabase/vm-compute-node-v17:latest".into()
                ),
                ("kernel".into(), "neondatabase/vm-kernel:6".into()),
                ("extraInitContainers/tools".into(), "busybox".into()),
                ("runner".into(), "neondatabase/neonvm-runner:v1".into()),
            ]
        );
        // No runner image and no default: imagemap does not know it.
        assert_eq!(vm.slots(None).len(), 3);
        assert_eq!(
            NeonVm::read(&json!({"metadata": {"name": "x", "namespace": "dev"}}))
                .map(|v| v.restart_policy),
            Some(NeonVmRestartPolicy::Always)
        );
    }

    #[test]
    fn a_runner_pods_containers_are_the_vms_slots_and_its_owner_says_whose() {
        assert_eq!(runner_slot(SlotKind::Init, "init"), "rootDisk");
        assert_eq!(runner_slot(SlotKind::Init, "init-kernel"), "kernel");
        assert_eq!(
            runner_slot(SlotKind::Init, "tools"),
            "extraInitContainers/tools"
        );
        assert_eq!(runner_slot(SlotKind::Container, "neonvm-runner"), "runner");
        assert_eq!(runner_slot(SlotKind::Container, "other"), "other");
        assert_eq!(runner_slot(SlotKind::Ephemeral, "debug"), "ephemeral:debug");
        let owned = |refs: Value| runner_owner(&json!({"ownerReferences": refs}));
        assert_eq!(
            owned(
                json!([{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
                          "name": "compute", "controller": true}])
            ),
            Some(RunnerOwner::Vm("compute".into()))
        );
        assert_eq!(
            owned(json!([
                {"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachineMigration",
                 "name": "move", "controller": true},
                {"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine", "name": "compute"}])),
            Some(RunnerOwner::Migration {
                vm: Some("compute".into())
            })
        );
        // imagemap's own kind shares the name; another group is not NeonVM.
        assert_eq!(
            owned(
                json!([{"apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
                          "name": "compute", "controller": true}])
            ),
            None
        );
        assert_eq!(runner_owner(&json!({})), None);
    }
}
