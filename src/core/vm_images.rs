//! The image slots of imagemap's VirtualMachine and their resolution through a [`RuleSet`]
//! (each slot resolved as `slot_resolution` resolves any slot), computed once per group of
//! VMs that ask alike. Pure: the operator and `imagemap resolve` both call it.

use std::collections::{BTreeMap, HashMap};

use kube::ResourceExt;

use crate::core::api::{ResolvedImage, VirtualMachine};
use crate::core::rules::{Mode, Requester, RuleRef, RuleSet};
use crate::core::slot_resolution::{ImageSlot, SlotResolution, resolve_slot};

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

/// The resolution of every slot of a VM, in pod order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmResolution {
    pub slots: Vec<SlotResolution>,
}

impl VmResolution {
    /// Every slot as the VM's status records it.
    #[must_use]
    pub fn images(&self) -> Vec<ResolvedImage> {
        self.slots.iter().map(SlotResolution::image).collect()
    }

    /// Whether every slot resolved to a reference.
    #[must_use]
    pub fn all_resolved(&self) -> bool {
        self.slots.iter().all(|s| s.outcome.is_ok())
    }

    /// Pins every followed slot to the digest `digest_of` gives for its resolved reference
    /// (with the error of the last check, if it failed), else to the digest `previous`
    /// (the VM's last status) recorded for the same reference: a registry that fails never
    /// unpins a pod. A slot with no digest known at all runs the tag as resolved.
    /// (`digest_of` is given the slot's resolved reference and the rule that follows it.)
    pub fn pin(
        &mut self,
        digest_of: impl Fn(&str, Option<&RuleRef>) -> (Option<String>, Option<String>),
        previous: &[ResolvedImage],
    ) {
        for slot in &mut self.slots {
            let (digest, error) = match (&slot.outcome, slot.follow_tag) {
                (Ok(resolved), true) => {
                    let (digest, error) = digest_of(resolved, slot.rule.as_ref());
                    let recorded = || {
                        previous
                            .iter()
                            .find(|p| {
                                p.slot == slot.slot && p.resolved.as_deref() == Some(resolved)
                            })
                            .and_then(|p| p.digest.clone())
                    };
                    (digest.or_else(recorded), error)
                }
                _ => (None, None),
            };
            slot.digest = digest;
            slot.digest_error = error;
        }
    }

    /// The references this VM follows by tag, one per following slot (a reference two
    /// slots follow comes twice).
    pub fn followed(&self) -> impl Iterator<Item = &str> {
        self.slots
            .iter()
            .filter(|s| s.follow_tag)
            .filter_map(|s| s.outcome.as_ref().ok().map(String::as_str))
    }

    /// The references this VM follows by tag, each with the rule that follows it.
    pub fn following(&self) -> impl Iterator<Item = (&str, Option<&RuleRef>)> {
        self.slots
            .iter()
            .filter(|s| s.follow_tag)
            .filter_map(|s| Some((s.outcome.as_ref().ok()?.as_str(), s.rule.as_ref())))
    }

    /// Whether any slot has a conflict.
    #[must_use]
    pub fn has_conflicts(&self) -> bool {
        self.slots.iter().any(|s| !s.conflicts.is_empty())
    }
}

/// A VM with the labels of its namespace: what its resolution depends on.
#[derive(Debug, Clone, Copy)]
pub struct VmView<'a> {
    pub vm: &'a VirtualMachine,
    pub namespace_labels: &'a BTreeMap<String, String>,
}

impl VmView<'_> {
    /// [`resolve_vm`] of this VM.
    #[must_use]
    pub fn resolve(&self, set: &RuleSet, default_runner_image: &str, mode: Mode) -> VmResolution {
        resolve_vm(
            set,
            self.vm,
            self.namespace_labels,
            default_runner_image,
            mode,
        )
    }
}

/// Everything a VM's resolution depends on: VMs with equal keys resolve alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResolutionKey<'a> {
    namespace: Option<&'a str>,
    labels: &'a BTreeMap<String, String>,
    namespace_labels: &'a BTreeMap<String, String>,
    root_disk: &'a str,
    kernel: Option<&'a str>,
    extra: Vec<(&'a str, Option<&'a str>)>,
    runner: &'a str,
}

impl<'a> VmView<'a> {
    /// What this VM's resolution depends on.
    #[must_use]
    pub fn key(&self, default_runner_image: &'a str) -> ResolutionKey<'a> {
        let spec = &self.vm.spec;
        ResolutionKey {
            namespace: self.vm.metadata.namespace.as_deref(),
            labels: self.vm.labels(),
            namespace_labels: self.namespace_labels,
            root_disk: &spec.guest.root_disk.image,
            kernel: spec.guest.kernel_image.as_deref(),
            extra: spec
                .extra_init_containers
                .iter()
                .map(|c| (c.name.as_str(), c.image.as_deref()))
                .collect(),
            runner: spec.runner_image.as_deref().unwrap_or(default_runner_image),
        }
    }
}

/// Resolutions under one rule set, computed once per distinct [`ResolutionKey`]: VMs that
/// ask for the same images in the same place cost one resolution.
pub struct Resolutions<'a> {
    set: &'a RuleSet,
    default_runner_image: &'a str,
    mode: Mode,
    memo: HashMap<ResolutionKey<'a>, VmResolution>,
}

impl<'a> Resolutions<'a> {
    #[must_use]
    pub fn new(set: &'a RuleSet, default_runner_image: &'a str, mode: Mode) -> Self {
        Resolutions {
            set,
            default_runner_image,
            mode,
            memo: HashMap::new(),
        }
    }

    /// The resolution of `view`'s VM.
    pub fn of(&mut self, view: VmView<'a>) -> &VmResolution {
        let (set, runner, mode) = (self.set, self.default_runner_image, self.mode);
        self.memo
            .entry(view.key(runner))
            .or_insert_with(|| view.resolve(set, runner, mode))
    }
}

/// Resolves every slot of `vm`. `namespace_labels` are the labels of the VM's namespace.
#[must_use]
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
        namespace_rules: true,
    };
    VmResolution {
        slots: image_slots(vm, default_runner_image)
            .into_iter()
            .map(|slot| resolve_slot(set, slot, &who, mode))
            .collect(),
    }
}

#[cfg(test)]
mod tests;
