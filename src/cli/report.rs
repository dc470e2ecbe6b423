//! What `imagemap resolve` found in files: each `--image` request and each VM slot with its
//! result, rule and conflicts, the rule problems — and how it is printed (a table or JSON).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use kube::ResourceExt;
use serde_json::{Value, json};

use super::follow_tags::Digests;
use super::resolve_args::ResolveArgs;
use super::table;
use crate::core::admission::pod_view::Admission;
use crate::core::manifests::Manifests;
use crate::core::reference::Reference;
use crate::core::rules::{MappingKey, Mode, Requester, RuleProblem, RuleRef};
use crate::core::slot_resolution;
use crate::core::slot_resolution::SlotResolution;
use crate::core::vm_images::{self, VmResolution};
use crate::registry::RegistryError;

/// The kind of imagemap's VirtualMachines among the entries.
const VM: &str = "VirtualMachine";
/// The kind of NeonVM's VirtualMachines among the entries.
const NEONVM: &str = "VirtualMachine.vm.neon.tech";

/// The groups of entries, each a table and a JSON list: imagemap's VMs, NeonVM's, and the
/// workloads (every other kind).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Vms,
    NeonVms,
    Workloads,
}

impl Group {
    fn of(kind: &str) -> Group {
        match kind {
            VM => Group::Vms,
            NEONVM => Group::NeonVms,
            _ => Group::Workloads,
        }
    }
}

pub(super) struct ImageEntry {
    input: String,
    parsed: Result<Reference, String>,
    resolved: Option<Result<Reference, String>>,
    rule: Option<RuleRef>,
    conflicts: Vec<RuleRef>,
    more_conflicts: usize,
    follow_tag: bool,
    /// With --follow-tags: the registry's answer for a followed result.
    digest: Option<Result<String, RegistryError>>,
}

/// A VM, or a pod or workload's pod template, and what its slots resolve to.
pub(super) struct VmEntry {
    /// `VirtualMachine`, `VirtualMachine.vm.neon.tech`, `Pod`, `Deployment`, …
    kind: &'static str,
    namespace: String,
    name: String,
    resolution: VmResolution,
}

pub(super) struct Report {
    images: Vec<ImageEntry>,
    vms: Vec<VmEntry>,
    problems: Vec<RuleProblem>,
}

impl Report {
    /// The distinct references followed by tag.
    pub(super) fn followed(&self) -> BTreeSet<String> {
        let images = self.images.iter().filter(|i| i.follow_tag).filter_map(|i| {
            i.resolved
                .as_ref()
                .and_then(|r| r.as_ref().ok())
                .map(ToString::to_string)
        });
        let slots = self
            .vms
            .iter()
            .flat_map(|v| v.resolution.followed().map(str::to_string));
        images.chain(slots).collect()
    }

    /// Pins followed results to the digests the registries gave.
    pub(super) fn pin(&mut self, digests: &Digests) {
        for i in &mut self.images {
            if let (true, Some(Ok(r))) = (i.follow_tag, &i.resolved) {
                i.digest = digests.get(r.as_str()).cloned();
            }
        }
        for v in &mut self.vms {
            v.resolution.pin(
                |r, _| match digests.get(r) {
                    Some(Ok(d)) => (Some(d.clone()), None),
                    Some(Err(e)) => (None, Some(e.to_string())),
                    None => (None, None),
                },
                &[],
            );
        }
    }

    pub(super) fn build(manifests: &Manifests, args: &ResolveArgs) -> Report {
        let set = crate::core::vm_preview::compile(manifests, &args.compile_options());
        let problems = set.problems().to_vec();
        let ns_labels = |ns: &str| {
            slot_resolution::namespace_labels(
                ns,
                manifests.namespaces.get(ns).unwrap_or(&BTreeMap::new()),
            )
        };
        let admission = Admission::without_digests(&set, &ns_labels);
        let unlabelled = BTreeMap::new();
        let namespace = args.namespace.as_deref().unwrap_or("default");
        let request_ns_labels = ns_labels(namespace);
        let who = Requester {
            namespace,
            labels: &unlabelled,
            namespace_labels: &request_ns_labels,
            namespace_rules: true,
        };
        let images = args
            .images
            .iter()
            .map(|input| {
                let parsed = Reference::parse_normalized(input).map_err(|e| e.to_string());
                let mut entry = ImageEntry {
                    input: input.clone(),
                    parsed: parsed.clone(),
                    resolved: None,
                    rule: None,
                    conflicts: Vec::new(),
                    more_conflicts: 0,
                    follow_tag: false,
                    digest: None,
                };
                if let Ok(r) = &parsed {
                    let res = set.resolve(r, &who, Mode::Live);
                    entry.rule = res.rule.map(|id| set.rule_ref(id));
                    entry.conflicts = res.conflicts.iter().map(|&id| set.rule_ref(id)).collect();
                    entry.more_conflicts = res.more_conflicts;
                    entry.follow_tag = res.follow_tag && res.resolved.is_ok();
                    entry.resolved = Some(res.resolved.map_err(|e| e.to_string()));
                }
                entry
            })
            .collect();
        let vms = manifests
            .virtual_machines
            .iter()
            .map(|vm| {
                let namespace = vm.namespace().unwrap_or_default();
                let resolution = vm_images::resolve_vm(
                    &set,
                    vm,
                    &ns_labels(&namespace),
                    &args.default_runner_image,
                    Mode::Live,
                );
                VmEntry {
                    kind: VM,
                    namespace,
                    name: vm.name_any(),
                    resolution,
                }
            })
            .chain(manifests.pod_templates.iter().map(|t| {
                // As admission maps the pods they make.
                let asked = t.images.iter().map(|(s, i)| (s.as_str(), i.as_str()));
                let slots = admission
                    .slots(&t.namespace, &t.labels, asked)
                    .into_iter()
                    .map(|outcome| outcome.resolution)
                    .collect();
                VmEntry {
                    kind: t.kind.name(),
                    namespace: t.namespace.clone(),
                    name: t.name.clone(),
                    resolution: VmResolution { slots },
                }
            }))
            .chain(manifests.neonvm_vms.iter().map(|vm| {
                // As admission maps the runner pod NeonVM makes for it.
                let slots = vm.slots(args.neonvm_default_runner_image.as_deref());
                let asked = slots
                    .iter()
                    .map(|s| (s.slot.as_str(), s.requested.as_str()));
                let slots = admission
                    .slots(&vm.namespace, &vm.labels, asked)
                    .into_iter()
                    .map(|outcome| outcome.resolution)
                    .collect();
                VmEntry {
                    kind: NEONVM,
                    namespace: vm.namespace.clone(),
                    name: vm.name.clone(),
                    resolution: VmResolution { slots },
                }
            }))
            .collect();
        Report {
            images,
            vms,
            problems,
        }
    }

    pub(super) fn has_problems(&self) -> bool {
        !self.problems.is_empty()
            || self.images.iter().any(|i| {
                i.parsed.is_err() || matches!(i.resolved, Some(Err(_))) || !i.conflicts.is_empty()
            })
            || self
                .vms
                .iter()
                .any(|v| !v.resolution.all_resolved() || v.resolution.has_conflicts())
    }

    /// Each problem once: a conflict between two rules is one line, however many mappings,
    /// images and VMs show it.
    pub(super) fn problem_lines(&self) -> Vec<String> {
        // Rule pairs (mapping, index) already reported, in both orders.
        type At<'a> = (&'a MappingKey, usize);
        let mut pairs: BTreeSet<(At, At)> = BTreeSet::new();
        let mut lines = Vec::new();
        for p in &self.problems {
            if let (Some(index), Some(other)) = (p.rule, p.detail.conflicting_rule()) {
                let (this, other) = ((&p.mapping, index), (&other.mapping, other.index));
                if !pairs.insert((this, other)) {
                    continue;
                }
                pairs.insert((other, this));
            }
            lines.push(problem_line(p));
        }
        let known = |winner: Option<&RuleRef>, loser: &RuleRef| {
            winner.is_some_and(|w| {
                pairs.contains(&((&w.mapping, w.index), (&loser.mapping, loser.index)))
            })
        };
        for i in &self.images {
            for c in i.conflicts.iter().filter(|c| !known(i.rule.as_ref(), c)) {
                lines.push(format!(
                    "image {:?}: Conflict: {} also matches with a different result",
                    i.input,
                    describe(c)
                ));
            }
            if i.more_conflicts > 0 {
                lines.push(format!(
                    "image {:?}: Conflict: {} more rules also match with a different result",
                    i.input, i.more_conflicts
                ));
            }
        }
        for v in &self.vms {
            for slot in &v.resolution.slots {
                for c in slot
                    .conflicts
                    .iter()
                    .filter(|c| !known(slot.rule.as_ref(), c))
                {
                    lines.push(format!(
                        "{} {}/{} slot {}: Conflict: {} also matches with a different result",
                        v.kind,
                        v.namespace,
                        v.name,
                        slot.slot,
                        describe(c)
                    ));
                }
            }
        }
        lines
    }

    pub(super) fn to_json(&self) -> Value {
        let images: Vec<Value> = self.images.iter().map(image_json).collect();
        let entries = |group: Group| -> Vec<Value> {
            self.vms
                .iter()
                .filter(|v| Group::of(v.kind) == group)
                .map(|v| {
                    let images: Vec<Value> = v.resolution.slots.iter().map(slot_json).collect();
                    let mut entry =
                        json!({"namespace": v.namespace, "name": v.name, "images": images});
                    if group == Group::Workloads {
                        entry["kind"] = json!(v.kind);
                    }
                    entry
                })
                .collect()
        };
        let problems: Vec<Value> = self.problems.iter().map(problem_json).collect();
        json!({
            "images": images,
            "virtualMachines": entries(Group::Vms),
            "neonvmVirtualMachines": entries(Group::NeonVms),
            "workloads": entries(Group::Workloads),
            "problems": problems,
        })
    }

    pub(super) fn to_table(&self) -> String {
        let mut out = String::new();
        if !self.images.is_empty() {
            let mut rows = vec![["IMAGE".to_string(), "RESOLVED".into(), "RULE".into()]];
            for i in &self.images {
                let resolved = match (&i.parsed, &i.resolved) {
                    (Err(e), _) | (_, Some(Err(e))) => format!("error: {e}"),
                    (_, Some(Ok(r))) => followed(
                        r.as_str(),
                        i.follow_tag,
                        i.digest.as_ref().and_then(|d| d.as_ref().ok()),
                    ),
                    (Ok(_), None) => String::new(),
                };
                rows.push([
                    i.input.clone(),
                    resolved,
                    rule_cell(i.rule.as_ref(), i.conflicts.len() + i.more_conflicts),
                ]);
            }
            out.push_str(&table::render(&rows));
        }
        for group in [Group::Vms, Group::NeonVms, Group::Workloads] {
            let entries: Vec<&VmEntry> = self
                .vms
                .iter()
                .filter(|v| Group::of(v.kind) == group)
                .collect();
            if entries.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push('\n');
            }
            let (what, slot) = match group {
                Group::Vms => ("VIRTUALMACHINE", "SLOT"),
                Group::NeonVms => ("NEONVM VIRTUALMACHINE", "SLOT"),
                Group::Workloads => ("WORKLOAD", "CONTAINER"),
            };
            let mut rows = vec![[
                what.to_string(),
                slot.into(),
                "REQUESTED".into(),
                "RESOLVED".into(),
                "RULE".into(),
            ]];
            for v in entries {
                let named = if group == Group::Workloads {
                    format!("{} {}/{}", v.kind, v.namespace, v.name)
                } else {
                    format!("{}/{}", v.namespace, v.name)
                };
                for slot in &v.resolution.slots {
                    let resolved = match &slot.outcome {
                        Ok(r) => followed(r, slot.follow_tag, slot.digest.as_ref()),
                        Err(e) => format!("error: {e}"),
                    };
                    rows.push([
                        named.clone(),
                        slot.slot.clone(),
                        slot.requested.clone(),
                        resolved,
                        rule_cell(
                            slot.rule.as_ref(),
                            slot.conflicts.len() + slot.more_conflicts,
                        ),
                    ]);
                }
            }
            out.push_str(&table::render(&rows));
        }
        if out.is_empty() {
            out.push_str("nothing to resolve: pass --image REF or -f with VirtualMachines (imagemap's or NeonVM's), Pods or workloads\n");
        }
        out
    }
}

/// A resolved image as the table shows it: a followed tag says so, pinned when
/// --follow-tags asked its registry.
fn followed(resolved: &str, follow_tag: bool, digest: Option<&String>) -> String {
    match (follow_tag, digest) {
        (true, Some(d)) => format!("{resolved}@{d} (follows tag)"),
        (true, None) => format!("{resolved} (follows tag)"),
        (false, _) => resolved.to_string(),
    }
}

/// A rule problem as one line: the mapping, the rule, the reason and what is wrong.
pub(super) fn problem_line(p: &RuleProblem) -> String {
    let rule = p.rule.map(|r| format!(" rule {r}")).unwrap_or_default();
    format!("{}{rule}: {}: {}", p.mapping, p.reason().as_str(), p.detail)
}

pub(super) fn problem_json(p: &RuleProblem) -> Value {
    json!({
        "mapping": p.mapping.to_string(),
        "rule": p.rule,
        "reason": p.reason().as_str(),
        "message": p.detail.to_string(),
    })
}

pub(super) fn describe(r: &RuleRef) -> String {
    format!("{r} ({})", r.kind.as_str())
}

fn rule_cell(rule: Option<&RuleRef>, conflicts: usize) -> String {
    let mut cell = rule.map_or_else(|| "-".to_string(), describe);
    if conflicts > 0 {
        let _ = write!(cell, " [conflicts with {conflicts}]");
    }
    cell
}

pub(super) fn source_json(r: &RuleRef) -> Value {
    let s = r.source();
    json!({"kind": s.kind, "namespace": s.namespace, "name": s.name, "rule": s.rule, "match": s.match_kind})
}

fn image_json(i: &ImageEntry) -> Value {
    let r = match &i.parsed {
        Ok(r) => r,
        Err(e) => {
            return json!({
                "input": i.input, "normalized": null, "familiar": null, "registry": null,
                "repository": null, "tag": null, "digest": null, "resolved": null,
                "rule": null, "conflicts": null, "error": e,
            });
        }
    };
    let (resolved, error) = match &i.resolved {
        Some(Ok(out)) => (Some(out.to_string()), None),
        Some(Err(e)) => (None, Some(e.clone())),
        None => (None, None),
    };
    json!({
        "input": i.input,
        "normalized": r.as_str(),
        "familiar": r.familiar(),
        "registry": non_empty(r.domain()),
        "repository": r.path(),
        "tag": r.tag(),
        "digest": r.digest(),
        "resolved": resolved,
        "rule": i.rule.as_ref().map(source_json),
        "conflicts": i.conflicts.iter().map(source_json).collect::<Vec<_>>(),
        "moreConflicts": i.more_conflicts,
        "followTag": i.follow_tag,
        "resolvedDigest": i.digest.as_ref().and_then(|d| d.as_ref().ok()),
        "digestError": i.digest.as_ref().and_then(|d| d.as_ref().err()).map(ToString::to_string),
        "error": error,
    })
}

fn slot_json(slot: &SlotResolution) -> Value {
    json!({
        "slot": slot.slot,
        "requested": slot.requested,
        "resolved": slot.outcome.as_ref().ok(),
        "source": slot.rule.as_ref().map(source_json),
        "conflicts": slot.conflicts.iter().map(source_json).collect::<Vec<_>>(),
        "moreConflicts": slot.more_conflicts,
        "followTag": slot.follow_tag,
        "digest": slot.digest,
        "digestError": slot.digest_error,
        "error": slot.outcome.as_ref().err().map(ToString::to_string),
    })
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}
