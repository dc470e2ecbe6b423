//! What live reload does with a NeonVM VM, from what is seen now: the images its runner pod
//! runs, what its rules resolve to now (as admission would map its slots), its labels, restart
//! policy and phase, whether a migration is under way, and whether imagemap replaced its pod
//! already for these images. Pure; the leader acts on it.

use std::collections::BTreeMap;

use crate::core::neonvm::{NeonVm, NeonVmRestartPolicy};
use crate::core::notice::Notice;
use crate::core::stale_slot::{StaleSlot, listed, stale_slots};

pub use crate::core::pod::records::LIVE_RELOAD_LABEL;

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
pub enum KeptBecause {
    /// The VM is not labelled `imagemap.dev/live-reload: "true"`.
    NotOptedIn,
    /// Its runner would not come back: `OnFailure` (it exits 0 on SIGTERM) or `Never`.
    RestartPolicy(NeonVmRestartPolicy),
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The pod runs what the rules resolve to (or there is nothing to judge yet: no pod,
    /// one being deleted, a VM not running).
    Current,
    /// A migration is under way: nothing is touched until it is over.
    Migrating(Vec<StaleSlot>),
    /// Delete the pod: NeonVM creates the next one, and admission maps it.
    Replace(Vec<StaleSlot>),
    /// The pod stays, and a restart is required for the change.
    RestartRequired(Vec<StaleSlot>, KeptBecause),
    /// The replacement imagemap asked for came back unmapped (admission did not answer): it
    /// is not replaced again.
    NotMappedAtAdmission(Vec<StaleSlot>),
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
    let changes = stale_slots(pod.images, resolved);
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
        return Verdict::RestartRequired(changes, KeptBecause::NotOptedIn);
    }
    if vm.restart_policy != NeonVmRestartPolicy::Always {
        return Verdict::RestartRequired(changes, KeptBecause::RestartPolicy(vm.restart_policy));
    }
    Verdict::Replace(changes)
}

/// The Event that tells `verdict` about the runner pod `pod`; `None` for nothing to tell.
#[must_use]
pub fn event(verdict: &Verdict, pod: &str) -> Option<Notice> {
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
                KeptBecause::NotOptedIn => format!(
                    "label the VM {LIVE_RELOAD_LABEL}=true to have its runner pod replaced on a change"
                ),
                KeptBecause::RestartPolicy(policy) => format!(
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
    Some(Notice {
        warning,
        reason,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(live: bool, policy: NeonVmRestartPolicy, phase: &str) -> NeonVm {
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
        let change = vec![StaleSlot {
            slot: "rootDisk".into(),
            running: "mirror.io/disk:1".into(),
            resolved: "mirror.io/disk:2".into(),
        }];
        let live = vm(true, NeonVmRestartPolicy::Always, "Running");
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
                &vm(false, NeonVmRestartPolicy::Always, "Running"),
                Some(pod),
                &now,
                false,
                None
            ),
            Verdict::RestartRequired(change.clone(), KeptBecause::NotOptedIn)
        );
        for policy in [NeonVmRestartPolicy::OnFailure, NeonVmRestartPolicy::Never] {
            assert_eq!(
                verdict(&vm(true, policy, "Running"), Some(pod), &now, false, None),
                Verdict::RestartRequired(change.clone(), KeptBecause::RestartPolicy(policy))
            );
        }
        // Not during a migration, whether the phase or a migration object says so.
        assert_eq!(
            verdict(&live, Some(pod), &now, true, None),
            Verdict::Migrating(change.clone())
        );
        assert_eq!(
            verdict(
                &vm(true, NeonVmRestartPolicy::Always, "Migrating"),
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
        let live = vm(true, NeonVmRestartPolicy::Always, "Running");
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
        assert!(stale_slots(&running, &tag).is_empty());
        let moved =
            BTreeMap::from([("rootDisk".to_string(), "r.io/disk:dev@sha256:2".to_string())]);
        assert_eq!(stale_slots(&running, &moved).len(), 1);
        let many: Vec<StaleSlot> = (0..6)
            .map(|i| StaleSlot {
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
