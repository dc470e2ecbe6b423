//! What live reload does with a NeonVM VM, from what is seen now: the images its runner pod
//! runs, what its rules resolve to now (as admission would map its slots), its labels, restart
//! policy and phase, whether a migration is under way, and whether imagemap replaced its pod
//! already for these images. Pure; the leader acts on it.

use std::collections::BTreeMap;

use crate::core::excerpt::excerpt_to;
use crate::core::neonvm::{NeonVm, RestartPolicy};
use crate::core::vm_plan::VmEvent;

pub use crate::core::pod::records::LIVE_RELOAD_LABEL;

/// A slot whose running image differs from what the rules resolve to now.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub slot: String,
    pub running: String,
    pub resolved: String,
}

/// The pod imagemap deleted for a VM, and the images its replacement was to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub pod_uid: String,
    pub expected: BTreeMap<String, String>,
}

/// The runner pod as seen.
#[derive(Debug, Clone, Copy)]
pub struct Pod<'a> {
    pub uid: &'a str,
    pub images: &'a BTreeMap<String, String>,
    pub deleting: bool,
}

/// Why the pod stays although its images changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The VM is not labelled `imagemap.dev/live-reload: "true"`.
    NotOptedIn,
    /// Its runner would not come back: `OnFailure` (it exits 0 on SIGTERM) or `Never`.
    RestartPolicy(RestartPolicy),
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The pod runs what the rules resolve to (or there is nothing to judge yet: no pod,
    /// one being deleted, a VM not running).
    Current,
    /// A migration is under way: nothing is touched until it is over.
    Migrating(Vec<Change>),
    /// Delete the pod: NeonVM creates the next one, and admission maps it.
    Replace(Vec<Change>),
    /// The pod stays, and a restart is required for the change.
    RestartRequired(Vec<Change>, Why),
    /// The replacement imagemap asked for came back unmapped (admission did not answer): it
    /// is not replaced again.
    NotMappedAtAdmission(Vec<Change>),
}

/// The slots whose running image differs from the resolved one (slots the pod lacks, or
/// imagemap cannot resolve, are not judged). A followed tag whose digest is not held here
/// is current when the pod runs it pinned to any digest.
#[must_use]
pub fn changes(
    running: &BTreeMap<String, String>,
    resolved: &BTreeMap<String, String>,
) -> Vec<Change> {
    resolved
        .iter()
        .filter_map(|(slot, resolved)| {
            let running = running.get(slot)?;
            let pinned = running
                .strip_prefix(resolved.as_str())
                .is_some_and(|rest| rest.starts_with('@') && !resolved.contains('@'));
            (running != resolved && !pinned).then(|| Change {
                slot: slot.clone(),
                running: running.clone(),
                resolved: resolved.clone(),
            })
        })
        .collect()
}

/// The verdict for `vm` with its runner `pod`, `resolved` (slot → image now),
/// `migration_under_way`, and `replaced` (what imagemap did for it last, if anything).
#[must_use]
pub fn verdict(
    vm: &NeonVm,
    pod: Option<Pod<'_>>,
    resolved: &BTreeMap<String, String>,
    migration_under_way: bool,
    replaced: Option<&Replaced>,
) -> Verdict {
    let Some(pod) = pod.filter(|p| !p.deleting) else {
        return Verdict::Current;
    };
    if vm.phase.as_deref() != Some("Running") && !vm.migrating() {
        return Verdict::Current;
    }
    let changes = changes(pod.images, resolved);
    if changes.is_empty() {
        return Verdict::Current;
    }
    if migration_under_way || vm.migrating() {
        return Verdict::Migrating(changes);
    }
    if let Some(replaced) = replaced
        && replaced.pod_uid != pod.uid
        && replaced.expected == *resolved
    {
        return Verdict::NotMappedAtAdmission(changes);
    }
    if vm.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) != Some("true") {
        return Verdict::RestartRequired(changes, Why::NotOptedIn);
    }
    if vm.restart_policy != RestartPolicy::Always {
        return Verdict::RestartRequired(changes, Why::RestartPolicy(vm.restart_policy));
    }
    Verdict::Replace(changes)
}

/// Most changes an Event lists.
const LISTED: usize = 4;

/// `rootDisk a → b, runner c → d` (each part an excerpt; at most [`LISTED`], and how many
/// more).
pub fn listed(changes: &[Change]) -> String {
    let text = changes
        .iter()
        .take(LISTED)
        .map(|c| {
            let cut = |s: &str| excerpt_to(s, 200);
            format!(
                "{} {} → {}",
                cut(&c.slot),
                cut(&c.running),
                cut(&c.resolved)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    match changes.len().checked_sub(LISTED) {
        Some(more) if more > 0 => format!("{text} and {more} more"),
        _ => text,
    }
}

/// The Event that tells `verdict` about the runner pod `pod`; `None` for nothing to tell.
#[must_use]
pub fn event(verdict: &Verdict, pod: &str) -> Option<VmEvent> {
    let (warning, reason, message) = match verdict {
        Verdict::Current | Verdict::Migrating(_) => return None,
        Verdict::Replace(changes) => (
            false,
            "RunnerPodReplaced",
            format!(
                "live reload: runner pod {pod} deleted for {}; NeonVM creates the next one, which admission maps",
                listed(changes)
            ),
        ),
        Verdict::RestartRequired(changes, why) => {
            let why = match why {
                Why::NotOptedIn => format!(
                    "label the VM {LIVE_RELOAD_LABEL}=true to have its runner pod replaced on a change"
                ),
                Why::RestartPolicy(policy) => format!(
                    "under restartPolicy {policy:?} a deleted runner pod would not come back: restart the VM"
                ),
            };
            (
                false,
                "RestartRequired",
                format!("runner pod {pod} runs {}; {why}", listed(changes)),
            )
        }
        Verdict::NotMappedAtAdmission(changes) => (
            true,
            "NotMappedAtAdmission",
            format!(
                "the replacement runner pod {pod} came back unmapped ({}): admission did not answer for it; it is not replaced again",
                listed(changes)
            ),
        ),
    };
    Some(VmEvent {
        warning,
        reason,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(live: bool, policy: RestartPolicy, phase: &str) -> NeonVm {
        NeonVm {
            namespace: "dev".into(),
            name: "compute".into(),
            uid: "v".into(),
            labels: if live {
                BTreeMap::from([(LIVE_RELOAD_LABEL.to_string(), "true".to_string())])
            } else {
                BTreeMap::new()
            },
            root_disk: Some("disk".into()),
            kernel: None,
            extra: Vec::new(),
            runner: None,
            restart_policy: policy,
            phase: Some(phase.into()),
            pod_name: Some("compute-a".into()),
        }
    }

    fn images(disk: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("rootDisk".to_string(), disk.to_string()),
            ("runner".to_string(), "runner:1".to_string()),
        ])
    }

    #[test]
    fn a_live_reload_vm_under_always_is_replaced_and_others_are_told() {
        let running = images("mirror.io/disk:1");
        let pod = Pod {
            uid: "p1",
            images: &running,
            deleting: false,
        };
        let now = images("mirror.io/disk:2");
        let change = vec![Change {
            slot: "rootDisk".into(),
            running: "mirror.io/disk:1".into(),
            resolved: "mirror.io/disk:2".into(),
        }];
        let live = vm(true, RestartPolicy::Always, "Running");
        assert_eq!(
            verdict(&live, Some(pod), &now, false, None),
            Verdict::Replace(change.clone())
        );
        assert_eq!(
            verdict(&live, Some(pod), &running, false, None),
            Verdict::Current
        );
        assert_eq!(
            verdict(
                &vm(false, RestartPolicy::Always, "Running"),
                Some(pod),
                &now,
                false,
                None
            ),
            Verdict::RestartRequired(change.clone(), Why::NotOptedIn)
        );
        for policy in [RestartPolicy::OnFailure, RestartPolicy::Never] {
            assert_eq!(
                verdict(&vm(true, policy, "Running"), Some(pod), &now, false, None),
                Verdict::RestartRequired(change.clone(), Why::RestartPolicy(policy))
            );
        }
        // Not during a migration, whether the phase or a migration object says so.
        assert_eq!(
            verdict(&live, Some(pod), &now, true, None),
            Verdict::Migrating(change.clone())
        );
        assert_eq!(
            verdict(
                &vm(true, RestartPolicy::Always, "Migrating"),
                Some(pod),
                &now,
                false,
                None
            ),
            Verdict::Migrating(change.clone())
        );
        // No pod, or one going: nothing to judge.
        assert_eq!(verdict(&live, None, &now, false, None), Verdict::Current);
        let going = Pod {
            deleting: true,
            ..pod
        };
        assert_eq!(
            verdict(&live, Some(going), &now, false, None),
            Verdict::Current
        );
    }

    #[test]
    fn a_replacement_that_came_back_unmapped_is_not_replaced_again() {
        let live = vm(true, RestartPolicy::Always, "Running");
        let now = images("mirror.io/disk:2");
        let unmapped = images("disk");
        let replaced = Replaced {
            pod_uid: "p1".into(),
            expected: now.clone(),
        };
        let next = Pod {
            uid: "p2",
            images: &unmapped,
            deleting: false,
        };
        assert!(matches!(
            verdict(&live, Some(next), &now, false, Some(&replaced)),
            Verdict::NotMappedAtAdmission(_)
        ));
        // The rules moved on since: a new change, replaced again.
        let later = images("mirror.io/disk:3");
        assert!(matches!(
            verdict(&live, Some(next), &later, false, Some(&replaced)),
            Verdict::Replace(_)
        ));
    }

    #[test]
    fn a_tag_pinned_to_a_digest_not_held_is_current_and_events_are_bounded() {
        let running =
            BTreeMap::from([("rootDisk".to_string(), "r.io/disk:dev@sha256:1".to_string())]);
        let tag = BTreeMap::from([("rootDisk".to_string(), "r.io/disk:dev".to_string())]);
        assert!(changes(&running, &tag).is_empty());
        let moved =
            BTreeMap::from([("rootDisk".to_string(), "r.io/disk:dev@sha256:2".to_string())]);
        assert_eq!(changes(&running, &moved).len(), 1);
        let many: Vec<Change> = (0..6)
            .map(|i| Change {
                slot: format!("extraInitContainers/c{i}"),
                running: "x".repeat(10_000),
                resolved: "y".into(),
            })
            .collect();
        let event = event(&Verdict::Replace(many), "pod").unwrap();
        assert!(
            event
                .message
                .ends_with(" and 2 more; NeonVM creates the next one, which admission maps")
                || event.message.contains(" and 2 more"),
            "{}",
            event.message
        );
        assert!(event.message.len() < 2_000, "{}", event.message.len());
    }
}
