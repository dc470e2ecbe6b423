//! Step 3 of the plan: the Events a user must see — what happened to the pod, and warnings
//! on entering (or changing) a state a person must act on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::core::conditions::{find, kind, reason};

use super::pod_decision::PodTransition;
use crate::core::notice::Notice;

/// Event reasons of pod transitions (warnings use their condition's reason).
pub const POD_CREATED: &str = "PodCreated";
pub const POD_RECREATED: &str = "PodRecreated";
pub const RESTARTING: &str = "Restarting";

/// The condition states that warn when entered: `(condition type, reason)`.
const WARNINGS: [(&str, &str); 7] = [
    (kind::IMAGES_RESOLVED, reason::MAPPING_UNREADABLE),
    (kind::READY, reason::POD_CREATE_FAILED),
    (kind::IMAGES_RESOLVED, reason::INVALID_REWRITE),
    (kind::IMAGES_RESOLVED, reason::DISALLOWED_TARGET),
    (kind::IMAGES_RESOLVED, reason::ALLOWED_REGISTRIES_REQUIRED),
    (kind::IMAGES_RESOLVED, reason::DIGEST_UNVERIFIED),
    (kind::IMAGES_CURRENT, reason::RESTART_REQUIRED),
];

fn normal(transition: &PodTransition) -> Notice {
    let (reason, message) = match transition {
        PodTransition::Created { pod, images } => (
            POD_CREATED,
            format!(
                "Created runner pod {pod} with images {}",
                images
                    .iter()
                    .map(|i| format!("{}={}", i.slot, i.pod_image().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        PodTransition::Recreating { old, new, changes } => (
            POD_RECREATED,
            format!("Replacing runner pod {old} with {new} for new images: {changes}"),
        ),
        PodTransition::Restarting {
            pod: Some(pod),
            phase,
            policy,
        } => (
            RESTARTING,
            format!(
                "Runner pod {pod} {}; restartPolicy {policy:?} starts a new one",
                if *phase == crate::core::api::VmPhase::Succeeded {
                    "succeeded"
                } else {
                    "failed"
                }
            ),
        ),
        PodTransition::Restarting {
            pod: None,
            phase,
            policy,
        } => (
            RESTARTING,
            format!("Runner pod is gone ({phase:?}); restartPolicy {policy:?} starts a new one"),
        ),
    };
    Notice {
        warning: false,
        reason,
        message,
    }
}

/// The Events of one plan: pod transitions first, then warnings for conditions that
/// entered (or changed within) a warning state.
#[must_use]
pub fn events(
    transitions: &[PodTransition],
    previous: &[Condition],
    conditions: &[Condition],
) -> Vec<Notice> {
    let mut out: Vec<Notice> = transitions.iter().map(normal).collect();
    for (ty, why) in WARNINGS {
        let before = find(previous, ty);
        if let Some(now) = find(conditions, ty)
            && now.reason == why
            && before.is_none_or(|b| b.reason != now.reason || b.message != now.message)
        {
            out.push(Notice {
                warning: true,
                reason: why,
                message: now.message.clone(),
            });
        }
    }
    out
}
