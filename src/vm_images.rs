//! The image slots of a VirtualMachine and their resolution through a [`RuleSet`].
//! Pure: the operator and `imagemap resolve` both call it.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{ResolvedImage, RuleSource, VirtualMachine};
use crate::reference::Reference;
use crate::rules::{Mode, Requester, ResolveError, RuleSet};

/// Runner image used when neither the VM nor the operator names one.
pub const DEFAULT_RUNNER_IMAGE: &str = "neondatabase/neonvm-runner:v0.40.0";

/// Slot name of the root disk image.
pub const SLOT_ROOT_DISK: &str = "rootDisk";
/// Slot name of the kernel image.
pub const SLOT_KERNEL: &str = "kernel";
/// Slot name of the runner image.
pub const SLOT_RUNNER: &str = "runner";
/// Slot name prefix of extra init containers: `extraInitContainers/<name>`.
pub const SLOT_EXTRA_PREFIX: &str = "extraInitContainers/";

/// One image a VM asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSlot {
    pub slot: String,
    pub requested: String,
}

/// Every image slot of `vm`, in pod order: root disk, kernel, extra init containers, runner.
pub fn image_slots(vm: &VirtualMachine, default_runner_image: &str) -> Vec<ImageSlot> {
    let spec = &vm.spec;
    let mut slots = vec![ImageSlot {
        slot: SLOT_ROOT_DISK.into(),
        requested: spec.guest.root_disk.image.clone(),
    }];
    if let Some(kernel) = &spec.guest.kernel_image {
        slots.push(ImageSlot {
            slot: SLOT_KERNEL.into(),
            requested: kernel.clone(),
        });
    }
    for c in &spec.extra_init_containers {
        slots.push(ImageSlot {
            slot: format!("{SLOT_EXTRA_PREFIX}{}", c.name),
            requested: c.image.clone().unwrap_or_default(),
        });
    }
    slots.push(ImageSlot {
        slot: SLOT_RUNNER.into(),
        requested: spec
            .runner_image
            .clone()
            .unwrap_or_else(|| default_runner_image.to_string()),
    });
    slots
}

/// The resolution of every slot of a VM, plus the rules that conflicted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmResolution {
    pub images: Vec<ResolvedImage>,
    /// Per slot (same order as `images`): rules tied with the winner that rewrite differently.
    pub conflicts: Vec<Vec<RuleSource>>,
    /// Per slot: whether its error is a target outside the allowed registries.
    pub disallowed: Vec<bool>,
}

impl VmResolution {
    /// Whether every slot resolved to a reference.
    pub fn all_resolved(&self) -> bool {
        self.images.iter().all(|i| i.error.is_none())
    }

    /// Whether any slot has a conflict.
    pub fn has_conflicts(&self) -> bool {
        self.conflicts.iter().any(|c| !c.is_empty())
    }
}

/// Resolves every slot of `vm`. `namespace_labels` are the labels of the VM's namespace.
pub fn resolve_vm(
    set: &RuleSet,
    vm: &VirtualMachine,
    namespace_labels: &BTreeMap<String, String>,
    default_runner_image: &str,
    mode: Mode,
) -> VmResolution {
    let namespace = vm.namespace().unwrap_or_default();
    let who = Requester {
        namespace: &namespace,
        labels: vm.labels(),
        namespace_labels,
    };
    let mut out = VmResolution::default();
    for slot in image_slots(vm, default_runner_image) {
        let (image, conflicts, disallowed) = resolve_slot(set, &slot, &who, mode);
        out.images.push(image);
        out.conflicts.push(conflicts);
        out.disallowed.push(disallowed);
    }
    out
}

fn resolve_slot(
    set: &RuleSet,
    slot: &ImageSlot,
    who: &Requester<'_>,
    mode: Mode,
) -> (ResolvedImage, Vec<RuleSource>, bool) {
    let mut image = ResolvedImage {
        slot: slot.slot.clone(),
        requested: slot.requested.clone(),
        ..ResolvedImage::default()
    };
    let reference = match Reference::parse_normalized(&slot.requested) {
        Ok(r) => r,
        Err(e) => {
            image.error = Some(format!(
                "requested image {:?} is not a valid reference: {e}",
                slot.requested
            ));
            return (image, Vec::new(), false);
        }
    };
    let res = set.resolve(&reference, who, mode);
    image.source = res.rule.map(|id| set.source(id));
    let mut disallowed = false;
    match res.resolved {
        Ok(r) => image.resolved = Some(r.to_string()),
        Err(e) => {
            disallowed = matches!(e, ResolveError::DisallowedTarget(_));
            image.error = Some(e.to_string());
        }
    }
    let conflicts = res.conflicts.iter().map(|&id| set.source(id)).collect();
    (image, conflicts, disallowed)
}

/// The labels every namespace carries in a cluster (`kubernetes.io/metadata.name`), merged
/// with `labels`.
pub fn namespace_labels(
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    out.insert("kubernetes.io/metadata.name".into(), namespace.into());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MappingRule, RuleMatch, VirtualMachineSpec};
    use crate::rules::{CompileOptions, MappingInput, Scope};
    use k8s_openapi::api::core::v1::Container;

    fn vm(yaml: &str) -> VirtualMachine {
        let mut vm = VirtualMachine::new(
            "vm",
            serde_yaml_ng::from_str::<VirtualMachineSpec>(yaml).unwrap(),
        );
        vm.metadata.namespace = Some("dev".into());
        vm
    }

    #[test]
    fn slots_follow_pod_order_and_default_runner() {
        let mut v = vm("guest: {rootDisk: {image: disk:1}, kernelImage: kernel:1}");
        v.spec.extra_init_containers.push(Container {
            name: "setup".into(),
            image: Some("busybox".into()),
            ..Default::default()
        });
        let slots: Vec<(String, String)> = image_slots(&v, "runner:default")
            .into_iter()
            .map(|s| (s.slot, s.requested))
            .collect();
        assert_eq!(
            slots,
            [
                ("rootDisk".to_string(), "disk:1".to_string()),
                ("kernel".into(), "kernel:1".into()),
                ("extraInitContainers/setup".into(), "busybox".into()),
                ("runner".into(), "runner:default".into()),
            ]
        );
    }

    #[test]
    fn resolution_records_source_and_errors() {
        let rules = vec![MappingRule {
            match_: RuleMatch {
                repository: Some("disk".into()),
                ..Default::default()
            },
            to: Some("localhost:5000/disk".into()),
            ..Default::default()
        }];
        let set = RuleSet::compile(
            &[MappingInput {
                scope: Scope::Namespaced,
                namespace: Some("dev".into()),
                name: "m".into(),
                priority: 0,
                selector: None,
                namespace_selector: None,
                dry_run: false,
                rules,
            }],
            &CompileOptions::default(),
        );
        let v = vm("guest: {rootDisk: {image: 'disk:1'}}\nrunnerImage: 'Bad Image'");
        let res = resolve_vm(
            &set,
            &v,
            &namespace_labels("dev", &BTreeMap::new()),
            "r",
            Mode::Live,
        );
        assert_eq!(
            res.images[0].resolved.as_deref(),
            Some("localhost:5000/disk:1")
        );
        assert_eq!(
            res.images[0].source.as_ref().map(|s| s.name.as_str()),
            Some("m")
        );
        assert!(
            res.images[1]
                .error
                .as_deref()
                .unwrap_or("")
                .contains("not a valid reference")
        );
        assert!(!res.all_resolved());
    }
}
