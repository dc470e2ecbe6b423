//! What to do for one VirtualMachine, decided from what is observed: its spec and status,
//! its live pods and its resolved images. Pure; the reconciler applies the plan.
//!
//! Crash safety: pod names are derived from (VM uid, restart count, images hash), and the
//! live pods decide — a pod of an older restart count is stale and deleted, a second pod is
//! never created while another one is live or terminating. A new restart count is written to
//! the status before the pod of that count is created. Otherwise the status is written once
//! the pods have settled (no pod action under way, no pod starting): one write per change.
//!
//! The plan is three steps, each its own module: [`pod_decision`] (which pods to create,
//! replace or delete), [`vm_conditions`] (the VM's conditions) and [`vm_events`] (what a user
//! must see).

pub mod pod_decision;
pub mod restart_backoff;
pub mod vm_conditions;
pub mod vm_events;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::core::api::{VirtualMachine, VirtualMachineStatus, VmPhase};
use crate::core::notice::Notice;
use crate::core::vm_images::VmResolution;

pub use pod_decision::PodAction;
use pod_decision::PodImages;

/// What the reconciler observed.
pub struct Observation<'a> {
    pub vm: &'a VirtualMachine,
    /// Pods labelled and owned as this VM's, from the watch cache (terminating ones too).
    pub pods: Vec<&'a Pod>,
    pub resolution: &'a VmResolution,
    /// A pod this operator created that the cache has not shown yet.
    pub expected_pod: Option<&'a str>,
    /// The API server refused the last pod create for this spec of the VM.
    pub create_failure: Option<&'a CreateFailure>,
    /// The liveReload recreation budget is spent; one is free again after this long.
    pub recreation_wait: Option<Duration>,
    /// Why the rules that could map this VM are unknown (a mapping cannot be read), if
    /// they are: no pod is created or replaced.
    pub rules_unknown: Option<&'a str>,
    pub now: Time,
}

/// A pod create the API server refused (quota, Pod Security admission, invalid fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateFailure {
    /// What the API server said.
    pub message: String,
    /// The wait left before trying again; `None`: try now.
    pub retry_in: Option<Duration>,
}

/// The plan for one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The status to hold; written (when it differs) before the actions run.
    pub status: VirtualMachineStatus,
    pub actions: Vec<PodAction>,
    pub events: Vec<Notice>,
    /// Waiting for the cache to show a created pod or a deletion to finish.
    pub waiting: bool,
    /// Whether to write `status` now (when it differs from the VM's): a new restart count
    /// goes before the actions; otherwise the status waits until the pods have settled.
    pub write_status: bool,
    /// Look again after this long although nothing changes (a starting pod's grace ends).
    pub recheck: Option<Duration>,
}

impl Plan {
    /// Nothing to do or write until new evidence comes (the caches show this operator's
    /// own pod, or a followed tag's first digest arrives).
    #[must_use]
    pub fn hold(vm: &VirtualMachine) -> Plan {
        Plan {
            status: vm.status.clone().unwrap_or_default(),
            actions: Vec::new(),
            events: Vec::new(),
            waiting: true,
            write_status: false,
            recheck: None,
        }
    }
}

/// Decides the status, pod actions and Events for one VM.
#[must_use]
pub fn plan(obs: &Observation<'_>) -> Plan {
    let vm = obs.vm;
    let prev = vm.status.clone().unwrap_or_default();
    if let Some(why) = obs.rules_unknown {
        return held(vm, prev, why, &obs.now);
    }
    // The caches are behind this operator's own writes: decide once they show the pod.
    if let Some(expected) = obs.expected_pod
        && !obs.pods.iter().any(|p| p.name_any() == expected)
    {
        return Plan::hold(vm);
    }
    let images = obs.resolution.images();
    let mut pods = pod_decision::decide(vm, &prev, &obs.pods, &images, &obs.now);
    let creates = |a: &PodAction| matches!(a, PodAction::Create(_));
    // A refused create stands while the plan is to create the pod again.
    let refused = obs
        .create_failure
        .filter(|_| pods.actions.iter().any(creates));
    let mut recheck = pods.starting.or(pods.restart_wait);
    if let Some(wait) = obs.recreation_wait
        && pods.hold_replacement(&obs.pods)
    {
        recheck = Some(wait);
    }
    if let Some(wait) = refused.and_then(|f| f.retry_in) {
        pods.actions.retain(|a| !creates(a));
        pods.transitions
            .retain(|t| !matches!(t, pod_decision::PodTransition::Created { .. }));
        recheck = Some(wait);
    }
    let prev_conditions = prev.condition_values();
    let conditions = vm_conditions::conditions(
        &prev_conditions,
        vm.metadata.generation,
        &obs.now,
        &vm_conditions::Readiness {
            phase: pods.phase.unwrap_or(VmPhase::Pending),
            create_refused: refused.map(|f| f.message.as_str()),
            restart_wait: pods.restart_wait,
            crash_loop_count: pods.crash_loop_count,
        },
        obs.resolution,
        &pods.images,
    );
    let events = vm_events::events(&pods.transitions, &prev_conditions, &conditions);
    let settling = !pods.actions.is_empty() || pods.waiting || pods.starting.is_some();
    // A warning's state is written at once, or the next pass would warn again.
    let write_status =
        pods.restart_count != prev.restart_count || !settling || events.iter().any(|e| e.warning);
    Plan {
        write_status,
        recheck,
        status: VirtualMachineStatus {
            phase: pods.phase,
            pod_name: pods.pod_name,
            restart_count: pods.restart_count,
            crash_loop_count: pods.crash_loop_count,
            observed_generation: vm.metadata.generation,
            resolved_images: images.into_iter().map(Arc::new).collect(),
            conditions: conditions.into_iter().map(Arc::new).collect(),
        },
        actions: pods.actions,
        events,
        waiting: pods.waiting,
    }
}

/// The plan of a VM whose rules are unknown: its pods stay as they are, and its status says
/// why (`ImagesResolved=Unknown`, `MappingUnreadable`, stalled until a person fixes it).
fn held(vm: &VirtualMachine, prev: VirtualMachineStatus, why: &str, now: &Time) -> Plan {
    use crate::core::conditions::{Conditions, KstatusRules, Status, kind, reason, with_kstatus};
    let prev_conditions = prev.condition_values();
    let build = Conditions::new(&prev_conditions, vm.metadata.generation, now);
    let mut conditions: Vec<_> = prev_conditions
        .iter()
        .filter(|c| {
            ![kind::IMAGES_RESOLVED, kind::STALLED, kind::RECONCILING].contains(&c.type_.as_str())
        })
        .cloned()
        .collect();
    conditions.push(build.build(
        kind::IMAGES_RESOLVED,
        Status::Unknown,
        reason::MAPPING_UNREADABLE,
        why.to_string(),
    ));
    let rules = KstatusRules {
        stalled: &[(kind::IMAGES_RESOLVED, reason::MAPPING_UNREADABLE)],
        reconciling: &[],
    };
    let conditions = with_kstatus(&build, conditions, &rules);
    let events = vm_events::events(&[], &prev_conditions, &conditions);
    Plan {
        status: VirtualMachineStatus {
            observed_generation: vm.metadata.generation,
            conditions: conditions.into_iter().map(Arc::new).collect(),
            ..prev
        },
        actions: Vec::new(),
        events,
        waiting: false,
        write_status: true,
        recheck: None,
    }
}

/// Whether the VM's pod runs older images and waits for a restart because liveReload is
/// off: what step 1 decides for the VM, its pods and its live resolution.
#[must_use]
pub fn awaits_restart(
    vm: &VirtualMachine,
    pods: &[&Pod],
    resolution: &VmResolution,
    now: &Time,
) -> bool {
    let prev = vm.status.clone().unwrap_or_default();
    // Followed tags: the digests the VM's status recorded (the reconcile's last look).
    let images = if resolution.followed().next().is_some() {
        let mut pinned = resolution.clone();
        pinned.pin(|_, _| (None, None), &prev.resolved_image_values());
        pinned.images()
    } else {
        resolution.images()
    };
    matches!(
        pod_decision::decide(vm, &prev, pods, &images, now).images,
        PodImages::RestartRequired(_)
    )
}

#[cfg(test)]
mod tests;
