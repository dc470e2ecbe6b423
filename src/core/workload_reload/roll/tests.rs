#![allow(clippy::unwrap_used)]
#![allow(clippy::too_many_lines)] // a roll read top to bottom, step by step

use std::collections::BTreeMap;

use super::*;
use crate::core::workload_reload::{PodOwner, WorkloadKind};

fn pod(name: &str, uid: &str, mapped: bool) -> LivePod {
    LivePod {
        name: name.into(),
        uid: uid.into(),
        labels: BTreeMap::new(),
        originals: BTreeMap::new(),
        mapped,
        unmapped_replacement: false,
        owner: PodOwner::Workload(WorkloadKind::ReplicaSet, "rs".into()),
        images: BTreeMap::new(),
        image_ids: BTreeMap::new(),
        ready_since: Some(Timestamp::UNIX_EPOCH),
        deleting: false,
    }
}

fn change() -> Vec<StaleSlot> {
    vec![StaleSlot {
        slot: "app".into(),
        running: "a".into(),
        resolved: "b".into(),
    }]
}

fn status(progress: RolloutProgress) -> WorkloadStatus {
    WorkloadStatus {
        uid: "w".into(),
        progress,
        min_ready_seconds: 10,
        deployment: None,
    }
}

fn now() -> Timestamp {
    "2026-12-05T12:00:00Z".parse().unwrap()
}

#[test]
fn pods_roll_one_at_a_time_each_after_the_last_replacement_is_available() {
    let stale = change();
    let (a, b, c) = (
        pod("a", "1", true),
        pod("b", "2", true),
        pod("c", "3", true),
    );
    let settled = status(RolloutProgress::Settled);
    let mut memory = RollMemory::default();
    let pods = [
        RollPod {
            pod: &b,
            changes: &stale,
        },
        RollPod {
            pod: &a,
            changes: &stale,
        },
        RollPod {
            pod: &c,
            changes: &stale,
        },
    ];
    assert_eq!(
        step(Some(&settled), &pods, &mut memory, now()),
        RollStep::Evict {
            name: "a".into(),
            uid: "1".into()
        }
    );
    memory.evicting("a", "1", &pods, now());
    assert_eq!(left(&pods, &memory), 3);
    // The evicted pod is still there: wait.
    let going = LivePod {
        deleting: true,
        ..a.clone()
    };
    let pods = [
        RollPod {
            pod: &going,
            changes: &stale,
        },
        RollPod {
            pod: &b,
            changes: &stale,
        },
        RollPod {
            pod: &c,
            changes: &stale,
        },
    ];
    assert!(matches!(
        step(Some(&settled), &pods, &mut memory, now()),
        RollStep::Wait(Wait::Replacement { .. })
    ));
    // Still going, and its replacement Available, the workload settled: the next goes
    // without waiting for the grace period.
    let ready = pod("a2", "4", true);
    let none: Vec<StaleSlot> = Vec::new();
    let while_going = [
        RollPod {
            pod: &going,
            changes: &stale,
        },
        RollPod {
            pod: &ready,
            changes: &none,
        },
        RollPod {
            pod: &b,
            changes: &stale,
        },
        RollPod {
            pod: &c,
            changes: &stale,
        },
    ];
    let mut early = memory.clone();
    assert_eq!(
        step(
            Some(&settled),
            &while_going,
            &mut early,
            now() + Duration::from_secs(10)
        ),
        RollStep::Evict {
            name: "b".into(),
            uid: "2".into()
        }
    );
    // Gone, and its replacement (current) Ready but not for minReadySeconds yet: wait.
    let fresh = LivePod {
        ready_since: Some(now()),
        ..pod("a2", "4", true)
    };
    let current: Vec<StaleSlot> = Vec::new();
    let pods = [
        RollPod {
            pod: &fresh,
            changes: &current,
        },
        RollPod {
            pod: &b,
            changes: &stale,
        },
        RollPod {
            pod: &c,
            changes: &stale,
        },
    ];
    assert!(matches!(
        step(Some(&settled), &pods, &mut memory, now()),
        RollStep::Wait(Wait::Replacement { .. })
    ));
    // Available, but the workload's status not yet settled: wait.
    let later = now() + Duration::from_secs(10);
    assert!(matches!(
        step(
            Some(&status(RolloutProgress::Unavailable)),
            &pods,
            &mut memory,
            later
        ),
        RollStep::Wait(Wait::Replacement { .. })
    ));
    // All there: the next.
    assert_eq!(
        step(Some(&settled), &pods, &mut memory, later),
        RollStep::Evict {
            name: "b".into(),
            uid: "2".into()
        }
    );
    assert!(memory.evicted.is_none());
    assert_eq!(left(&pods, &memory), 2);
}

#[test]
fn nothing_is_evicted_during_the_workloads_own_rollout_or_while_it_is_short() {
    let stale = change();
    let a = pod("a", "1", true);
    let pods = [RollPod {
        pod: &a,
        changes: &stale,
    }];
    let mut memory = RollMemory::default();
    assert_eq!(
        step(
            Some(&status(RolloutProgress::OwnRollout)),
            &pods,
            &mut memory,
            now()
        ),
        RollStep::Wait(Wait::OwnRollout)
    );
    assert_eq!(
        step(
            Some(&status(RolloutProgress::Unavailable)),
            &pods,
            &mut memory,
            now()
        ),
        RollStep::Wait(Wait::Unavailable)
    );
    assert_eq!(
        step(None, &pods, &mut memory, now()),
        RollStep::Wait(Wait::NotListed)
    );
    let unready = LivePod {
        ready_since: None,
        ..a.clone()
    };
    let pods = [RollPod {
        pod: &unready,
        changes: &stale,
    }];
    assert_eq!(
        step(
            Some(&status(RolloutProgress::Settled)),
            &pods,
            &mut memory,
            now()
        ),
        RollStep::Wait(Wait::Unavailable)
    );
    // Nothing stale: current, whatever the status.
    let none: Vec<StaleSlot> = Vec::new();
    let pods = [RollPod {
        pod: &a,
        changes: &none,
    }];
    assert_eq!(step(None, &pods, &mut memory, now()), RollStep::Current);
}

#[test]
fn a_replacement_that_came_back_unmapped_is_never_evicted_and_holds_the_roll() {
    let stale = change();
    let (a, b) = (pod("a", "1", true), pod("b", "2", true));
    let settled = status(RolloutProgress::Settled);
    let mut memory = RollMemory::default();
    let pods = [
        RollPod {
            pod: &a,
            changes: &stale,
        },
        RollPod {
            pod: &b,
            changes: &stale,
        },
    ];
    memory.evicting("a", "1", &pods, now());
    let unmapped = pod("a2", "3", false);
    let pods = [
        RollPod {
            pod: &unmapped,
            changes: &stale,
        },
        RollPod {
            pod: &b,
            changes: &stale,
        },
    ];
    let later = now() + Duration::from_secs(10);
    assert_eq!(
        step(Some(&settled), &pods, &mut memory, later),
        RollStep::Wait(Wait::UnmappedReplacement { pod: "a2".into() })
    );
    assert!(memory.unmapped.contains("3"));
    assert_eq!(left(&pods, &memory), 1);
    // The only stale pod left is the unmapped one: still held, never current, never evicted.
    let alone = [RollPod {
        pod: &unmapped,
        changes: &stale,
    }];
    for _ in 0..3 {
        assert_eq!(
            step(Some(&settled), &alone, &mut memory, later),
            RollStep::Wait(Wait::UnmappedReplacement { pod: "a2".into() })
        );
    }
    // Once it is gone, the roll goes on.
    let pods = [RollPod {
        pod: &b,
        changes: &stale,
    }];
    assert_eq!(
        step(Some(&settled), &pods, &mut memory, later),
        RollStep::Evict {
            name: "b".into(),
            uid: "2".into()
        }
    );
}

#[test]
fn a_replacement_not_available_in_time_is_reported_stalled() {
    let stale = change();
    let a = pod("a", "1", true);
    let pods = [RollPod {
        pod: &a,
        changes: &stale,
    }];
    let mut memory = RollMemory::default();
    memory.evicting("a", "1", &pods, now());
    let late = now() + STALLED_AFTER;
    assert_eq!(
        step(
            Some(&status(RolloutProgress::Settled)),
            &pods,
            &mut memory,
            late
        ),
        RollStep::Wait(Wait::Stalled {
            evicted: "a".into()
        })
    );
}

#[test]
fn events_are_bounded_and_say_what_happens() {
    let many: Vec<StaleSlot> = (0..6)
        .map(|i| StaleSlot {
            slot: format!("c{i}"),
            running: "x".repeat(10_000),
            resolved: "y".repeat(10_000),
        })
        .collect();
    for ev in [
        started(3, &many),
        not_mapped(&many),
        restart_required("Job dev/once", &many),
        budget_holds("a", &"z".repeat(10_000), 2),
        refused("a", &"z".repeat(10_000), 2),
    ] {
        assert!(
            ev.message.len() < 2048,
            "{}: {}",
            ev.reason,
            ev.message.len()
        );
    }
    assert!(
        budget_holds("a", "The disruption budget web needs 2 healthy pods", 2)
            .message
            .contains("budget web")
    );
    assert!(!finished(3).warning && stalled("a", 1).warning);
}

#[test]
fn a_replacement_marked_unmapped_by_an_earlier_leader_is_never_evicted() {
    let stale = change();
    let marked = LivePod {
        unmapped_replacement: true,
        ..pod("a2", "3", false)
    };
    let b = pod("b", "2", true);
    let pods = [
        RollPod {
            pod: &marked,
            changes: &stale,
        },
        RollPod {
            pod: &b,
            changes: &stale,
        },
    ];
    // A new leader: nothing remembered.
    let mut memory = RollMemory::default();
    assert_eq!(
        step(
            Some(&status(RolloutProgress::Settled)),
            &pods,
            &mut memory,
            now()
        ),
        RollStep::Wait(Wait::UnmappedReplacement { pod: "a2".into() })
    );
    assert_eq!(left(&pods, &memory), 1);
}
