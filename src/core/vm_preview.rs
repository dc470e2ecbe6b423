//! What a change does to the VMs that run now: for each VirtualMachine, its images as its
//! status records them (what the operator last resolved) → as the changed objects resolve
//! them, and what the operator then does to its pod — recreates it (liveReload), reports
//! `RestartRequired`, creates it, keeps it because an image no longer resolves, or nothing.
//! Pure: `imagemap resolve --cluster` reads the objects and prints the result.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;

use crate::core::admission::pod_view::Admission;
use crate::core::api::{ResolvedImage, VirtualMachine, VirtualMachineStatus};
use crate::core::manifests::Manifests;
use crate::core::rules::{CompileOptions, MappingInput, Mode, RuleProblem, RuleRef, RuleSet};
use crate::core::slot_resolution;
use crate::core::slot_resolution::SlotResolution;
use crate::core::vm_images::{self, VmResolution};

/// What the operator does to a VM's pod once the change is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodFate {
    /// Its pod is replaced by one with the new images (`liveReload: true`).
    Recreate,
    /// Its pod stays and the VM reports `RestartRequired` (`liveReload: false`).
    RestartRequired,
    /// It has no pod yet: one is created with these images.
    Create,
    /// An image no longer resolves: the pod stays, and the VM says why.
    Keep,
    /// The VM is removed; its pod goes with it (owner reference).
    Remove,
    /// Its images stay as they are.
    Unchanged,
}

impl PodFate {
    /// As the JSON output names it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PodFate::Recreate => "recreate",
            PodFate::RestartRequired => "restartRequired",
            PodFate::Create => "create",
            PodFate::Keep => "keep",
            PodFate::Remove => "remove",
            PodFate::Unchanged => "unchanged",
        }
    }
}

/// One image slot, now and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotChange {
    pub slot: String,
    /// The image the pod runs now, as the VM's status records it (`None`: not resolved,
    /// or the slot is new).
    pub now: Option<String>,
    /// The image after the change (pinned to the recorded digest when the same tag is
    /// still followed), or why it does not resolve.
    pub after: Result<String, String>,
    /// The rule that decides it after the change.
    pub rule: Option<RuleRef>,
    /// Whether that rule follows the image's tag.
    pub follow_tag: bool,
}

impl SlotChange {
    /// Each of `slots` (slot, requested) of a pod — or a pod template, or a NeonVM VM's
    /// runner pod — of `namespace` labelled `labels`, as admission maps it under `before`
    /// and under `after`.
    #[must_use]
    pub fn between(
        before: &Admission<'_>,
        after: &Admission<'_>,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        slots: &[(&str, &str)],
    ) -> Vec<SlotChange> {
        before
            .slots(namespace, labels, slots.iter().copied())
            .into_iter()
            .zip(after.slots(namespace, labels, slots.iter().copied()))
            .map(|(before, after)| {
                let after = after.resolution;
                SlotChange {
                    slot: after.slot.clone(),
                    now: before.resolution.image_to_run().ok(),
                    after: after.image_to_run(),
                    follow_tag: after.follow_tag,
                    rule: after.rule,
                }
            })
            .collect()
    }

    /// Whether the slot's image changes.
    #[must_use]
    pub fn changes(&self) -> bool {
        self.after.as_ref().ok() != self.now.as_ref()
    }
}

/// One VM's preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmPreview {
    pub namespace: String,
    pub name: String,
    pub live_reload: bool,
    pub action: PodFate,
    pub slots: Vec<SlotChange>,
    /// Problems of its images after the change that it does not have now: images that do
    /// not resolve, conflicts.
    pub new_problems: Vec<String>,
}

/// The preview of a change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The VMs the change affects (their pod, or their problems), by namespace and name.
    pub vms: Vec<VmPreview>,
    /// How many VMs it leaves as they are.
    pub unchanged: usize,
    /// Rule problems after the change that are not there now.
    pub new_problems: Vec<RuleProblem>,
}

impl Preview {
    /// Whether applying the change would change anything the operator does or reports.
    #[must_use]
    pub fn changes_anything(&self) -> bool {
        !self.vms.is_empty() || !self.new_problems.is_empty()
    }

    /// Whether the change brings problems that are not there now.
    #[must_use]
    pub fn has_new_problems(&self) -> bool {
        !self.new_problems.is_empty() || self.vms.iter().any(|v| !v.new_problems.is_empty())
    }
}

/// Compiles the mappings of `objects` with `options` and the local registry they advertise.
#[must_use]
pub fn compile(objects: &Manifests, options: &CompileOptions) -> RuleSet {
    let inputs: Vec<MappingInput> = objects
        .image_mappings
        .iter()
        .map(MappingInput::from)
        .chain(
            objects
                .cluster_image_mappings
                .iter()
                .map(MappingInput::from),
        )
        .collect();
    let options = CompileOptions {
        local_registry: objects.local_registry().cloned().map(Arc::new),
        ..options.clone()
    };
    RuleSet::compile(&inputs, &options)
}

/// What changing the objects `now` (VMs with their status) into `after` does to the VMs.
#[must_use]
pub fn preview(
    now: &Manifests,
    after: &Manifests,
    options: &CompileOptions,
    default_runner_image: &str,
) -> Preview {
    let (old_set, new_set) = (compile(now, options), compile(after, options));
    let was: BTreeSet<&RuleProblem> = old_set.problems().iter().collect();
    let new_problems = new_set
        .problems()
        .iter()
        .filter(|p| !was.contains(p))
        .cloned()
        .collect();
    let live: BTreeMap<(String, String), &VirtualMachine> = now
        .virtual_machines
        .iter()
        .map(|vm| ((vm.namespace().unwrap_or_default(), vm.name_any()), vm))
        .collect();
    let mut vms = Vec::new();
    let mut unchanged = 0;
    let mut seen = BTreeSet::new();
    for vm in &after.virtual_machines {
        let key = (vm.namespace().unwrap_or_default(), vm.name_any());
        let current = live.get(&key).copied();
        seen.insert(key.clone());
        let resolve = |set: &RuleSet, objects: &Manifests, vm: &VirtualMachine| {
            let labels = objects.namespaces.get(&key.0).cloned().unwrap_or_default();
            vm_images::resolve_vm(
                set,
                vm,
                &slot_resolution::namespace_labels(&key.0, &labels),
                default_runner_image,
                Mode::Live,
            )
        };
        let recorded: Vec<ResolvedImage> = current
            .and_then(|v| v.status.as_ref())
            .map(VirtualMachineStatus::resolved_image_values)
            .unwrap_or_default();
        let mut resolution = resolve(&new_set, after, vm);
        // A tag followed before and after keeps the digest the operator last verified.
        resolution.pin(|_, _| (None, None), &recorded);
        let before = current.map(|v| resolve(&old_set, now, v));
        let one = vm_preview(vm, current, &recorded, &resolution, before.as_ref());
        if one.action == PodFate::Unchanged && one.new_problems.is_empty() {
            unchanged += 1;
        } else {
            vms.push(one);
        }
    }
    for ((namespace, name), vm) in &live {
        if !seen.contains(&(namespace.clone(), name.clone())) {
            vms.push(VmPreview {
                namespace: namespace.clone(),
                name: name.clone(),
                live_reload: vm.spec.live_reload,
                action: PodFate::Remove,
                slots: Vec::new(),
                new_problems: Vec::new(),
            });
        }
    }
    vms.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Preview {
        vms,
        unchanged,
        new_problems,
    }
}

/// The preview of one VM: `current` is the VM as it is (with its status), `recorded` its
/// status's images, `after` its resolution after the change, `before` the one now.
fn vm_preview(
    vm: &VirtualMachine,
    current: Option<&VirtualMachine>,
    recorded: &[ResolvedImage],
    after: &VmResolution,
    before: Option<&VmResolution>,
) -> VmPreview {
    let slots: Vec<SlotChange> = after
        .slots
        .iter()
        .map(|s| slot_change(s, recorded))
        .collect();
    let has_pod = current
        .and_then(|v| v.status.as_ref())
        .is_some_and(|s| s.pod_name.is_some());
    let same = slots.iter().all(|s| !s.changes())
        && recorded.len() == slots.len()
        && recorded.iter().zip(&slots).all(|(r, s)| r.slot == s.slot);
    let action = if same {
        PodFate::Unchanged
    } else if !after.all_resolved() {
        PodFate::Keep
    } else if !has_pod {
        PodFate::Create
    } else if vm.spec.live_reload {
        PodFate::Recreate
    } else {
        PodFate::RestartRequired
    };
    let problems = |r: &VmResolution| -> BTreeSet<String> { slot_problems(r).collect() };
    let was = before.map(problems).unwrap_or_default();
    let new_problems = slot_problems(after).filter(|p| !was.contains(p)).collect();
    VmPreview {
        namespace: vm.namespace().unwrap_or_default(),
        name: vm.name_any(),
        live_reload: vm.spec.live_reload,
        action,
        slots,
        new_problems,
    }
}

fn slot_change(s: &SlotResolution, recorded: &[ResolvedImage]) -> SlotChange {
    SlotChange {
        slot: s.slot.clone(),
        now: recorded
            .iter()
            .find(|r| r.slot == s.slot)
            .and_then(ResolvedImage::pod_image),
        after: s.image().pod_image().ok_or_else(|| {
            s.outcome
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default()
        }),
        rule: s.rule.clone(),
        follow_tag: s.follow_tag,
    }
}

/// A resolution's problems, as lines: slots that do not resolve, and conflicts.
fn slot_problems(r: &VmResolution) -> impl Iterator<Item = String> + '_ {
    r.slots.iter().filter_map(|s| {
        if let Err(e) = &s.outcome {
            return Some(format!("{}: {e}", s.slot));
        }
        let first = s.conflicts.first()?;
        let more = s.conflicts.len() - 1 + s.more_conflicts;
        let others = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        let winner = s.rule.as_ref().map(ToString::to_string).unwrap_or_default();
        Some(format!(
            "{}: {winner} conflicts with {first}{others}",
            s.slot
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use super::*;

    fn objects(yaml: &str) -> Manifests {
        let mut m = Manifests::default();
        m.add_stream(Path::new("t.yaml"), yaml, "dev").unwrap();
        m
    }

    /// Two VMs the operator reconciled under `tilt`'s rule 0 (`x.io/disk:1`), one with
    /// liveReload, one without, and a third whose pod is not there yet.
    const NOW: &str = r"
apiVersion: imagemap.dev/v1alpha1
kind: ImageMapping
metadata: {name: tilt}
spec: {rules: [{match: {repository: disk}, to: x.io/disk:1}]}
---
apiVersion: imagemap.dev/v1alpha1
kind: VirtualMachine
metadata: {name: live}
spec: {liveReload: true, guest: {rootDisk: {image: disk}}, runnerImage: r.io/runner:1}
status:
  podName: live-1
  resolvedImages:
  - {slot: rootDisk, requested: disk, resolved: x.io/disk:1}
  - {slot: runner, requested: r.io/runner:1, resolved: r.io/runner:1}
---
apiVersion: imagemap.dev/v1alpha1
kind: VirtualMachine
metadata: {name: steady}
spec: {guest: {rootDisk: {image: disk}}, runnerImage: r.io/runner:1}
status:
  podName: steady-1
  resolvedImages:
  - {slot: rootDisk, requested: disk, resolved: x.io/disk:1}
  - {slot: runner, requested: r.io/runner:1, resolved: r.io/runner:1}
---
apiVersion: imagemap.dev/v1alpha1
kind: VirtualMachine
metadata: {name: other}
spec: {liveReload: true, guest: {rootDisk: {image: other}}, runnerImage: r.io/runner:1}
status:
  podName: other-1
  resolvedImages:
  - {slot: rootDisk, requested: other, resolved: docker.io/library/other}
  - {slot: runner, requested: r.io/runner:1, resolved: r.io/runner:1}
";

    fn changed(rules: &str) -> Manifests {
        let mut after = objects(NOW);
        after.overlay(objects(&format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: tilt}}\nspec: {{rules: {rules}}}\n"
        )));
        after
    }

    fn run(after: &Manifests) -> Preview {
        preview(
            &objects(NOW),
            after,
            &CompileOptions::default(),
            "r.io/runner:1",
        )
    }

    #[test]
    fn a_changed_rule_recreates_live_reload_pods_and_asks_the_others_for_a_restart() {
        let p = run(&changed("[{match: {repository: disk}, to: y.io/disk:2}]"));
        assert_eq!(p.unchanged, 1, "other");
        let actions: Vec<_> = p.vms.iter().map(|v| (v.name.as_str(), v.action)).collect();
        assert_eq!(
            actions,
            [
                ("live", PodFate::Recreate),
                ("steady", PodFate::RestartRequired)
            ]
        );
        let disk = &p.vms[0].slots[0];
        assert_eq!(disk.now.as_deref(), Some("x.io/disk:1"));
        assert_eq!(disk.after.as_deref(), Ok("y.io/disk:2"));
        assert!(disk.changes() && !p.vms[0].slots[1].changes());
        assert!(!p.has_new_problems());
        // The same objects: nothing changes.
        let same = run(&objects(NOW));
        assert!(!same.changes_anything(), "{same:?}");
        assert_eq!(same.unchanged, 3);
    }

    #[test]
    fn new_problems_keep_the_pods_and_are_listed() {
        // A rule that rewrites to something that is not a reference, and a tie.
        let p = run(&changed(
            "[{match: {regex: 'docker.io/library/(disk)'}, to: 'mirror.io/UPPER/$1'}, {match: {repository: other}, to: a.io/o}, {match: {repository: other}, to: b.io/o}]",
        ));
        let live = p.vms.iter().find(|v| v.name == "live").unwrap();
        assert_eq!(live.action, PodFate::Keep);
        assert!(live.slots[0].after.is_err());
        assert_eq!(live.new_problems.len(), 1, "{:?}", live.new_problems);
        let other = p.vms.iter().find(|v| v.name == "other").unwrap();
        assert_eq!(other.action, PodFate::Recreate);
        assert!(
            other.new_problems[0].contains("conflicts with"),
            "{other:?}"
        );
        assert!(!p.new_problems.is_empty());
        assert!(p.has_new_problems());
    }

    #[test]
    fn removed_and_new_vms_and_a_followed_tag_keep_their_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let now = objects(&format!(
            "{NOW}---\napiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: follow}}\nspec: {{rules: [{{match: {{repository: f}}, to: x.io/f:dev, followTag: true}}]}}\n---\napiVersion: imagemap.dev/v1alpha1\nkind: VirtualMachine\nmetadata: {{name: follows}}\nspec: {{liveReload: true, guest: {{rootDisk: {{image: f}}}}, runnerImage: r.io/runner:1}}\nstatus:\n  podName: follows-1\n  resolvedImages:\n  - {{slot: rootDisk, requested: f, resolved: x.io/f:dev, followTag: true, digest: '{digest}'}}\n  - {{slot: runner, requested: r.io/runner:1, resolved: r.io/runner:1}}\n"
        ));
        let mut after = objects(&format!(
            "{NOW}---\napiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: follow}}\nspec: {{rules: [{{match: {{repository: f}}, to: x.io/f:dev, followTag: true}}]}}\n---\napiVersion: imagemap.dev/v1alpha1\nkind: VirtualMachine\nmetadata: {{name: follows}}\nspec: {{liveReload: true, guest: {{rootDisk: {{image: f}}}}, runnerImage: r.io/runner:1}}\n---\napiVersion: imagemap.dev/v1alpha1\nkind: VirtualMachine\nmetadata: {{name: new}}\nspec: {{guest: {{rootDisk: {{image: disk}}}}}}\n"
        ));
        after.remove(&[crate::core::manifests::ObjectKey {
            kind: crate::core::manifests::ObjectKind::VirtualMachine,
            namespace: "dev".into(),
            name: "steady".into(),
        }]);
        let p = preview(&now, &after, &CompileOptions::default(), "r.io/runner:1");
        let actions: Vec<_> = p.vms.iter().map(|v| (v.name.as_str(), v.action)).collect();
        assert_eq!(
            actions,
            [("new", PodFate::Create), ("steady", PodFate::Remove)],
            "the followed tag keeps its recorded digest: unchanged"
        );
        assert_eq!(p.unchanged, 3);
    }

    #[test]
    fn the_local_registry_coming_renames_what_pods_get() {
        let vm = "apiVersion: imagemap.dev/v1alpha1\nkind: VirtualMachine\nmetadata: {name: vm}\nspec: {liveReload: true, guest: {rootDisk: {image: 'localhost:5000/app:1'}}, runnerImage: r.io/runner:1}\nstatus:\n  podName: vm-1\n  resolvedImages:\n  - {slot: rootDisk, requested: 'localhost:5000/app:1', resolved: 'localhost:5000/app:1'}\n  - {slot: runner, requested: r.io/runner:1, resolved: r.io/runner:1}\n";
        let now = objects(vm);
        let mut after = objects(vm);
        after.overlay(objects(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local-registry-hosting, namespace: kube-public}\ndata:\n  localRegistryHosting.v1: |\n    host: localhost:5000\n    hostFromContainerRuntime: k3d-reg:5000\n",
        ));
        let p = preview(&now, &after, &CompileOptions::default(), "r.io/runner:1");
        assert_eq!(p.vms[0].action, PodFate::Recreate);
        assert_eq!(p.vms[0].slots[0].after.as_deref(), Ok("k3d-reg:5000/app:1"));
    }
}
