//! One pod, pod template or NeonVM runner pod explained slot by slot: what it asked for (its
//! recorded original, else its spec; for NeonVM's runner pods, the VM's spec, as NeonVM resets
//! their labels and annotations), what it runs, what the rules in force make of it now —
//! through the one admission view — and one verdict with its evidence. Every way admission
//! leaves a pod or a container as it is (`admission::scope`'s skips, the bounds of
//! `pod_mutation` and `records`, a rule that cannot map it) ends in a verdict here.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::core::admission::pod_mutation::MAX_SLOTS;
use crate::core::admission::pod_view::{Admission, SlotOutcome};
use crate::core::admission::scope::MIRROR_ANNOTATION;
use crate::core::explain::pod_facts::PodFacts;
use crate::core::explain::sent_namespaces::SentNamespaces;
use crate::core::explain::slot_verdict::SlotVerdict;
use crate::core::neonvm::NeonVmRestartPolicy;
use crate::core::pod::records::{
    self, DRY_RUN, LIVE_RELOAD_LABEL, MAPPED_LABEL, Records, SKIP_LABEL,
};
use crate::core::reference::Reference;
use crate::core::rules::{MappingKey, Mode, RuleRef};
use crate::core::slot_resolution::{ImageSlot, resolve_slot};
use crate::core::workload_reload::live_pod::UNMAPPED_REPLACEMENT_ANNOTATION;
use crate::core::workload_reload::{PodOwner, changes};

/// What a slot explained says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotExplanation {
    pub slot: String,
    /// What it asked for.
    pub requested: String,
    /// Where `requested` comes from: `record` (what admission recorded), `spec`, or `vm`
    /// (the NeonVM VM's spec).
    pub requested_from: &'static str,
    /// What it runs (`None` for a pod template, or a slot the pod lacks).
    pub runs: Option<String>,
    /// The digest the pod reports its image was pulled at.
    pub image_id: Option<String>,
    /// What the rules in force make of it now (`None`: they cannot map it).
    pub now: Option<String>,
    /// The rule that decides it now.
    pub rule: Option<String>,
    #[serde(flatten)]
    pub verdict: SlotVerdict,
}

/// What could not be read, and the permission that would let explain read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    pub what: String,
    pub grant: String,
}

/// What explain answers from besides the pod.
pub struct Explaining<'a> {
    /// The rules in force, the namespaces' labels, the digests the operator published.
    pub admission: &'a Admission<'a>,
    /// Which namespaces the webhook is sent (`None`: unknown, `scope_unread` says why).
    pub sent: Option<&'a SentNamespaces>,
    /// The mappings or the namespace could not be read: no verdict that needs the rules.
    pub rules_unread: Option<&'a Unread>,
    /// The webhook configuration could not be read.
    pub scope_unread: Option<&'a Unread>,
    /// The problem a rule's mapping status reports, when the operator refused it.
    pub status_problem: &'a dyn Fn(&RuleRef) -> Option<String>,
    /// When a mapping was created.
    pub mapping_created: &'a dyn Fn(&MappingKey) -> Option<Timestamp>,
}

/// Each slot of `pod` explained.
#[must_use]
pub fn explain(ctx: &Explaining<'_>, pod: &PodFacts) -> Vec<SlotExplanation> {
    let asked = asked(pod);
    if let Some(verdict) = left_as_is(ctx, pod) {
        return asked
            .into_iter()
            .map(|a| a.explained(None, verdict.clone()))
            .collect();
    }
    let labels = pod.neonvm.as_ref().map_or(&pod.labels, |vm| &vm.labels);
    let namespace_labels = (ctx.admission.namespace_labels)(&pod.namespace);
    let who = records::pod_requester(&pod.namespace, labels, &namespace_labels);
    let mut out: Vec<SlotExplanation> = asked
        .into_iter()
        .map(|a| {
            let outcome = ctx.admission.slot(&who, &a.slot, &a.requested);
            let verdict = slot_verdict(ctx, pod, &a, &outcome, labels);
            a.explained(Some(&outcome), verdict)
        })
        .collect();
    // A pod admission did not map, that it would map now, only when its records fit.
    let missed: Vec<&SlotExplanation> = out
        .iter()
        .filter(|s| matches!(s.verdict, SlotVerdict::NotMappedAtAdmission { .. }))
        .collect();
    if !missed.is_empty() {
        let records = Records {
            originals: missed
                .iter()
                .map(|s| (s.slot.clone(), s.requested.clone()))
                .collect(),
            rules: missed
                .iter()
                .map(|s| (s.slot.clone(), s.rule.clone().unwrap_or_default()))
                .collect(),
        };
        if let Err(e) = records.annotations(&pod.annotations) {
            for s in &mut out {
                if matches!(s.verdict, SlotVerdict::NotMappedAtAdmission { .. }) {
                    s.verdict = SlotVerdict::NotMappedWhole { why: e.to_string() };
                }
            }
        }
    }
    out
}

/// One slot as asked.
struct Asked {
    slot: String,
    requested: String,
    from: &'static str,
    runs: Option<String>,
    image_id: Option<String>,
}

impl Asked {
    fn explained(self, outcome: Option<&SlotOutcome>, verdict: SlotVerdict) -> SlotExplanation {
        SlotExplanation {
            slot: self.slot,
            requested: self.requested,
            requested_from: self.from,
            runs: self.runs,
            image_id: self.image_id,
            now: outcome.and_then(|o| o.image.clone()),
            rule: outcome
                .and_then(|o| o.resolution.rule.as_ref())
                .map(ToString::to_string),
            verdict,
        }
    }
}

/// What each slot of `pod` asked for and runs.
fn asked(pod: &PodFacts) -> Vec<Asked> {
    if let Some(vm) = &pod.neonvm {
        let runs: BTreeMap<&str, &str> = pod
            .slots
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // The runner pod's runner slot, when the VM names no image.
        let default_runner = runs.get("runner").copied();
        return vm
            .slots(default_runner)
            .into_iter()
            .map(|s| Asked {
                runs: runs.get(s.slot.as_str()).map(|r| (*r).to_string()),
                slot: s.slot,
                requested: s.requested,
                from: "vm",
                image_id: None,
            })
            .collect();
    }
    let originals = records::originals(&pod.annotations);
    pod.slots
        .iter()
        .map(|(slot, image)| {
            let recorded = originals.get(slot);
            Asked {
                slot: slot.clone(),
                requested: recorded.unwrap_or(image).clone(),
                from: if recorded.is_some() { "record" } else { "spec" },
                runs: (!pod.template).then(|| image.clone()),
                image_id: pod.image_ids.get(slot).cloned(),
            }
        })
        .collect()
}

/// Why admission leaves the whole pod as it is, when it does; what explain cannot tell
/// without the rules.
fn left_as_is(ctx: &Explaining<'_>, pod: &PodFacts) -> Option<SlotVerdict> {
    if pod.annotations.contains_key(MIRROR_ANNOTATION) {
        return Some(SlotVerdict::LeftAloneByDesign {
            why: "a static pod's mirror: the kubelet runs what its file says".into(),
        });
    }
    if pod
        .controller
        .as_ref()
        .is_some_and(|(group, kind)| group == crate::core::api::GROUP && kind == "VirtualMachine")
    {
        return Some(SlotVerdict::LeftAloneByDesign {
            why: "a runner pod of imagemap's VirtualMachine: the operator made it with the \
                  images its rules resolve to (the VM's status says which)"
                .into(),
        });
    }
    if let Some(why) = ctx.sent.and_then(|s| s.never_sent(&pod.namespace)) {
        return Some(SlotVerdict::NamespaceNeverSent { why });
    }
    if let Some(unread) = ctx.rules_unread {
        return Some(unknown(unread));
    }
    if pod.neonvm.is_none() {
        let keys: Vec<&str> = pod.slots.iter().map(|(k, _)| k.as_str()).collect();
        if keys.len() > MAX_SLOTS {
            return Some(SlotVerdict::NotMappedWhole {
                why: format!(
                    "it has {} containers, over the {MAX_SLOTS} admission maps",
                    keys.len()
                ),
            });
        }
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let mut shared: Vec<&str> = sorted
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        shared.dedup();
        if !shared.is_empty() {
            return Some(SlotVerdict::NotMappedWhole {
                why: format!("containers share names ({})", shared.join(", ")),
            });
        }
    }
    None
}

fn unknown(unread: &Unread) -> SlotVerdict {
    SlotVerdict::Unknown {
        unread: unread.what.clone(),
        grant: unread.grant.clone(),
    }
}

/// The verdict for one slot `a`, `outcome` being what admission makes of it now.
fn slot_verdict(
    ctx: &Explaining<'_>,
    pod: &PodFacts,
    a: &Asked,
    outcome: &SlotOutcome,
    labels: &BTreeMap<String, String>,
) -> SlotVerdict {
    let resolution = &outcome.resolution;
    // A rule the operator refused (its status says so) although it compiles here.
    if let Some(rule) = &resolution.rule
        && let Some(problem) = (ctx.status_problem)(rule)
    {
        return SlotVerdict::RuleRefused {
            rule: rule.to_string(),
            problem,
        };
    }
    if a.from == "record" {
        return recorded_verdict(pod, a, outcome);
    }
    if let Err(e) = &resolution.outcome {
        return SlotVerdict::RuleRefused {
            rule: resolution
                .rule
                .as_ref()
                .map_or_else(|| "the rule".to_string(), ToString::to_string),
            problem: e.to_string(),
        };
    }
    if let Some(refused) = resolution.refused.first() {
        return SlotVerdict::RuleRefused {
            rule: refused.rule.to_string(),
            problem: refused.problem.clone(),
        };
    }
    let now = outcome.image.as_deref().unwrap_or(&a.requested);
    if pod.neonvm.is_some() {
        return neonvm_verdict(pod, a, outcome);
    }
    if now == a.requested {
        return unchanged_verdict(ctx, pod, a, labels);
    }
    if pod.template {
        return SlotVerdict::MappedCurrent;
    }
    if let Some(unread) = ctx.scope_unread {
        return unknown(unread);
    }
    SlotVerdict::NotMappedAtAdmission {
        because: missed_because(ctx, pod, resolution.rule.as_ref()),
    }
}

/// A slot admission recorded: current, stale (and what happens), or an unpinned tag.
fn recorded_verdict(pod: &PodFacts, a: &Asked, outcome: &SlotOutcome) -> SlotVerdict {
    let runs = a.runs.clone().unwrap_or_default();
    let Some(now) = &outcome.image else {
        return stale(pod);
    };
    if outcome.resolution.follow_tag && !runs.contains('@') && runs == *now {
        return SlotVerdict::FollowedTagNotPinned { tag: runs };
    }
    let running = BTreeMap::from([(a.slot.clone(), runs)]);
    let resolved = BTreeMap::from([(a.slot.clone(), now.clone())]);
    if changes(&running, &resolved, &pod.image_ids).is_empty() {
        SlotVerdict::MappedCurrent
    } else {
        stale(pod)
    }
}

/// What happens to a stale pod: its workload rolls it by live reload, or only its next
/// pods get the new image, or a restart is required.
fn stale(pod: &PodFacts) -> SlotVerdict {
    let opted_in = pod.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true");
    let next = match (&pod.owner, opted_in) {
        (PodOwner::Workload(kind, name), true) => format!(
            "live reload evicts it, and its {} {name} recreates it, mapped",
            kind.name()
        ),
        (PodOwner::Workload(..), false) => return SlotVerdict::StaleNewPodsOnly,
        (PodOwner::VirtualMachine, _) => {
            "its VirtualMachine's live reload decides (the VM's status says)".into()
        }
        (PodOwner::Other { kind, name }, _) => format!(
            "RestartRequired: nothing recreates it (its controller is {kind} {name}); delete it \
             for a pod with the new image"
        ),
        (PodOwner::None, _) => "RestartRequired: it has no controller to recreate it; create it \
                                again for the new image"
            .into(),
    };
    SlotVerdict::MappedStale { next }
}

/// A slot the rules leave as it asks: a dry-run mapping's, one a pod opted out of, or none.
fn unchanged_verdict(
    ctx: &Explaining<'_>,
    pod: &PodFacts,
    a: &Asked,
    labels: &BTreeMap<String, String>,
) -> SlotVerdict {
    let rules = ctx.admission.rules;
    let namespace_labels = (ctx.admission.namespace_labels)(&pod.namespace);
    let slot = || ImageSlot {
        slot: a.slot.clone(),
        requested: a.requested.clone(),
    };
    let who = records::pod_requester(&pod.namespace, labels, &namespace_labels);
    if rules.has_dry_run() {
        let preview = resolve_slot(rules, slot(), &who, Mode::Preview);
        if let (Some(rule), Ok(would)) = (&preview.rule, &preview.outcome)
            && *would != a.requested
            && pod.labels.get(MAPPED_LABEL).is_none_or(|l| l == DRY_RUN)
        {
            return SlotVerdict::DryRun {
                rule: rule.to_string(),
                would_run: would.clone(),
            };
        }
    }
    if labels.get(SKIP_LABEL).map(String::as_str) == Some("true") {
        let mut all_rules = who;
        all_rules.namespace_rules = true;
        let escaped = resolve_slot(rules, slot(), &all_rules, Mode::Live);
        if let (Some(rule), Ok(_)) = (&escaped.rule, &escaped.outcome) {
            return SlotVerdict::OptedOut {
                escaped: vec![rule.to_string()],
            };
        }
    }
    let nearest = Reference::parse_normalized(&a.requested)
        .map(|r| {
            rules
                .nearest(&r, &who, 3)
                .into_iter()
                .map(|(rule, matched)| format!("{rule} ({} {matched})", rule.kind.as_str()))
                .collect()
        })
        .unwrap_or_default();
    SlotVerdict::NoRuleMatches { nearest }
}

/// Why a pod with no record runs what a rule would map now: a replacement that came back
/// unmapped, a pod older than the rule's mapping, or one admitted while no replica answered.
fn missed_because(ctx: &Explaining<'_>, pod: &PodFacts, rule: Option<&RuleRef>) -> String {
    if pod
        .annotations
        .contains_key(UNMAPPED_REPLACEMENT_ANNOTATION)
    {
        return "a live-reload replacement that came back unmapped: no replica answered its \
                admission"
            .into();
    }
    let created = rule.and_then(|r| (ctx.mapping_created)(&r.mapping));
    match (pod.created, created, rule) {
        (Some(pod_at), Some(rule_at), Some(rule)) if pod_at < rule_at => format!(
            "the pod was created at {pod_at}, before {} ({rule_at})",
            rule.mapping
        ),
        (Some(pod_at), Some(rule_at), Some(rule)) => format!(
            "{} existed ({rule_at}) when the pod was created ({pod_at}): no replica answered \
             its admission, or the rule changed since",
            rule.mapping
        ),
        _ => "created before the rule, or while no replica answered".into(),
    }
}

/// A NeonVM VM's slot: what its runner pod runs against what admission makes of the VM's
/// request now, and what NeonVM's live reload does about it.
fn neonvm_verdict(pod: &PodFacts, a: &Asked, outcome: &SlotOutcome) -> SlotVerdict {
    let now = outcome.image.clone().unwrap_or_else(|| a.requested.clone());
    let Some(runs) = &a.runs else {
        return if now == a.requested {
            SlotVerdict::NoRuleMatches {
                nearest: Vec::new(),
            }
        } else {
            SlotVerdict::MappedCurrent
        };
    };
    let running = BTreeMap::from([(a.slot.clone(), runs.clone())]);
    let resolved = BTreeMap::from([(a.slot.clone(), now.clone())]);
    if crate::core::stale_slot::stale_slots(&running, &resolved).is_empty() {
        return if outcome.resolution.rule.is_some() {
            SlotVerdict::MappedCurrent
        } else {
            SlotVerdict::NoRuleMatches {
                nearest: Vec::new(),
            }
        };
    }
    let Some(vm) = &pod.neonvm else {
        return stale(pod);
    };
    let opted_in = vm.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true");
    let next = match (opted_in, vm.restart_policy) {
        (true, NeonVmRestartPolicy::Always) => {
            "NeonVM's live reload deletes the runner pod; NeonVM creates the next, which admission maps".to_string()
        }
        (true, policy) => format!(
            "RestartRequired: its restartPolicy is {policy:?}, so the VM would not come back"
        ),
        (false, _) => "RestartRequired: the VM is not labelled imagemap.dev/live-reload=true".into(),
    };
    SlotVerdict::MappedStale { next }
}

#[cfg(test)]
mod tests;
