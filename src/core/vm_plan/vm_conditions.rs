//! Step 2 of the plan: the VM's conditions — `Ready`, `ImagesResolved`, `ImagesCurrent`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::core::api::VmPhase;
use crate::core::conditions::{Conditions, KstatusRules, Status, kind, reason, with_kstatus};
use crate::core::slot_resolution::SlotError;
use crate::core::vm_images::VmResolution;

use super::pod_decision::PodImages;

type Parts = (Status, &'static str, String);

/// What the VM's `Ready` condition follows.
#[derive(Debug, Clone, Copy)]
pub struct Readiness<'a> {
    pub phase: VmPhase,
    /// What the API server said when it refused to create the pod.
    pub create_refused: Option<&'a str>,
    /// The finished pod's restart backs off for this long yet.
    pub restart_wait: Option<std::time::Duration>,
    /// Restarts in a row after short runs.
    pub crash_loop_count: i32,
}

fn ready(r: &Readiness<'_>) -> Parts {
    if let Some(message) = r.create_refused {
        return (
            Status::False,
            reason::POD_CREATE_FAILED,
            format!("the runner pod could not be created: {message}"),
        );
    }
    if let Some(wait) = r.restart_wait {
        return (
            Status::False,
            reason::CRASH_LOOP_BACK_OFF,
            format!(
                "the runner pod ended after a short run ({} in a row); the next starts in {} s",
                r.crash_loop_count.saturating_add(1),
                wait.as_secs().max(1)
            ),
        );
    }
    let phase = r.phase;
    let why = match phase {
        VmPhase::Running => return (Status::True, reason::RUNNING, String::new()),
        VmPhase::Pending => reason::PENDING,
        VmPhase::Succeeded => reason::SUCCEEDED,
        VmPhase::Failed => reason::FAILED,
    };
    (Status::False, why, format!("the VM is {why}"))
}

fn images_resolved(resolution: &VmResolution) -> Parts {
    let errors: Vec<(&str, &SlotError)> = resolution
        .slots
        .iter()
        .filter_map(|s| s.outcome.as_ref().err().map(|e| (s.slot.as_str(), e)))
        .collect();
    if !errors.is_empty() {
        let all = |f: fn(&SlotError) -> bool| errors.iter().all(|(_, e)| f(e));
        let why = if all(|e| matches!(e, SlotError::DisallowedTarget(_))) {
            reason::DISALLOWED_TARGET
        } else if all(|e| matches!(e, SlotError::FollowRefused(_))) {
            reason::ALLOWED_REGISTRIES_REQUIRED
        } else {
            reason::INVALID_REWRITE
        };
        let message = errors
            .iter()
            .map(|(slot, e)| format!("{slot}: {e}"))
            .collect::<Vec<_>>()
            .join("; ");
        return (Status::False, why, message);
    }
    let conflicts: Vec<String> = resolution
        .slots
        .iter()
        .filter(|s| !s.conflicts.is_empty())
        .map(|s| {
            format!(
                "{}: {} wins over {} with a different result",
                s.slot,
                s.rule.as_ref().map(ToString::to_string).unwrap_or_default(),
                s.conflicts
                    .iter()
                    .map(ToString::to_string)
                    .chain((s.more_conflicts > 0).then(|| format!("{} more", s.more_conflicts)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    if !conflicts.is_empty() {
        return (Status::True, reason::CONFLICT, conflicts.join("; "));
    }
    let unverified: Vec<String> = resolution
        .slots
        .iter()
        .filter_map(|s| {
            let error = s.digest_error.as_ref()?;
            let resolved = s.outcome.as_ref().ok()?;
            let used = match &s.digest {
                Some(d) => format!("the last known digest {d} stays in force"),
                None => format!("no digest is known, so the pod uses {resolved} unpinned"),
            };
            Some(format!("{}: {error}; {used}", s.slot))
        })
        .collect();
    if unverified.is_empty() {
        (Status::True, reason::RESOLVED, String::new())
    } else {
        (
            Status::True,
            reason::DIGEST_UNVERIFIED,
            unverified.join("; "),
        )
    }
}

fn images_current(resolution: &VmResolution, pod: &PodImages) -> Parts {
    if !resolution.all_resolved() {
        return (
            Status::Unknown,
            reason::IMAGES_UNRESOLVED,
            "the images do not resolve".into(),
        );
    }
    match pod {
        PodImages::Current => (Status::True, reason::UP_TO_DATE, String::new()),
        PodImages::RestartRequired(changes) => (
            Status::False,
            reason::RESTART_REQUIRED,
            format!(
                "the pod runs older images ({changes}); they apply when the pod is next created"
            ),
        ),
        PodImages::Throttled(changes) => (
            Status::False,
            reason::RECREATION_THROTTLED,
            format!(
                "the pod runs older images ({changes}); its replacement waits for the recreation budget (--max-recreates-per-minute)"
            ),
        ),
        PodImages::NoPod => (Status::Unknown, reason::NO_POD, "no runner pod runs".into()),
    }
}

/// The VM's conditions, given what step 1 decided of the pod, and what the API server said
/// when it refused to create one.
#[must_use]
pub fn conditions(
    previous: &[Condition],
    observed_generation: Option<i64>,
    now: &Time,
    readiness: &Readiness<'_>,
    resolution: &VmResolution,
    pod: &PodImages,
) -> Vec<Condition> {
    let build = Conditions::new(previous, observed_generation, now);
    let conditions = [
        (kind::READY, ready(readiness)),
        (kind::IMAGES_RESOLVED, images_resolved(resolution)),
        (kind::IMAGES_CURRENT, images_current(resolution, pod)),
    ]
    .into_iter()
    .map(|(ty, (status, why, message))| build.build(ty, status, why, message))
    .collect();
    with_kstatus(&build, conditions, &KSTATUS)
}

/// A VM is stalled when its images do not resolve, the API server refuses its pod, or its
/// pod failed for good; it is reconciling while its pod starts, backs off, or waits for the
/// recreation budget.
const KSTATUS: KstatusRules<'static> = KstatusRules {
    stalled: &[
        (kind::IMAGES_RESOLVED, reason::INVALID_REWRITE),
        (kind::IMAGES_RESOLVED, reason::DISALLOWED_TARGET),
        (kind::IMAGES_RESOLVED, reason::ALLOWED_REGISTRIES_REQUIRED),
        (kind::READY, reason::POD_CREATE_FAILED),
        (kind::READY, reason::FAILED),
    ],
    reconciling: &[
        (kind::READY, reason::PENDING),
        (kind::READY, reason::CRASH_LOOP_BACK_OFF),
        (kind::IMAGES_CURRENT, reason::RECREATION_THROTTLED),
    ],
};
