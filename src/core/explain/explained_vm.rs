//! One of imagemap's VirtualMachines explained slot by slot: what its spec asks for, what
//! its runner pod runs, what its rules make of each slot now (as the VM controller resolves
//! them), and the verdict — current, or stale with what happens (`liveReload` replaces the
//! pod; without it a restart is required). Admission leaves these runner pods alone: the
//! controller makes them with the images already resolved.

use std::collections::BTreeMap;

use crate::core::api::VirtualMachine;
use crate::core::explain::explained_pod::SlotExplanation;
use crate::core::explain::slot_verdict::SlotVerdict;
use crate::core::rules::{Mode, RuleRef, RuleSet};
use crate::core::slot_resolution::SlotResolution;
use crate::core::vm_images;

/// Each slot of `vm` explained: resolved by `rules` with its namespace labelled
/// `namespace_labels`, against what its runner pod runs (`runs`, slot → image; empty: no
/// pod); `status_problem` is what a rule's mapping status says when the operator refused it.
#[must_use]
pub fn explain_vm(
    rules: &RuleSet,
    vm: &VirtualMachine,
    namespace_labels: &BTreeMap<String, String>,
    default_runner: &str,
    runs: &BTreeMap<String, String>,
    status_problem: &dyn Fn(&RuleRef) -> Option<String>,
) -> Vec<SlotExplanation> {
    let resolution = vm_images::resolve_vm(rules, vm, namespace_labels, default_runner, Mode::Live);
    let live_reload = vm.spec.live_reload;
    resolution
        .slots
        .into_iter()
        .map(|slot| {
            let running = runs.get(&slot.slot).cloned();
            let verdict = verdict(&slot, running.as_deref(), live_reload, status_problem);
            SlotExplanation {
                requested_from: "vm",
                runs: running,
                image_id: None,
                now: slot.outcome.as_ref().ok().cloned(),
                rule: slot.rule.as_ref().map(ToString::to_string),
                verdict,
                slot: slot.slot,
                requested: slot.requested,
            }
        })
        .collect()
}

fn verdict(
    slot: &SlotResolution,
    running: Option<&str>,
    live_reload: bool,
    status_problem: &dyn Fn(&RuleRef) -> Option<String>,
) -> SlotVerdict {
    if let Some(rule) = &slot.rule
        && let Some(problem) = status_problem(rule)
    {
        return SlotVerdict::RuleRefused {
            rule: rule.to_string(),
            problem,
        };
    }
    let now = match &slot.outcome {
        Ok(now) => now,
        Err(e) => {
            return SlotVerdict::RuleRefused {
                rule: slot
                    .rule
                    .as_ref()
                    .map_or_else(|| "the rule".to_string(), ToString::to_string),
                problem: e.to_string(),
            };
        }
    };
    if let Some(refused) = slot.refused.first() {
        return SlotVerdict::RuleRefused {
            rule: refused.rule.to_string(),
            problem: refused.problem.clone(),
        };
    }
    let current = running.is_none_or(|r| {
        r == now
            || (slot.follow_tag
                && r.strip_prefix(now.as_str())
                    .is_some_and(|rest| rest.starts_with('@')))
    });
    match (current, slot.rule.is_some()) {
        (true, true) => SlotVerdict::MappedCurrent,
        (true, false) => SlotVerdict::NoRuleMatches {
            nearest: Vec::new(),
        },
        (false, _) if live_reload => SlotVerdict::MappedStale {
            next: "liveReload is on: the operator replaces the VM's pod".into(),
        },
        (false, _) => SlotVerdict::MappedStale {
            next: "RestartRequired: liveReload is off; the VM's status says RestartRequired until \
                   its pod is restarted"
                .into(),
        },
    }
}
