//! The status of every mapping: how many VMs each rule decides, which VMs wait for a
//! restart, and the problems of its rules. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::core::api::{
    ClusterImageMapping, FollowedTag, ImageMapping, ImageMappingStatus, RuleStatus,
};
use crate::core::conditions::{Conditions, KstatusRules, Status, kind, reason, with_kstatus};
use crate::core::excerpt::cut_bytes;
use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::{
    MappingKey, MappingScope, ProblemDetail, ProblemReason, RuleProblem, RuleRef, RuleSet,
};
use crate::core::vm_images::VmView;

mod pod_tally;
mod vm_tally;
pub use pod_tally::{NamespacePods, PassScope, PodTally, ReloadCount};
pub use vm_tally::{Ties, VmCount, VmTally};

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
                scope: MappingScope::Namespaced,
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
                scope: MappingScope::Cluster,
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
                        vm: Box::new(vm.clone()),
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
/// Most workloads a status lists as rolling.
pub const LISTED_ROLLING: usize = 10;

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
/// (see [`crate::core::vm_plan::awaits_restart`]): a full count, see [`statuses`].
#[must_use]
pub fn mapping_statuses<'a>(
    preview: &'a RuleSet,
    mappings: &[MappingView<'_>],
    vms: &[VmView<'a>],
    awaiting_restart: &BTreeSet<NamespacedName>,
    default_runner_image: &'a str,
    digest_of: &dyn Fn(&MappingKey, &str) -> Option<String>,
    now: &Time,
) -> MappingStatuses {
    let tally = VmTally::count(
        preview,
        vms,
        awaiting_restart,
        default_runner_image,
        &dry_runs(mappings),
    );
    statuses(
        preview,
        mappings,
        &tally,
        &PodTally::default(),
        digest_of,
        now,
    )
}

/// The mappings of `mappings` that are dry runs.
#[must_use]
pub fn dry_runs<'m>(mappings: &'m [MappingView<'_>]) -> BTreeSet<&'m MappingKey> {
    mappings
        .iter()
        .filter(|m| m.dry_run)
        .map(|m| &m.key)
        .collect()
}

/// The status of every mapping in `mappings`, given the rule set with dry-run mappings
/// taking part (`preview`) and what the VMs show (`tally`, counted under `preview`).
#[must_use]
pub fn statuses(
    preview: &RuleSet,
    mappings: &[MappingView<'_>],
    tally: &VmTally,
    pods: &PodTally,
    digest_of: &dyn Fn(&MappingKey, &str) -> Option<String>,
    now: &Time,
) -> MappingStatuses {
    let mut problems = problems_by_mapping(preview, tally.ties());
    let mut out = MappingStatuses::default();
    for m in mappings {
        let own = problems.remove(&m.key).unwrap_or_default();
        let all_vms = tally.vms_of(&m.key);
        let counted = PodsCounted::of(pods, m);
        let rules: Vec<RuleStatus> = (0..m.rule_count)
            .map(|i| RuleStatus {
                index: i32::try_from(i).unwrap_or(i32::MAX),
                affected_vms: i32::try_from(tally.vms_of_rule(&m.key, i)).unwrap_or(i32::MAX),
                affected_pods: counted.rules.get(i).copied().unwrap_or(0),
                problem: RuleProblem::for_rule(&own, i)
                    .map(|p| cut_bytes(&p.to_string(), PROBLEM_LIMIT)),
                followed_tags: tally
                    .followed(&m.key, i)
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
                format!("dry run: would decide images of {all_vms} VirtualMachines"),
            ),
            None => (Status::True, reason::RULES_VALID, String::new()),
        };
        let previous = m
            .previous
            .map(|p| p.conditions.as_slice())
            .unwrap_or_default();
        let build = Conditions::new(previous, m.generation, now);
        let awaiting = tally.awaiting(&m.key);
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
                affected_vms: Some(i32::try_from(all_vms).unwrap_or(i32::MAX)),
                rules,
                awaiting_restart_count: Some(i32::try_from(awaiting.len()).unwrap_or(i32::MAX))
                    .filter(|&n| n > 0),
                awaiting_restart: awaiting
                    .iter()
                    .take(LISTED_AWAITING)
                    .map(ToString::to_string)
                    .collect(),
                affected_pods: counted.affected,
                unmapped_pods: counted.unmapped,
                pods_counted_at: counted.at,
                pods_awaiting_roll: Some(pods.waiting(&m.key)).filter(|&n| n > 0).map(count),
                rolling_workloads_count: Some(pods.rolling(&m.key).len())
                    .filter(|&n| n > 0)
                    .map(count),
                rolling_workloads: pods.rolling(&m.key).take(LISTED_ROLLING).cloned().collect(),
            },
        );
    }
    out
}

/// The pods' counts a mapping's status shows, and when they were counted.
#[derive(Debug, PartialEq)]
struct PodsCounted {
    affected: Option<i32>,
    unmapped: Option<i32>,
    /// Each rule's `affectedPods`, by index.
    rules: Vec<i32>,
    at: Option<Time>,
}

impl PodsCounted {
    /// What `pods` counted for `m`; before the first pass of every namespace, what its
    /// status showed (a new leader keeps the last counts until it has counted). The time
    /// moves only with the counts: a pass that finds the same leaves the status as it is.
    fn of(pods: &PodTally, m: &MappingView<'_>) -> PodsCounted {
        let previous = m.previous.map(|p| PodsCounted {
            affected: p.affected_pods,
            unmapped: p.unmapped_pods,
            rules: (0..m.rule_count)
                .map(|i| {
                    p.rules
                        .iter()
                        .find(|r| usize::try_from(r.index).ok() == Some(i))
                        .map_or(0, |r| r.affected_pods)
                })
                .collect(),
            at: p.pods_counted_at.clone(),
        });
        let Some(at) = pods.counted_at(&m.key) else {
            return previous.unwrap_or_else(|| PodsCounted {
                affected: None,
                unmapped: None,
                rules: vec![0; m.rule_count],
                at: None,
            });
        };
        let now = PodsCounted {
            affected: Some(pods.pods_of(&m.key)).filter(|&n| n > 0).map(count),
            unmapped: Some(pods.unmapped(&m.key)).filter(|&n| n > 0).map(count),
            rules: (0..m.rule_count)
                .map(|i| count(pods.pods_of_rule(&m.key, i)))
                .collect(),
            at: Some(at.clone()),
        };
        match previous {
            Some(previous)
                if previous.at.is_some()
                    && (&previous.affected, &previous.unmapped, &previous.rules)
                        == (&now.affected, &now.unmapped, &now.rules) =>
            {
                previous
            }
            _ => now,
        }
    }
}

/// A count as a status holds it.
fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests;
