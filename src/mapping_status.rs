//! The status of every mapping: how many VMs each rule decides, which VMs wait for a
//! restart, and the problems of its rules. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::{
    ClusterImageMapping, FollowedTag, ImageMapping, ImageMappingStatus, RuleStatus, VirtualMachine,
};
use crate::conditions::{Conditions, KstatusRules, Status, kind, reason, with_kstatus};
use crate::excerpt::cut_bytes;
use crate::rules::{
    MappingKey, Mode, ProblemDetail, ProblemReason, RuleProblem, RuleRef, RuleSet, Scope,
};
use crate::vm_images::{Resolutions, VmView};

/// `namespace/name` of a VM.
#[must_use]
pub fn vm_key(vm: &VirtualMachine) -> String {
    format!("{}/{}", vm.namespace().unwrap_or_default(), vm.name_any())
}

/// What a mapping's status is computed from.
pub struct MappingView<'a> {
    pub key: MappingKey,
    pub generation: Option<i64>,
    pub rule_count: usize,
    pub dry_run: bool,
    pub previous: Option<&'a ImageMappingStatus>,
}

impl<'a> From<&'a ImageMapping> for MappingView<'a> {
    fn from(m: &'a ImageMapping) -> Self {
        MappingView {
            key: MappingKey {
                scope: Scope::Namespaced,
                namespace: m.namespace(),
                name: m.name_any(),
            },
            generation: m.metadata.generation,
            rule_count: m.spec.rules.len(),
            dry_run: m.spec.dry_run,
            previous: m.status.as_ref(),
        }
    }
}

impl<'a> From<&'a ClusterImageMapping> for MappingView<'a> {
    fn from(m: &'a ClusterImageMapping) -> Self {
        MappingView {
            key: MappingKey {
                scope: Scope::Cluster,
                namespace: None,
                name: m.name_any(),
            },
            generation: m.metadata.generation,
            rule_count: m.spec.rules.len(),
            dry_run: m.spec.dry_run,
            previous: m.status.as_ref(),
        }
    }
}

/// Every mapping's status, and how many rules are in conflict (for the metric).
#[derive(Debug, Default)]
pub struct MappingStatuses {
    pub statuses: BTreeMap<MappingKey, ImageMappingStatus>,
    pub rules_in_conflict: usize,
}

/// A tie between two rules seen on a VM: the first VM and slot (in name order) it was seen on.
type Ties = BTreeMap<(RuleRef, RuleRef), (String, String)>;

/// What the VMs show about each mapping: VMs per rule, VMs awaiting a restart, ties.
#[derive(Default)]
struct VmTally {
    affected: BTreeMap<MappingKey, BTreeMap<usize, BTreeSet<String>>>,
    awaiting: BTreeMap<MappingKey, BTreeSet<String>>,
    /// The references each rule's results follow by tag.
    followed: BTreeMap<MappingKey, BTreeMap<usize, BTreeSet<String>>>,
    /// `(winner, loser)` pairs.
    ties: Ties,
}

impl VmTally {
    /// Live mappings are counted from what the VMs run (dry-run rules never win there); a
    /// dry-run mapping from what its rules would decide, so that one that would outrank a
    /// live mapping does not take that mapping's VMs away from its count.
    fn count<'a>(
        set: &'a RuleSet,
        vms: &[VmView<'a>],
        awaiting_restart: &BTreeSet<String>,
        default_runner_image: &'a str,
        dry_runs: &BTreeSet<&MappingKey>,
    ) -> VmTally {
        let mut tally = VmTally::default();
        tally.add(
            set,
            vms,
            default_runner_image,
            Mode::Live,
            |_| true,
            awaiting_restart,
        );
        if !dry_runs.is_empty() {
            // (A dry run changes no pod: no VM waits for a restart because of it.)
            let dry = |rule: &RuleRef| dry_runs.contains(&rule.mapping);
            tally.add(
                set,
                vms,
                default_runner_image,
                Mode::Preview,
                dry,
                &BTreeSet::new(),
            );
        }
        tally
    }

    /// Counts, for the rules that `counts` picks, what they decide in `mode`.
    fn add<'a>(
        &mut self,
        set: &'a RuleSet,
        vms: &[VmView<'a>],
        default_runner_image: &'a str,
        mode: Mode,
        counts: impl Fn(&RuleRef) -> bool,
        awaiting_restart: &BTreeSet<String>,
    ) {
        let mut resolutions = Resolutions::new(set, default_runner_image, mode);
        for v in vms {
            let res = resolutions.of(*v);
            let name = vm_key(v.vm);
            let awaiting = awaiting_restart.contains(&name);
            for slot in &res.slots {
                let Some(rule) = slot.rule.as_ref().filter(|r| counts(r)) else {
                    continue;
                };
                self.affected
                    .entry(rule.mapping.clone())
                    .or_default()
                    .entry(rule.index)
                    .or_default()
                    .insert(name.clone());
                if let (true, Ok(reference)) = (slot.follow_tag, &slot.outcome) {
                    self.followed
                        .entry(rule.mapping.clone())
                        .or_default()
                        .entry(rule.index)
                        .or_default()
                        .insert(reference.clone());
                }
                if awaiting {
                    self.awaiting
                        .entry(rule.mapping.clone())
                        .or_default()
                        .insert(name.clone());
                }
                for loser in &slot.conflicts {
                    let seen = (name.clone(), slot.slot.clone());
                    self.ties
                        .entry((rule.clone(), loser.clone()))
                        .and_modify(|first| *first = first.clone().min(seen.clone()))
                        .or_insert(seen);
                }
            }
        }
    }
}

/// The problems of every mapping: the engine's, plus the ties seen on VMs that the engine
/// did not already report as the same pair of rules. Each in report order.
fn problems_by_mapping(preview: &RuleSet, ties: Ties) -> BTreeMap<MappingKey, Vec<RuleProblem>> {
    let mut out: BTreeMap<MappingKey, Vec<RuleProblem>> = BTreeMap::new();
    let mut known: BTreeSet<(MappingKey, usize, RuleRef)> = BTreeSet::new();
    for p in preview.problems() {
        if let (Some(rule), Some(other)) = (p.rule, p.detail.conflicting_rule()) {
            known.insert((p.mapping.clone(), rule, other.clone()));
        }
        out.entry(p.mapping.clone()).or_default().push(p.clone());
    }
    for ((winner, loser), (vm, slot)) in ties {
        for (this, other, this_wins) in [(&winner, &loser, true), (&loser, &winner, false)] {
            if !known.insert((this.mapping.clone(), this.index, other.clone())) {
                continue;
            }
            out.entry(this.mapping.clone())
                .or_default()
                .push(RuleProblem {
                    mapping: this.mapping.clone(),
                    rule: Some(this.index),
                    detail: ProblemDetail::TiedOnVm {
                        other: other.clone(),
                        this_wins,
                        vm: vm.clone(),
                        slot: slot.clone(),
                    },
                });
        }
    }
    for problems in out.values_mut() {
        problems.sort_by(|a, b| a.report_order().cmp(&b.report_order()));
    }
    out
}

/// A mapping is stalled while one of its rules is not usable as written.
const MAPPING_KSTATUS: KstatusRules<'static> = KstatusRules {
    stalled: &[
        (kind::READY, reason::INVALID_RULE),
        (kind::READY, reason::CONFLICT),
        (kind::READY, reason::DISALLOWED_TARGET),
        (kind::READY, reason::ALLOWED_REGISTRIES_REQUIRED),
    ],
    reconciling: &[],
};

/// The most VMs `awaitingRestart` lists (the count says how many there are).
pub const LISTED_AWAITING: usize = 100;

/// Most bytes of a rule's `problem`.
const PROBLEM_LIMIT: usize = 1024;

/// The most problems a mapping's `Ready` message names; the others are counted (each rule's
/// own problem is in `status.rules[]`).
pub const NAMED_PROBLEMS: usize = 8;

/// The `Ready` message of a mapping with `problems` (in report order).
fn problems_message(problems: &[RuleProblem]) -> String {
    let mut message = problems
        .iter()
        .take(NAMED_PROBLEMS)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > NAMED_PROBLEMS {
        let _ = write!(message, "; and {} more", problems.len() - NAMED_PROBLEMS);
    }
    message
}

/// The most followed tags a rule's status lists.
const FOLLOWED_TAGS_SHOWN: usize = 8;

/// The status of every mapping in `mappings`, given the rule set with dry-run mappings
/// taking part (`preview`), the VMs, and which of them (`namespace/name`) wait for a restart
/// (see [`crate::vm_plan::awaits_restart`]).
#[must_use]
pub fn mapping_statuses<'a>(
    preview: &'a RuleSet,
    mappings: &[MappingView<'_>],
    vms: &[VmView<'a>],
    awaiting_restart: &BTreeSet<String>,
    default_runner_image: &'a str,
    digest_of: &dyn Fn(&MappingKey, &str) -> Option<String>,
    now: &Time,
) -> MappingStatuses {
    let dry_runs: BTreeSet<&MappingKey> = mappings
        .iter()
        .filter(|m| m.dry_run)
        .map(|m| &m.key)
        .collect();
    let mut tally = VmTally::count(
        preview,
        vms,
        awaiting_restart,
        default_runner_image,
        &dry_runs,
    );
    let mut problems = problems_by_mapping(preview, std::mem::take(&mut tally.ties));
    let mut out = MappingStatuses::default();
    for m in mappings {
        let per_rule = tally.affected.remove(&m.key).unwrap_or_default();
        let followed = tally.followed.remove(&m.key).unwrap_or_default();
        let own = problems.remove(&m.key).unwrap_or_default();
        let all_vms: BTreeSet<&String> = per_rule.values().flatten().collect();
        let rules: Vec<RuleStatus> = (0..m.rule_count)
            .map(|i| RuleStatus {
                index: i32::try_from(i).unwrap_or(i32::MAX),
                affected_vms: per_rule
                    .get(&i)
                    .map_or(0, |s| i32::try_from(s.len()).unwrap_or(i32::MAX)),
                problem: RuleProblem::for_rule(&own, i)
                    .map(|p| cut_bytes(&p.to_string(), PROBLEM_LIMIT)),
                followed_tags: followed
                    .get(&i)
                    .into_iter()
                    .flatten()
                    .take(FOLLOWED_TAGS_SHOWN)
                    .map(|reference| FollowedTag {
                        digest: digest_of(&m.key, reference),
                        reference: reference.clone(),
                    })
                    .collect(),
            })
            .collect();
        let in_conflict: BTreeSet<usize> = own
            .iter()
            .filter(|p| p.reason() == ProblemReason::Conflict)
            .filter_map(|p| p.rule)
            .collect();
        out.rules_in_conflict += in_conflict.len();
        let (status, why, message) = match own.first() {
            Some(first) => (
                Status::False,
                first.reason().as_str(),
                problems_message(&own),
            ),
            None if m.dry_run => (
                Status::True,
                reason::DRY_RUN,
                format!(
                    "dry run: would decide images of {} VirtualMachines",
                    all_vms.len()
                ),
            ),
            None => (Status::True, reason::RULES_VALID, String::new()),
        };
        let previous = m
            .previous
            .map(|p| p.conditions.as_slice())
            .unwrap_or_default();
        let build = Conditions::new(previous, m.generation, now);
        let awaiting = tally.awaiting.remove(&m.key).unwrap_or_default();
        let conditions = with_kstatus(
            &build,
            vec![build.build(kind::READY, status, why, message)],
            &MAPPING_KSTATUS,
        );
        out.statuses.insert(
            m.key.clone(),
            ImageMappingStatus {
                observed_generation: m.generation,
                conditions,
                rule_count: Some(i32::try_from(m.rule_count).unwrap_or(i32::MAX)),
                affected_vms: Some(i32::try_from(all_vms.len()).unwrap_or(i32::MAX)),
                rules,
                awaiting_restart_count: Some(i32::try_from(awaiting.len()).unwrap_or(i32::MAX))
                    .filter(|&n| n > 0),
                awaiting_restart: awaiting.into_iter().take(LISTED_AWAITING).collect(),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{mapping_key as key, repository_mapping as mapping, vm_with_disk as vm};
    use crate::rules::CompileOptions;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_dry_run_that_would_outrank_a_live_mapping_leaves_the_live_count_alone() {
        let labels = BTreeMap::new();
        let mut preview = mapping("preview", "disk-a", "z.io/a", true);
        preview.priority = 10;
        let inputs = [mapping("live", "disk-a", "x.io/a", false), preview];
        let set = RuleSet::compile(&inputs, &CompileOptions::default());
        let a = vm("a", "disk-a:1");
        let views = [VmView {
            vm: &a,
            namespace_labels: &labels,
        }];
        let mappings: Vec<MappingView> = ["live", "preview"]
            .into_iter()
            .map(|n| MappingView {
                key: key(n),
                generation: Some(1),
                rule_count: 1,
                dry_run: n == "preview",
                previous: None,
            })
            .collect();
        let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let out = mapping_statuses(
            &set,
            &mappings,
            &views,
            &BTreeSet::new(),
            "runner:1",
            &|_, _| None,
            &now,
        )
        .statuses;
        // The live mapping decides the VM's image; the dry run would.
        assert_eq!(out[&key("live")].affected_vms, Some(1));
        assert_eq!(out[&key("live")].rules[0].affected_vms, 1);
        assert_eq!(out[&key("preview")].affected_vms, Some(1));
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
        let out = mapping_statuses(
            &set,
            &mappings,
            &views,
            &BTreeSet::new(),
            "runner",
            &|_, _| None,
            &now,
        )
        .statuses;
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
        // kstatus: stalled until the rules change.
        let stalled = &alpha.conditions[1];
        assert_eq!(
            (
                stalled.type_.as_str(),
                stalled.status.as_str(),
                stalled.reason.as_str()
            ),
            ("Stalled", "True", "Conflict")
        );
        let beta = &out[&key("beta")];
        assert_eq!(beta.conditions[0].reason, "Conflict");
        assert_eq!(beta.affected_vms, Some(0));
        let preview = &out[&key("preview")];
        assert_eq!(preview.conditions[0].reason, "DryRun");
        assert_eq!(preview.conditions.len(), 1, "a dry run is not stalled");
        assert_eq!(preview.affected_vms, Some(1));
        assert_eq!(preview.rules[0].affected_vms, 1);
        assert_eq!(preview.observed_generation, Some(2));
    }

    #[test]
    fn a_conflict_is_reported_once_per_rule() {
        let labels = BTreeMap::new();
        // Two rules with the same match in one mapping: a static conflict, which a VM then
        // also hits.
        let mut twice = mapping("twice", "disk-a", "x.io/a", false);
        let mut second = twice.rules[0].clone();
        second.to = Some("y.io/a".into());
        twice.rules.push(second);
        let set = RuleSet::compile(&[twice], &CompileOptions::default());
        let a = vm("a", "disk-a:1");
        let views = [VmView {
            vm: &a,
            namespace_labels: &labels,
        }];
        let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let mappings = [MappingView {
            key: key("twice"),
            generation: Some(1),
            rule_count: 2,
            dry_run: false,
            previous: None,
        }];
        let out = mapping_statuses(
            &set,
            &mappings,
            &views,
            &BTreeSet::new(),
            "runner",
            &|_, _| None,
            &now,
        );
        let status = &out.statuses[&key("twice")];
        let message = &status.conditions[0].message;
        assert_eq!(
            message,
            "rule 0 conflicts with ImageMapping dev/twice rule 1: same match and priority, different result; \
             rule 1 conflicts with ImageMapping dev/twice rule 0: same match and priority, different result"
        );
        assert_eq!(out.rules_in_conflict, 2);
        assert_eq!(
            status.rules[1].problem.as_deref(),
            Some(
                "rule 1 conflicts with ImageMapping dev/twice rule 0: same match and priority, different result"
            )
        );
    }

    #[test]
    fn ties_seen_on_vms_name_the_first_vm_and_vms_awaiting_restart_are_listed() {
        let labels = BTreeMap::new();
        // Different selectors: no static conflict, but both select the VMs.
        let mut alpha = mapping("alpha", "disk-a", "x.io/a", false);
        let mut beta = mapping("beta", "disk-a", "y.io/a", false);
        alpha.selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("app".to_string(), "db".to_string())].into()),
                ..Default::default()
            },
        );
        beta.selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: "app".into(),
                        operator: "Exists".into(),
                        values: None,
                    },
                ]),
                ..Default::default()
            },
        );
        let set = RuleSet::compile(&[alpha, beta], &CompileOptions::default());
        assert!(set.problems().is_empty());
        let vms: Vec<VirtualMachine> = ["b", "a"]
            .into_iter()
            .map(|n| {
                let mut v = vm(n, "disk-a:1");
                v.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
                v
            })
            .collect();
        let views: Vec<VmView> = vms
            .iter()
            .map(|vm| VmView {
                vm,
                namespace_labels: &labels,
            })
            .collect();
        let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let mappings: Vec<MappingView> = ["alpha", "beta"]
            .into_iter()
            .map(|n| MappingView {
                key: key(n),
                generation: Some(1),
                rule_count: 1,
                dry_run: false,
                previous: None,
            })
            .collect();
        let awaiting = BTreeSet::from(["dev/b".to_string()]);
        let out = mapping_statuses(
            &set,
            &mappings,
            &views,
            &awaiting,
            "runner",
            &|_, _| None,
            &now,
        );
        let alpha = &out.statuses[&key("alpha")];
        assert_eq!(
            alpha.conditions[0].message,
            "rule 0 conflicts with ImageMapping dev/beta rule 0 for rootDisk of VirtualMachine dev/a"
        );
        assert_eq!(alpha.awaiting_restart, ["dev/b"]);
        assert_eq!(
            out.statuses[&key("beta")].conditions[0].message,
            "rule 0 conflicts with ImageMapping dev/alpha rule 0 for rootDisk of VirtualMachine dev/a (that rule wins)"
        );
    }

    #[test]
    fn the_list_of_vms_awaiting_a_restart_is_capped_and_counted() {
        let labels = BTreeMap::new();
        let set = RuleSet::compile(
            &[mapping("m", "disk-a", "x.io/a", false)],
            &CompileOptions::default(),
        );
        let vms: Vec<VirtualMachine> = (0..250)
            .map(|i| vm(&format!("vm-{i:03}"), "disk-a:1"))
            .collect();
        let views: Vec<VmView> = vms
            .iter()
            .map(|vm| VmView {
                vm,
                namespace_labels: &labels,
            })
            .collect();
        let awaiting: BTreeSet<String> = (0..250).map(|i| format!("dev/vm-{i:03}")).collect();
        let mappings = [MappingView {
            key: key("m"),
            generation: Some(1),
            rule_count: 1,
            dry_run: false,
            previous: None,
        }];
        let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let out = mapping_statuses(
            &set,
            &mappings,
            &views,
            &awaiting,
            "runner",
            &|_, _| None,
            &now,
        );
        let status = &out.statuses[&key("m")];
        assert_eq!(status.awaiting_restart.len(), LISTED_AWAITING);
        assert_eq!(status.awaiting_restart[0], "dev/vm-000");
        assert_eq!(status.awaiting_restart_count, Some(250));
        assert_eq!(status.affected_vms, Some(250));
    }
}
