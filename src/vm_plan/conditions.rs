//! Step 2 of the plan: the VM's conditions — `Ready`, `ImagesResolved`, `ImagesCurrent`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::VmPhase;
use crate::conditions::{Conditions, Status, kind, reason};
use crate::vm_images::{SlotError, VmResolution};

use super::pod_decision::PodImages;

type Parts = (Status, &'static str, String);

fn ready(phase: VmPhase, create_refused: Option<&str>) -> Parts {
    if let Some(message) = create_refused {
        return (
            Status::False,
            reason::POD_CREATE_FAILED,
            format!("the runner pod could not be created: {message}"),
        );
    }
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
        let all_disallowed = errors
            .iter()
            .all(|(_, e)| matches!(e, SlotError::DisallowedTarget(_)));
        let why = if all_disallowed {
            reason::DISALLOWED_TARGET
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
    if conflicts.is_empty() {
        (Status::True, reason::RESOLVED, String::new())
    } else {
        (Status::True, reason::CONFLICT, conflicts.join("; "))
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

/// The VM's conditions, given the phase and pod images decided in step 1, and what the
/// API server said when it refused to create the pod.
#[must_use]
pub fn conditions(
    previous: &[Condition],
    observed_generation: Option<i64>,
    now: &Time,
    phase: VmPhase,
    create_refused: Option<&str>,
    resolution: &VmResolution,
    pod: &PodImages,
) -> Vec<Condition> {
    let build = Conditions::new(previous, observed_generation, now);
    [
        (kind::READY, ready(phase, create_refused)),
        (kind::IMAGES_RESOLVED, images_resolved(resolution)),
        (kind::IMAGES_CURRENT, images_current(resolution, pod)),
    ]
    .into_iter()
    .map(|(ty, (status, why, message))| build.build(ty, status, why, message))
    .collect()
}
