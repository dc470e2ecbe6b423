//! What to do for one VirtualMachine, decided from what is observed: its spec and status,
//! its live pods and its resolved images. Pure; the reconciler applies the plan.
//!
//! Crash safety: the plan's status is written before its pod actions run, pod names are
//! derived from (VM uid, restart count, images hash), and the live pods decide — a pod of an
//! older restart count is stale and deleted, a second pod is never created while another one
//! is live or terminating.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::api::{RestartPolicy, RuleSource, VirtualMachine, VirtualMachineStatus, VmPhase};
use crate::runner_pod::{self, pod_images_hash, pod_restart_count};
use crate::vm_images::{SLOT_EXTRA_PREFIX, SLOT_KERNEL, SLOT_ROOT_DISK, SLOT_RUNNER, VmResolution};

pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_IMAGES_RESOLVED: &str = "ImagesResolved";
pub const CONDITION_IMAGES_CURRENT: &str = "ImagesCurrent";
pub const REASON_RESTART_REQUIRED: &str = "RestartRequired";
pub const REASON_INVALID_REWRITE: &str = "InvalidRewrite";
pub const REASON_DISALLOWED_TARGET: &str = "DisallowedTarget";
pub const REASON_CONFLICT: &str = "Conflict";

/// What the reconciler observed.
pub struct Observation<'a> {
    pub vm: &'a VirtualMachine,
    /// Pods labelled and owned as this VM's, from the watch cache (terminating ones too).
    pub pods: Vec<&'a Pod>,
    pub resolution: &'a VmResolution,
    /// A pod this operator created that the cache has not shown yet.
    pub expected_pod: Option<&'a str>,
    pub now: Time,
}

/// A change to a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum PodAction {
    Create(Box<Pod>),
    /// Delete with a UID precondition.
    Delete {
        name: String,
        uid: String,
    },
    /// liveReload: delete the old pod (UID precondition), then create the new one as soon as
    /// the old one is gone — in the same pass when its deletion is immediate.
    Replace {
        name: String,
        uid: String,
        new: Box<Pod>,
    },
}

/// Something a user must see, recorded as an Event on the VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The plan for one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The status to hold; written (when it differs) before the actions run.
    pub status: VirtualMachineStatus,
    pub actions: Vec<PodAction>,
    pub events: Vec<VmEvent>,
    /// Waiting for the cache to show a created pod or a deletion to finish.
    pub waiting: bool,
}

fn pod_phase(pod: &Pod) -> VmPhase {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => VmPhase::Succeeded,
        Some("Failed") => VmPhase::Failed,
        _ => {
            let runner_ready = status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.name == "runner" && c.ready);
            if runner_ready {
                VmPhase::Running
            } else {
                VmPhase::Pending
            }
        }
    }
}

fn should_restart(policy: RestartPolicy, phase: VmPhase) -> bool {
    match policy {
        RestartPolicy::Always => matches!(phase, VmPhase::Succeeded | VmPhase::Failed),
        RestartPolicy::OnFailure => phase == VmPhase::Failed,
        RestartPolicy::Never => false,
    }
}

/// The images a pod runs, by slot.
pub fn pod_images(pod: &Pod) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(spec) = &pod.spec else { return out };
    for c in spec.init_containers.iter().flatten() {
        let slot = match c.name.as_str() {
            "init" => SLOT_ROOT_DISK.to_string(),
            "init-kernel" => SLOT_KERNEL.to_string(),
            name => format!("{SLOT_EXTRA_PREFIX}{name}"),
        };
        out.insert(slot, c.image.clone().unwrap_or_default());
    }
    for c in &spec.containers {
        if c.name == "runner" {
            out.insert(SLOT_RUNNER.into(), c.image.clone().unwrap_or_default());
        }
    }
    out
}

fn describe_changes(pod: &Pod, resolution: &VmResolution) -> String {
    let running = pod_images(pod);
    let mut changes = Vec::new();
    for img in &resolution.images {
        let new = img.resolved.as_deref().unwrap_or("?");
        match running.get(&img.slot) {
            Some(old) if old == new => {}
            Some(old) => changes.push(format!("{}: {old} → {new}", img.slot)),
            None => changes.push(format!("{}: (none) → {new}", img.slot)),
        }
    }
    for slot in running.keys() {
        if !resolution.images.iter().any(|i| &i.slot == slot) {
            changes.push(format!("{slot}: removed"));
        }
    }
    changes.join(", ")
}

fn describe_source(s: &RuleSource) -> String {
    match &s.namespace {
        Some(ns) => format!("{} {ns}/{} rule {}", s.kind, s.name, s.rule),
        None => format!("{} {} rule {}", s.kind, s.name, s.rule),
    }
}

/// Decides the status and pod actions for one VM.
pub fn plan(obs: &Observation<'_>) -> Plan {
    let vm = obs.vm;
    let prev = vm.status.clone().unwrap_or_default();
    // The caches are behind this operator's own writes: decide once they show the pod.
    if let Some(expected) = obs.expected_pod
        && !obs.pods.iter().any(|p| p.name_any() == expected)
    {
        return Plan {
            status: vm.status.clone().unwrap_or_default(),
            actions: Vec::new(),
            events: Vec::new(),
            waiting: true,
        };
    }
    let generation = prev.restart_count;
    let images = &obs.resolution.images;
    let desired_hash = runner_pod::images_hash(images);
    let policy = vm.spec.restart_policy;

    let mut status = VirtualMachineStatus {
        phase: prev.phase,
        pod_name: prev.pod_name.clone(),
        restart_count: generation,
        observed_generation: vm.metadata.generation,
        resolved_images: images.clone(),
        conditions: prev.conditions.clone(),
    };
    let mut actions = Vec::new();
    let mut events = Vec::new();
    let mut waiting = false;
    // (status, reason, message) of ImagesCurrent.
    let mut images_current = ("True", "UpToDate", String::new());

    let (live, terminating): (Vec<&Pod>, Vec<&Pod>) = obs
        .pods
        .iter()
        .copied()
        .partition(|p| p.metadata.deletion_timestamp.is_none());
    let (mut current, stale): (Vec<&Pod>, Vec<&Pod>) = live
        .into_iter()
        .partition(|p| pod_restart_count(p) == Some(generation));
    // More than one pod of this restart count cannot come from this operator; keep the one
    // with the wanted images (or the first by name) and delete the rest.
    current.sort_by_key(|p| (pod_images_hash(p) != desired_hash.as_deref(), p.name_any()));
    let extra = if current.len() > 1 {
        current.split_off(1)
    } else {
        Vec::new()
    };
    for p in stale.iter().chain(&extra) {
        actions.push(PodAction::Delete {
            name: p.name_any(),
            uid: p.uid().unwrap_or_default(),
        });
    }
    let blocked = !terminating.is_empty() || !stale.is_empty() || !extra.is_empty();

    // Creates the pod of a restart count (when the images resolve and nothing blocks it).
    let create = |status: &mut VirtualMachineStatus,
                  events: &mut Vec<VmEvent>,
                  actions: &mut Vec<PodAction>,
                  count: i32| {
        status.restart_count = count;
        status.phase = Some(VmPhase::Pending);
        match runner_pod::build(vm, images, count) {
            Some(pod) => {
                status.pod_name = Some(pod.name_any());
                if blocked {
                    return true;
                }
                events.push(VmEvent {
                    warning: false,
                    reason: "PodCreated",
                    message: format!(
                        "Created runner pod {} with images {}",
                        pod.name_any(),
                        images
                            .iter()
                            .map(|i| format!("{}={}", i.slot, i.resolved.as_deref().unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
                actions.push(PodAction::Create(Box::new(pod)));
                false
            }
            None => false,
        }
    };

    match current.first() {
        Some(pod) => {
            status.pod_name = Some(pod.name_any());
            let phase = pod_phase(pod);
            status.phase = Some(phase);
            let finished = matches!(phase, VmPhase::Succeeded | VmPhase::Failed);
            if finished && should_restart(policy, phase) && desired_hash.is_some() {
                actions.push(PodAction::Delete {
                    name: pod.name_any(),
                    uid: pod.uid().unwrap_or_default(),
                });
                events.push(VmEvent {
                    warning: false,
                    reason: "Restarting",
                    message: format!(
                        "Runner pod {} {}; restartPolicy {policy:?} starts a new one",
                        pod.name_any(),
                        if phase == VmPhase::Succeeded {
                            "succeeded"
                        } else {
                            "failed"
                        }
                    ),
                });
                // The finished pod is deleted in the same pass; creation waits for it.
                status.restart_count = generation + 1;
                status.phase = Some(VmPhase::Pending);
                waiting = true;
            } else if let Some(want) = desired_hash.as_deref()
                && pod_images_hash(pod) != Some(want)
            {
                let changes = describe_changes(pod, obs.resolution);
                if finished {
                    // A finished pod that is not replaced runs nothing: nothing to restart.
                } else if vm.spec.live_reload
                    && let Some(new) = runner_pod::build(vm, images, generation)
                {
                    events.push(VmEvent {
                        warning: false,
                        reason: "PodRecreated",
                        message: format!(
                            "Replacing runner pod {} with {} for new images: {changes}",
                            pod.name_any(),
                            new.name_any()
                        ),
                    });
                    status.pod_name = Some(new.name_any());
                    status.phase = Some(VmPhase::Pending);
                    actions.push(PodAction::Replace {
                        name: pod.name_any(),
                        uid: pod.uid().unwrap_or_default(),
                        new: Box::new(new),
                    });
                } else {
                    images_current = (
                        "False",
                        REASON_RESTART_REQUIRED,
                        format!(
                            "the pod runs older images ({changes}); they apply when the pod is next created"
                        ),
                    );
                }
            }
        }
        None if !terminating.is_empty() => waiting = true,
        None => {
            let phase = match prev.phase {
                // The pod of a running VM vanished.
                Some(VmPhase::Running) => VmPhase::Failed,
                Some(p) => p,
                None => VmPhase::Pending,
            };
            status.phase = Some(phase);
            if phase == VmPhase::Pending {
                waiting |= create(&mut status, &mut events, &mut actions, generation);
            } else if should_restart(policy, phase) {
                events.push(VmEvent {
                    warning: false,
                    reason: "Restarting",
                    message: format!(
                        "Runner pod is gone ({phase:?}); restartPolicy {policy:?} starts a new one"
                    ),
                });
                waiting |= create(&mut status, &mut events, &mut actions, generation + 1);
            } else {
                images_current = ("Unknown", "NoPod", "no runner pod runs".into());
            }
        }
    }

    // Conditions.
    let errors: Vec<String> = images
        .iter()
        .filter_map(|i| i.error.as_ref().map(|e| format!("{}: {e}", i.slot)))
        .collect();
    let conflicts: Vec<String> = images
        .iter()
        .zip(&obs.resolution.conflicts)
        .filter(|(_, c)| !c.is_empty())
        .map(|(img, c)| {
            format!(
                "{}: {} wins over {} with a different result",
                img.slot,
                img.source.as_ref().map(describe_source).unwrap_or_default(),
                c.iter().map(describe_source).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let resolved = if !errors.is_empty() {
        if desired_hash.is_none() && current.is_empty() {
            status.phase = Some(VmPhase::Pending);
        }
        images_current = (
            "Unknown",
            "ImagesUnresolved",
            "the images do not resolve".into(),
        );
        let all_disallowed = images
            .iter()
            .zip(&obs.resolution.disallowed)
            .all(|(i, d)| i.error.is_none() || *d);
        let reason = if all_disallowed && !obs.resolution.disallowed.is_empty() {
            REASON_DISALLOWED_TARGET
        } else {
            REASON_INVALID_REWRITE
        };
        ("False", reason, errors.join("; "))
    } else if !conflicts.is_empty() {
        ("True", REASON_CONFLICT, conflicts.join("; "))
    } else {
        ("True", "Resolved", String::new())
    };
    let phase = status.phase.unwrap_or(VmPhase::Pending);
    let ready = if phase == VmPhase::Running {
        ("True", "Running", String::new())
    } else {
        (
            "False",
            phase_str(phase),
            format!("the VM is {}", phase_str(phase)),
        )
    };
    let generation_observed = vm.metadata.generation;
    let mut conditions = Vec::new();
    for (ty, (st, reason, message)) in [
        (CONDITION_READY, ready),
        (CONDITION_IMAGES_RESOLVED, resolved),
        (CONDITION_IMAGES_CURRENT, images_current),
    ] {
        conditions.push(condition(
            &prev.conditions,
            ty,
            st,
            reason,
            message,
            generation_observed,
            &obs.now,
        ));
    }
    // Warnings on entering (or changing) an invalid-rewrite, disallowed-target or
    // restart-required state.
    for (ty, reason) in [
        (CONDITION_IMAGES_RESOLVED, REASON_INVALID_REWRITE),
        (CONDITION_IMAGES_RESOLVED, REASON_DISALLOWED_TARGET),
        (CONDITION_IMAGES_CURRENT, REASON_RESTART_REQUIRED),
    ] {
        let now = conditions.iter().find(|c| c.type_ == ty);
        let before = prev.conditions.iter().find(|c| c.type_ == ty);
        if let Some(now) = now
            && now.reason == reason
            && before.is_none_or(|b| b.reason != now.reason || b.message != now.message)
        {
            events.push(VmEvent {
                warning: true,
                reason,
                message: now.message.clone(),
            });
        }
    }
    status.conditions = conditions;
    Plan {
        status,
        actions,
        events,
        waiting,
    }
}

fn phase_str(p: VmPhase) -> &'static str {
    match p {
        VmPhase::Pending => "Pending",
        VmPhase::Running => "Running",
        VmPhase::Succeeded => "Succeeded",
        VmPhase::Failed => "Failed",
    }
}

/// A condition, keeping the previous `lastTransitionTime` when the status did not change.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    observed_generation: Option<i64>,
    now: &Time,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation,
        last_transition_time,
    }
}

#[cfg(test)]
mod tests;
