//! Which VMs a rule change affects, and the status of every mapping. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::{ImageMappingStatus, RuleSource, RuleStatus, VirtualMachine};
use crate::rules::{MappingKey, Mode, ProblemReason, RuleSet, Scope};
use crate::vm_images::{self, VmResolution};
use crate::vm_plan::{self, CONDITION_IMAGES_CURRENT, REASON_RESTART_REQUIRED};

/// A VM with the labels of its namespace.
pub struct VmView<'a> {
    pub vm: &'a VirtualMachine,
    pub namespace_labels: &'a BTreeMap<String, String>,
}

/// `namespace/name` of a VM.
pub fn vm_key(vm: &VirtualMachine) -> String {
    format!("{}/{}", vm.namespace().unwrap_or_default(), vm.name_any())
}

/// The VMs whose live resolution differs between two rule sets.
pub fn affected_vms<'a>(
    old: &RuleSet,
    new: &RuleSet,
    vms: impl IntoIterator<Item = VmView<'a>>,
    default_runner_image: &str,
) -> Vec<&'a VirtualMachine> {
    vms.into_iter()
        .filter(|v| {
            let before = vm_images::resolve_vm(
                old,
                v.vm,
                v.namespace_labels,
                default_runner_image,
                Mode::Live,
            );
            let after = vm_images::resolve_vm(
                new,
                v.vm,
                v.namespace_labels,
                default_runner_image,
                Mode::Live,
            );
            before != after
        })
        .map(|v| v.vm)
        .collect()
}

fn key_of(source: &RuleSource) -> MappingKey {
    MappingKey {
        scope: if source.kind == Scope::Cluster.kind() {
            Scope::Cluster
        } else {
            Scope::Namespaced
        },
        namespace: source.namespace.clone(),
        name: source.name.clone(),
    }
}

/// What a mapping's status is computed from.
pub struct MappingView<'a> {
    pub key: MappingKey,
    pub generation: Option<i64>,
    pub rule_count: usize,
    pub dry_run: bool,
    pub previous: Option<&'a ImageMappingStatus>,
}

/// The status of every mapping in `mappings`, given the rule sets and the VMs.
/// `preview` is the rule set with dry-run mappings taking part.
pub fn mapping_statuses<'a>(
    preview: &RuleSet,
    mappings: &[MappingView<'a>],
    vms: &[VmView<'_>],
    default_runner_image: &str,
    now: &Time,
) -> BTreeMap<MappingKey, ImageMappingStatus> {
    // Per mapping: rule index -> VMs; conflict messages; VMs awaiting restart.
    let mut affected: BTreeMap<MappingKey, BTreeMap<i32, BTreeSet<String>>> = BTreeMap::new();
    let mut conflicts: BTreeMap<MappingKey, BTreeSet<String>> = BTreeMap::new();
    let mut awaiting: BTreeMap<MappingKey, BTreeSet<String>> = BTreeMap::new();
    for v in vms {
        let res: VmResolution = vm_images::resolve_vm(
            preview,
            v.vm,
            v.namespace_labels,
            default_runner_image,
            Mode::Preview,
        );
        let name = vm_key(v.vm);
        let restart_required = v.vm.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == CONDITION_IMAGES_CURRENT && c.reason == REASON_RESTART_REQUIRED)
        });
        for (img, losers) in res.images.iter().zip(&res.conflicts) {
            let Some(src) = &img.source else { continue };
            let key = key_of(src);
            affected
                .entry(key.clone())
                .or_default()
                .entry(src.rule)
                .or_default()
                .insert(name.clone());
            if restart_required {
                awaiting
                    .entry(key.clone())
                    .or_default()
                    .insert(name.clone());
            }
            for loser in losers {
                let msg = format!(
                    "rule {} conflicts with {} rule {} for {} of VirtualMachine {name}",
                    src.rule,
                    key_of(loser),
                    loser.rule,
                    img.slot
                );
                conflicts.entry(key.clone()).or_default().insert(msg);
                let back = format!(
                    "rule {} conflicts with {} rule {} for {} of VirtualMachine {name} (that rule wins)",
                    loser.rule, key, src.rule, img.slot
                );
                conflicts.entry(key_of(loser)).or_default().insert(back);
            }
        }
    }
    let mut problems: BTreeMap<&MappingKey, Vec<(ProblemReason, String)>> = BTreeMap::new();
    for p in preview.problems() {
        problems
            .entry(&p.mapping)
            .or_default()
            .push((p.reason, format!("rule {}: {}", p.rule, p.message)));
    }
    let mut out = BTreeMap::new();
    for m in mappings {
        let per_rule = affected.remove(&m.key).unwrap_or_default();
        let mut own: Vec<(ProblemReason, String)> =
            problems.get(&m.key).cloned().unwrap_or_default();
        for c in conflicts.remove(&m.key).unwrap_or_default() {
            own.push((ProblemReason::Conflict, c));
        }
        own.sort();
        let all_vms: BTreeSet<&String> = per_rule.values().flatten().collect();
        let rules = (0..m.rule_count)
            .map(|i| {
                let index = i as i32;
                let problem = own
                    .iter()
                    .find(|(_, msg)| {
                        msg.starts_with(&format!("rule {i}:"))
                            || msg.starts_with(&format!("rule {i} "))
                    })
                    .map(|(_, msg)| msg.clone());
                RuleStatus {
                    index,
                    affected_vms: per_rule.get(&index).map_or(0, |s| s.len() as i32),
                    problem,
                }
            })
            .collect();
        let (status, reason, message) = match own.first() {
            Some((reason, _)) => (
                "False",
                reason.as_str(),
                own.iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            None if m.dry_run => (
                "True",
                "DryRun",
                format!(
                    "dry run: would decide images of {} VirtualMachines",
                    all_vms.len()
                ),
            ),
            None => ("True", "RulesValid", String::new()),
        };
        let previous = m
            .previous
            .map(|p| p.conditions.as_slice())
            .unwrap_or_default();
        let ready = vm_plan::condition(
            previous,
            "Ready",
            status,
            reason,
            message,
            m.generation,
            now,
        );
        out.insert(
            m.key.clone(),
            ImageMappingStatus {
                observed_generation: m.generation,
                conditions: vec![ready],
                rule_count: Some(m.rule_count as i32),
                affected_vms: Some(all_vms.len() as i32),
                rules,
                awaiting_restart: awaiting
                    .remove(&m.key)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MappingRule, RuleMatch, VirtualMachineSpec};
    use crate::rules::{CompileOptions, MappingInput};
    use k8s_openapi::jiff::Timestamp;

    fn mapping(name: &str, repo: &str, to: &str, dry_run: bool) -> MappingInput {
        MappingInput {
            scope: Scope::Namespaced,
            namespace: Some("dev".into()),
            name: name.into(),
            priority: 0,
            selector: None,
            namespace_selector: None,
            dry_run,
            rules: vec![MappingRule {
                match_: RuleMatch {
                    repository: Some(repo.into()),
                    ..Default::default()
                },
                to: Some(to.into()),
                ..Default::default()
            }],
        }
    }

    fn vm(name: &str, disk: &str) -> VirtualMachine {
        let spec: VirtualMachineSpec =
            serde_yaml_ng::from_str(&format!("guest: {{rootDisk: {{image: '{disk}'}}}}")).unwrap();
        let mut vm = VirtualMachine::new(name, spec);
        vm.metadata.namespace = Some("dev".into());
        vm
    }

    fn key(name: &str) -> MappingKey {
        MappingKey {
            scope: Scope::Namespaced,
            namespace: Some("dev".into()),
            name: name.into(),
        }
    }

    #[test]
    fn only_vms_whose_resolution_changes_are_affected() {
        let labels = BTreeMap::new();
        let old = RuleSet::compile(
            &[mapping("m", "disk-a", "x.io/a", false)],
            &CompileOptions::default(),
        );
        let new = RuleSet::compile(
            &[mapping("m", "disk-a", "y.io/a", false)],
            &CompileOptions::default(),
        );
        let (a, b) = (vm("a", "disk-a:1"), vm("b", "disk-b:1"));
        let views = [&a, &b].map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        });
        let hit = affected_vms(&old, &new, views, "runner");
        assert_eq!(hit.iter().map(|v| v.name_any()).collect::<Vec<_>>(), ["a"]);
        // A dry-run mapping affects no VM.
        let dry = RuleSet::compile(
            &[mapping("m", "disk-b", "y.io/b", true)],
            &CompileOptions::default(),
        );
        let views = [&a, &b].map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        });
        assert!(affected_vms(&RuleSet::default(), &dry, views, "runner").is_empty());
    }

    #[test]
    fn statuses_count_vms_and_report_conflicts_and_dry_runs() {
        let labels = BTreeMap::new();
        let inputs = [
            mapping("alpha", "disk-a", "x.io/a", false),
            mapping("beta", "disk-a", "y.io/a", false),
            mapping("preview", "disk-b", "z.io/b", true),
        ];
        let set = RuleSet::compile(&inputs, &CompileOptions::default());
        let (a, b) = (vm("a", "disk-a:1"), vm("b", "disk-b:1"));
        let views = [&a, &b].map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        });
        let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let mappings: Vec<MappingView> = ["alpha", "beta", "preview"]
            .into_iter()
            .map(|n| MappingView {
                key: key(n),
                generation: Some(2),
                rule_count: 1,
                dry_run: n == "preview",
                previous: None,
            })
            .collect();
        let out = mapping_statuses(&set, &mappings, &views, "runner", &now);
        let alpha = &out[&key("alpha")];
        assert_eq!(alpha.affected_vms, Some(1));
        assert_eq!(alpha.conditions[0].status, "False");
        assert_eq!(alpha.conditions[0].reason, "Conflict");
        assert!(
            alpha.conditions[0]
                .message
                .contains("rule 0 conflicts with ImageMapping dev/beta rule 0"),
            "{}",
            alpha.conditions[0].message
        );
        let beta = &out[&key("beta")];
        assert_eq!(beta.conditions[0].reason, "Conflict");
        assert_eq!(beta.affected_vms, Some(0));
        let preview = &out[&key("preview")];
        assert_eq!(preview.conditions[0].reason, "DryRun");
        assert_eq!(preview.affected_vms, Some(1));
        assert_eq!(preview.rules[0].affected_vms, 1);
        assert_eq!(preview.observed_generation, Some(2));
    }
}
