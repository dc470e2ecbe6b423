use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::core::api::VirtualMachineSpec;
use crate::core::runner_pod::pod_images;
use crate::core::slot_resolution::{SlotError, SlotResolution};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

fn vm(live_reload: bool, policy: &str) -> VirtualMachine {
    let spec: VirtualMachineSpec = serde_yaml_ng::from_str(&format!(
        "liveReload: {live_reload}\nrestartPolicy: {policy}\nguest: {{rootDisk: {{image: disk:1}}}}"
    ))
    .unwrap();
    let mut vm = VirtualMachine::new("vm", spec);
    vm.metadata.namespace = Some("dev".into());
    vm.metadata.uid = Some("uid-1".into());
    vm.metadata.generation = Some(1);
    vm
}

fn resolution(disk: &str) -> VmResolution {
    let slot = |slot: &str, r: &str| SlotResolution {
        slot: slot.into(),
        requested: r.into(),
        outcome: Ok(r.into()),
        rule: None,
        conflicts: Vec::new(),
        more_conflicts: 0,
        follow_tag: false,
        digest: None,
        digest_error: None,
        refused: Vec::new(),
    };
    VmResolution {
        slots: vec![
            slot("rootDisk", disk),
            slot("runner", "docker.io/x/runner:1"),
        ],
    }
}

fn now() -> Time {
    Time(Timestamp::from_second(1_800_000_000).unwrap())
}

fn run(vm: &VirtualMachine, pods: &[Pod], res: &VmResolution) -> Plan {
    plan(&Observation {
        vm,
        pods: pods.iter().collect(),
        resolution: res,
        expected_pod: None,
        create_failure: None,
        recreation_wait: None,
        rules_unknown: None,
        now: now(),
    })
}

/// Applies a plan as the reconciler and the API server would: status written, pods created
/// and deleted (deletion of an unscheduled pod is immediate).
fn apply(vm: &mut VirtualMachine, pods: &mut Vec<Pod>, plan: &Plan) {
    if plan.write_status {
        vm.status = Some(plan.status.clone());
    }
    for a in &plan.actions {
        match a {
            PodAction::Create(p) => pods.push((**p).clone()),
            PodAction::Delete { name, .. } => pods.retain(|p| &p.name_any() != name),
            PodAction::Replace { name, new, .. } => {
                pods.retain(|p| &p.name_any() != name);
                pods.push((**new).clone());
            }
        }
    }
}

/// Plans and applies until nothing is left to do, as the reconciler does on the events its
/// own writes cause; returns the last plan.
fn settle(vm: &mut VirtualMachine, pods: &mut Vec<Pod>, res: &VmResolution) -> Plan {
    let mut p = run(vm, pods, res);
    for _ in 0..3 {
        apply(vm, pods, &p);
        if p.actions.is_empty() {
            break;
        }
        p = run(vm, pods, res);
    }
    p
}

fn set_pod_phase(pod: &mut Pod, phase: &str, runner_ready: bool) {
    pod.status = Some(PodStatus {
        phase: Some(phase.into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "runner".into(),
            ready: runner_ready,
            ..Default::default()
        }]),
        ..Default::default()
    });
}

fn cond<'a>(p: &'a Plan, ty: &str) -> &'a Condition {
    p.status.conditions.iter().find(|c| c.type_ == ty).unwrap()
}

#[test]
fn new_vm_gets_a_pod_and_steady_state_changes_nothing() {
    let mut v = vm(false, "Always");
    let mut pods = Vec::new();
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(matches!(&p.actions[..], [PodAction::Create(_)]));
    assert_eq!(p.status.phase, Some(VmPhase::Pending));
    assert_eq!(p.events[0].reason, "PodCreated");
    // kstatus: in progress while the pod starts.
    assert_eq!(
        (
            cond(&p, "Reconciling").status.as_str(),
            cond(&p, "Reconciling").reason.as_str()
        ),
        ("True", "Pending")
    );
    apply(&mut v, &mut pods, &p);
    assert_eq!(p.status.pod_name, Some(pods[0].name_any()));

    set_pod_phase(&mut pods[0], "Running", true);
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(p.actions.is_empty());
    assert_eq!(p.status.phase, Some(VmPhase::Running));
    assert_eq!(cond(&p, "Ready").status, "True");
    // kstatus: current — neither reconciling nor stalled.
    assert!(
        p.status
            .conditions
            .iter()
            .all(|c| c.type_ != "Reconciling" && c.type_ != "Stalled")
    );
    apply(&mut v, &mut pods, &p);
    // Steady state: the same observation plans the same status, no action, no event.
    let again = run(&v, &pods, &resolution("disk:1"));
    assert_eq!(Some(&again.status), v.status.as_ref());
    assert!(again.actions.is_empty() && again.events.is_empty());
}

#[test]
fn live_reload_replaces_the_pod_with_new_images() {
    let mut v = vm(true, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    let old = pods[0].name_any();
    let p = run(&v, &pods, &resolution("disk:2"));
    let [PodAction::Replace { name, new, .. }] = &p.actions[..] else {
        panic!("{:?}", p.actions)
    };
    assert_eq!(*name, old);
    assert_eq!(p.status.pod_name, Some(new.name_any()));
    assert_eq!(p.events[0].reason, "PodRecreated");
    assert!(
        p.events[0].message.contains("rootDisk: disk:1 → disk:2"),
        "{}",
        p.events[0].message
    );
    // The replacement writes no status: the pods settle first.
    assert!(!p.write_status);
    apply(&mut v, &mut pods, &p);
    assert_eq!(pods.len(), 1);
    assert_ne!(pods[0].name_any(), old);
    assert_eq!(pod_images(&pods[0])["rootDisk"], "disk:2");
    let p = run(&v, &pods, &resolution("disk:2"));
    assert!(p.write_status && p.actions.is_empty());
    apply(&mut v, &mut pods, &p);
    assert_eq!(v.status.as_ref().unwrap().restart_count, 0);
    // The replacement is current: nothing more to do, nothing more to write.
    let again = run(&v, &pods, &resolution("disk:2"));
    assert!(again.actions.is_empty() && again.events.is_empty());
    assert_eq!(Some(&again.status), v.status.as_ref());
    // Had the old pod lingered (terminating), nothing is created beside it.
    let mut lingering = pods[0].clone();
    lingering.metadata.deletion_timestamp = Some(now());
    let p = run(&v, &[lingering], &resolution("disk:3"));
    assert!(p.actions.is_empty() && p.waiting);
}

#[test]
fn without_live_reload_the_pod_stays_and_a_restart_is_required() {
    let mut v = vm(false, "Always");
    let mut pods = Vec::new();
    let p = run(&v, &pods, &resolution("disk:1"));
    apply(&mut v, &mut pods, &p);
    let p = run(&v, &pods, &resolution("disk:2"));
    assert!(p.actions.is_empty());
    let c = cond(&p, "ImagesCurrent");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "RestartRequired")
    );
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].reason, "RestartRequired");
    apply(&mut v, &mut pods, &p);
    // Reported once, not on every reconcile.
    assert!(run(&v, &pods, &resolution("disk:2")).events.is_empty());
}

#[test]
fn restart_policy_decides_what_follows_a_finished_pod() {
    for (policy, phase, restarts) in [
        ("Always", "Succeeded", true),
        ("Always", "Failed", true),
        ("OnFailure", "Failed", true),
        ("OnFailure", "Succeeded", false),
        ("Never", "Failed", false),
    ] {
        let mut v = vm(false, policy);
        let mut pods = Vec::new();
        let p = run(&v, &pods, &resolution("disk:1"));
        apply(&mut v, &mut pods, &p);
        set_pod_phase(&mut pods[0], phase, false);
        let p = run(&v, &pods, &resolution("disk:1"));
        apply(&mut v, &mut pods, &p);
        if restarts {
            assert!(
                pods.is_empty(),
                "{policy}/{phase}: the finished pod is deleted first"
            );
            let p = run(&v, &pods, &resolution("disk:1"));
            apply(&mut v, &mut pods, &p);
            assert_eq!(pods.len(), 1);
            assert_eq!(
                v.status.as_ref().unwrap().restart_count,
                1,
                "{policy}/{phase}"
            );
            assert_eq!(v.status.as_ref().unwrap().phase, Some(VmPhase::Pending));
        } else {
            assert_eq!(pods.len(), 1, "{policy}/{phase}: the finished pod stays");
            assert_eq!(v.status.as_ref().unwrap().restart_count, 0);
            assert_eq!(v.status.as_ref().unwrap().phase.unwrap().as_str(), phase);
        }
    }
}

#[test]
fn a_vanished_pod_is_replaced_per_policy() {
    // Pending: simply created again, no restart.
    let mut v = vm(false, "Never");
    let mut pods = Vec::new();
    let p = run(&v, &pods, &resolution("disk:1"));
    apply(&mut v, &mut pods, &p);
    pods.clear();
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(matches!(&p.actions[..], [PodAction::Create(_)]));
    // Running: the VM failed; Never keeps it failed, Always restarts with restartCount + 1.
    for (policy, restarts) in [("Never", false), ("Always", true)] {
        let mut v = vm(false, policy);
        let mut pods = Vec::new();
        let p = run(&v, &pods, &resolution("disk:1"));
        apply(&mut v, &mut pods, &p);
        set_pod_phase(&mut pods[0], "Running", true);
        let p = run(&v, &pods, &resolution("disk:1"));
        apply(&mut v, &mut pods, &p);
        pods.clear();
        let p = run(&v, &pods, &resolution("disk:1"));
        if restarts {
            assert!(matches!(&p.actions[..], [PodAction::Create(_)]));
            assert_eq!(p.status.restart_count, 1);
        } else {
            assert!(p.actions.is_empty());
            assert_eq!(p.status.phase, Some(VmPhase::Failed));
        }
    }
}

#[test]
fn stale_and_terminating_pods_block_creation() {
    let mut v = vm(false, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    // A crash after the restart count was persisted, before the old pod was deleted.
    v.status.as_mut().unwrap().restart_count = 1;
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(
        matches!(&p.actions[..], [PodAction::Delete { .. }]),
        "{:?}",
        p.actions
    );
    assert!(p.waiting);
    // A terminating pod: wait, never a second pod.
    pods[0].metadata.deletion_timestamp = Some(now());
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(p.actions.is_empty() && p.waiting);
    // A pod created but not yet in the cache: wait.
    let p = plan(&Observation {
        vm: &v,
        pods: vec![],
        resolution: &resolution("disk:1"),
        expected_pod: Some("x"),
        create_failure: None,
        recreation_wait: None,
        rules_unknown: None,
        now: now(),
    });
    assert!(p.actions.is_empty() && p.waiting);
}

#[test]
fn unresolved_images_leave_the_pod_alone_and_say_why() {
    let mut v = vm(true, "Always");
    let mut pods = Vec::new();
    let p = run(&v, &pods, &resolution("disk:1"));
    apply(&mut v, &mut pods, &p);
    let mut bad = resolution("disk:1");
    bad.slots[0].outcome = Err(SlotError::InvalidRewrite("rewrite produced \"X\"".into()));
    let p = run(&v, &pods, &bad);
    assert!(p.actions.is_empty());
    let c = cond(&p, "ImagesResolved");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InvalidRewrite")
    );
    assert!(c.message.contains("rootDisk: rewrite produced"));
    assert_eq!(p.events[0].reason, "InvalidRewrite");
    // A new VM whose images do not resolve gets no pod.
    let p = run(&vm(true, "Always"), &[], &bad);
    assert!(p.actions.is_empty());
}

#[test]
fn transition_times_are_kept_while_a_condition_holds() {
    let mut v = vm(false, "Always");
    let mut pods = Vec::new();
    let p = settle(&mut v, &mut pods, &resolution("disk:1"));
    let later = Time(Timestamp::from_second(1_900_000_000).unwrap());
    let p2 = plan(&Observation {
        vm: &v,
        pods: pods.iter().collect(),
        resolution: &resolution("disk:1"),
        expected_pod: None,
        create_failure: None,
        recreation_wait: None,
        rules_unknown: None,
        now: later,
    });
    assert_eq!(p2.status, p.status);
}

#[test]
fn a_pod_awaits_a_restart_only_without_live_reload() {
    for live_reload in [false, true] {
        let mut v = vm(live_reload, "Always");
        let mut pods = Vec::new();
        let p = run(&v, &pods, &resolution("disk:1"));
        apply(&mut v, &mut pods, &p);
        let pod_refs: Vec<&Pod> = pods.iter().collect();
        assert!(!awaits_restart(
            &v,
            &pod_refs,
            &resolution("disk:1"),
            &now()
        ));
        assert_eq!(
            awaits_restart(&v, &pod_refs, &resolution("disk:2"), &now()),
            !live_reload,
            "liveReload {live_reload}"
        );
        // Agrees with the plan's condition.
        let p = run(&v, &pods, &resolution("disk:2"));
        assert_eq!(
            cond(&p, "ImagesCurrent").reason == "RestartRequired",
            !live_reload
        );
    }
}

#[test]
fn a_starting_pod_defers_the_status_write_until_it_runs_or_its_grace_ends() {
    let mut v = vm(false, "Always");
    let mut pods = Vec::new();
    // The create itself writes nothing: the pod name is derived, the restart count unchanged.
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(matches!(&p.actions[..], [PodAction::Create(_)]) && !p.write_status);
    apply(&mut v, &mut pods, &p);
    // Created just now, untouched by a scheduler or kubelet: starting.
    pods[0].metadata.creation_timestamp = Some(now());
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(!p.write_status);
    assert_eq!(p.recheck, Some(crate::core::runner_pod::STARTING_GRACE));
    // Running: one write, with the phase it reached.
    set_pod_phase(&mut pods[0], "Running", true);
    let p = run(&v, &pods, &resolution("disk:1"));
    assert!(p.write_status && p.recheck.is_none());
    assert_eq!(p.status.phase, Some(VmPhase::Running));
    // Still untouched when its grace ends: Pending is written.
    let mut stuck = pods[0].clone();
    stuck.status = None;
    let grace = i64::try_from(crate::core::runner_pod::STARTING_GRACE.as_secs()).unwrap();
    let later = Time(Timestamp::from_second(1_800_000_000 + grace).unwrap());
    let p = plan(&Observation {
        vm: &v,
        pods: vec![&stuck],
        resolution: &resolution("disk:1"),
        expected_pod: None,
        create_failure: None,
        recreation_wait: None,
        rules_unknown: None,
        now: later,
    });
    assert!(p.write_status && p.recheck.is_none());
    assert_eq!(p.status.phase, Some(VmPhase::Pending));
}

#[test]
fn a_replaced_pod_that_terminated_first_is_followed_without_a_restart() {
    let mut v = vm(true, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    set_pod_phase(&mut pods[0], "Running", true);
    settle(&mut v, &mut pods, &resolution("disk:1"));
    assert_eq!(v.status.as_ref().unwrap().phase, Some(VmPhase::Running));
    // The replacement deletes the running pod, which terminates first: nothing is written.
    let p = run(&v, &pods, &resolution("disk:2"));
    assert!(matches!(&p.actions[..], [PodAction::Replace { .. }]) && !p.write_status);
    // The old pod is gone; the status still names it, Running. Its name says it ran other
    // images: the new pod follows at the same restart count, without a Restarting event.
    let p = run(&v, &[], &resolution("disk:2"));
    assert!(
        matches!(&p.actions[..], [PodAction::Create(_)]),
        "{:?}",
        p.actions
    );
    assert_eq!(p.status.restart_count, 0);
    // PodRecreated announced it: neither Restarting nor PodCreated follows.
    assert!(p.events.is_empty(), "{:?}", p.events);
    // A pod of the current images that vanishes is a failure, restarted by the policy.
    let mut w = vm(true, "Always");
    let mut pods = Vec::new();
    settle(&mut w, &mut pods, &resolution("disk:1"));
    set_pod_phase(&mut pods[0], "Running", true);
    settle(&mut w, &mut pods, &resolution("disk:1"));
    let p = run(&w, &[], &resolution("disk:1"));
    assert_eq!(p.status.restart_count, 1);
    assert_eq!(p.events[0].reason, "Restarting");
}

#[test]
fn a_refused_create_says_why_and_waits_for_its_retry() {
    let v = vm(true, "Always");
    let res = resolution("disk:1");
    let refused = CreateFailure {
        message: "pods \"vm-1\" is forbidden: violates PodSecurity \"restricted:latest\"".into(),
        retry_in: Some(Duration::from_secs(4)),
    };
    let observe = |vm, failure| {
        plan(&Observation {
            vm,
            pods: vec![],
            resolution: &res,
            expected_pod: None,
            create_failure: Some(failure),
            recreation_wait: None,
            rules_unknown: None,
            now: now(),
        })
    };
    let p = observe(&v, &refused);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.recheck, Some(Duration::from_secs(4)));
    assert!(p.write_status);
    let ready = crate::core::conditions::find(&p.status.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "PodCreateFailed")
    );
    assert!(
        ready.message.contains("violates PodSecurity"),
        "{}",
        ready.message
    );
    // kstatus: failed until a person changes something.
    let stalled = crate::core::conditions::find(&p.status.conditions, "Stalled").unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "PodCreateFailed")
    );
    let warnings: Vec<_> = p.events.iter().filter(|e| e.warning).collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].reason, "PodCreateFailed");
    assert!(!p.events.iter().any(|e| e.reason == "PodCreated"));

    // Time to try again: the create is planned, the condition stays, no second warning.
    let mut v2 = v.clone();
    v2.status = Some(p.status.clone());
    let due = CreateFailure {
        retry_in: None,
        ..refused.clone()
    };
    let p2 = observe(&v2, &due);
    assert!(matches!(p2.actions[..], [PodAction::Create(_)]));
    assert!(!p2.events.iter().any(|e| e.warning));
    let ready = crate::core::conditions::find(&p2.status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "PodCreateFailed");

    // Once the VM has a pod, the refusal no longer stands.
    let mut pods = Vec::new();
    let mut v3 = v2.clone();
    apply(&mut v3, &mut pods, &p2);
    let p3 = plan(&Observation {
        vm: &v3,
        pods: pods.iter().collect(),
        resolution: &res,
        expected_pod: None,
        create_failure: Some(&due),
        recreation_wait: None,
        rules_unknown: None,
        now: now(),
    });
    let ready = crate::core::conditions::find(&p3.status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "Pending");
}

#[test]
fn a_replacement_held_by_the_recreation_budget_keeps_the_pod_and_says_so() {
    let mut v = vm(true, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    set_pod_phase(&mut pods[0], "Running", true);
    settle(&mut v, &mut pods, &resolution("disk:1"));
    let old = pods[0].name_any();
    let wait = Duration::from_secs(7);
    let p = plan(&Observation {
        vm: &v,
        pods: pods.iter().collect(),
        resolution: &resolution("disk:2"),
        expected_pod: None,
        create_failure: None,
        recreation_wait: Some(wait),
        rules_unknown: None,
        now: now(),
    });
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.recheck, Some(wait));
    assert!(p.write_status);
    assert_eq!(p.status.pod_name.as_deref(), Some(old.as_str()));
    assert_eq!(p.status.phase, Some(VmPhase::Running));
    let current = cond(&p, "ImagesCurrent");
    assert_eq!(
        (current.status.as_str(), current.reason.as_str()),
        ("False", "RecreationThrottled")
    );
    assert!(
        current.message.contains("disk:1 → disk:2"),
        "{}",
        current.message
    );
    assert!(p.events.is_empty(), "{:?}", p.events);
    // With a recreation free, the pod is replaced and that is announced.
    let p = run(&v, &pods, &resolution("disk:2"));
    assert!(matches!(&p.actions[..], [PodAction::Replace { .. }]));
    assert_eq!(p.events[0].reason, "PodRecreated");
}

#[test]
fn a_pod_that_ends_soon_is_restarted_after_a_back_off() {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated};
    let mut v = vm(false, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    // The runner ran 3 s and failed 2 s ago.
    let at = |s: i64| Time(Timestamp::from_second(1_800_000_000 + s).unwrap());
    set_pod_phase(&mut pods[0], "Failed", false);
    pods[0]
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0]
        .state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            started_at: Some(at(-5)),
            finished_at: Some(at(-2)),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    });
    let observe = |v: &VirtualMachine, pods: &[Pod], now: Time| {
        plan(&Observation {
            vm: v,
            pods: pods.iter().collect(),
            resolution: &resolution("disk:1"),
            expected_pod: None,
            create_failure: None,
            recreation_wait: None,
            rules_unknown: None,
            now,
        })
    };
    let p = observe(&v, &pods, now());
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.recheck, Some(Duration::from_secs(8)));
    assert_eq!(p.status.phase, Some(VmPhase::Failed));
    let ready = cond(&p, "Ready");
    assert_eq!(ready.reason, "CrashLoopBackOff");
    assert!(
        ready.message.contains("next starts in 8 s"),
        "{}",
        ready.message
    );
    assert!(p.write_status);
    // Ten seconds after it finished: restarted, one quick restart counted.
    let p = observe(&v, &pods, at(8));
    assert!(matches!(&p.actions[..], [PodAction::Delete { .. }]));
    assert_eq!((p.status.restart_count, p.status.crash_loop_count), (1, 1));
    assert_eq!(p.events[0].reason, "Restarting");
}

#[test]
fn with_its_rules_unknown_a_vm_keeps_its_pod_and_says_why() {
    let mut v = vm(true, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    let why = "ImageMapping dev/m cannot be read";
    let p = plan(&Observation {
        vm: &v,
        pods: pods.iter().collect(),
        resolution: &resolution("disk:2"),
        expected_pod: None,
        create_failure: None,
        recreation_wait: None,
        rules_unknown: Some(why),
        now: now(),
    });
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let resolved = crate::core::conditions::find(&p.status.conditions, "ImagesResolved").unwrap();
    assert_eq!(
        (resolved.status.as_str(), resolved.reason.as_str()),
        ("Unknown", "MappingUnreadable")
    );
    assert!(resolved.message.contains(why));
    assert!(crate::core::conditions::find(&p.status.conditions, "Stalled").is_some());
    // The status keeps what the pod runs.
    assert_eq!(
        p.status.resolved_images,
        v.status.as_ref().unwrap().resolved_images
    );
    assert_eq!(p.events.len(), 1);
    assert!(p.events[0].warning && p.events[0].reason == "MappingUnreadable");
}

#[test]
fn a_pod_whose_own_grace_period_is_zero_is_deleted_with_one_second() {
    let mut v = vm(true, "Always");
    let mut pods = Vec::new();
    settle(&mut v, &mut pods, &resolution("disk:1"));
    assert_eq!(
        pods[0]
            .spec
            .as_ref()
            .unwrap()
            .termination_grace_period_seconds,
        Some(5)
    );
    let p = run(&v, &pods, &resolution("disk:2"));
    assert!(matches!(
        &p.actions[..],
        [PodAction::Replace { grace: None, .. }]
    ));
    // A pod made before the floor, with 0.
    pods[0]
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(0);
    let p = run(&v, &pods, &resolution("disk:2"));
    assert!(matches!(
        &p.actions[..],
        [PodAction::Replace { grace: Some(1), .. }]
    ));
    v.spec.termination_grace_period_seconds = Some(0);
    let built =
        crate::core::runner_pod::build(&v, &v.status.as_ref().unwrap().resolved_image_values(), 0)
            .unwrap();
    assert_eq!(
        built.spec.unwrap().termination_grace_period_seconds,
        Some(1)
    );
}
