//! The operator end to end on a real kube-apiserver + etcd. Each test runs its own operator
//! (in process, acting only in the test's namespaces) and waits on watched conditions.
//! There is no kubelet: tests play it by patching pod status.
//!
//! Run with `scripts/test` (ignored by a plain `cargo test`).

// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use imagemap::core::api::VmPhase;
use imagemap::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use imagemap::core::runner_pod::VM_LABEL;
use imagemap::core::runner_pod::pod_images;
use imagemap::operator::Options;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::vms::*;
use support::*;

/// Plays kubelet: sets a pod's phase and the runner container's readiness.
async fn set_pod_phase(e: &Env, pod: &str, phase: &str, ready: bool) {
    let status = json!({"status": {"phase": phase, "containerStatuses": [{
        "name": "runner", "image": "runner", "imageID": "", "ready": ready, "restartCount": 0,
        "state": if phase == "Running" { json!({"running": {}}) } else { json!({"terminated": {"exitCode": i32::from(phase == "Failed")}}) }
    }]}});
    e.pods
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn wait_event(e: &Env, object: &str, reason: &str) -> Event {
    wait_event_matching(e, object, reason, "").await
}

async fn wait_event_matching(e: &Env, object: &str, reason: &str, contains: &str) -> Event {
    let api: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let hit = |ev: &Event| {
        ev.involved_object.name.as_deref() == Some(object)
            && ev.reason.as_deref() == Some(reason)
            && ev.message.as_deref().unwrap_or_default().contains(contains)
    };
    let found = wait_list(
        api,
        watcher::Config::default(),
        &format!("event {reason} on {object}"),
        |evs| evs.iter().any(|ev| hit(ev)),
    )
    .await;
    found
        .iter()
        .find(|ev| hit(ev))
        .map(|e| (**e).clone())
        .unwrap()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn what_the_operator_keeps_of_a_vm_goes_with_it() {
    let e = env("op-forget").await;
    let op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_vm("short-lived", true, "Always", COMPUTE).await;
    wait_single_pod(&e, "short-lived", COMPUTE_NORMALIZED).await;
    let key = imagemap::core::namespaced_name::NamespacedName {
        namespace: e.ns.clone(),
        name: "short-lived".into(),
    };
    wait_value(op.progress.reconciled_vms(), "the VM reconciled", |set| {
        set.contains(&key)
    })
    .await;
    // The VM watch says it is gone: the operator's rooms forget it (the progress values are
    // one of them, the one a test can see).
    e.vms
        .delete("short-lived", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait_value(op.progress.reconciled_vms(), "the VM forgotten", |set| {
        !set.contains(&key)
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_replacement_made_when_the_old_pod_went_leaves_the_vm_as_any_other() {
    let e = env("op-handover").await;
    let op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:1"))
        .await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    let first = wait_single_pod(&e, "live", "localhost:5000/compute:1").await;
    // The old pod terminates through its grace period; its replacement is created once the
    // pod watch shows it gone.
    let patch = json!({"spec": {"rules": tilt_rule("localhost:5000/compute:2")}});
    e.mappings
        .patch("tilt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let second = wait_single_pod(&e, "live", "localhost:5000/compute:2").await;
    assert_ne!(second.uid(), first.uid());
    // Afterwards the VM is handled as any other: its pod deleted by someone, it restarts.
    e.pods
        .delete(&second.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    wait_vm(&e, "live", "restarted", |v| {
        v.status.as_ref().is_some_and(|s| s.restart_count == 1)
    })
    .await;
    let third = wait_single_pod(&e, "live", "localhost:5000/compute:2").await;
    assert_ne!(third.uid(), second.uid());
    let creates: u64 = op
        .requests
        .snapshot()
        .iter()
        .filter(|(k, _)| k.verb == "create" && k.resource == "pods")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(creates, 3, "one create per pod, none twice");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn vm_without_mappings_gets_a_pod_with_the_requested_images() {
    let e = env("op-plain").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_vm("plain", false, "Always", COMPUTE).await;
    let pod = wait_single_pod(&e, "plain", COMPUTE_NORMALIZED).await;
    assert_eq!(
        pod_images(&pod)["runner"],
        "docker.io/neondatabase/neonvm-runner:v1"
    );
    assert_eq!(pod.owner_references()[0].kind, "VirtualMachine");
    assert_eq!(pod.owner_references()[0].controller, Some(true));
    assert_eq!(
        pod.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    let v = e.vms.get("plain").await.unwrap();
    let disk = resolved(&v, "rootDisk").unwrap();
    assert_eq!(disk.requested, COMPUTE);
    assert_eq!(disk.resolved.as_deref(), Some(COMPUTE_NORMALIZED));
    assert_eq!(disk.source, None);
    assert_eq!(v.status.as_ref().unwrap().observed_generation, Some(1));
    assert_eq!(condition(&v, "ImagesResolved").unwrap().0, "True");
    // Scheduled onto a kwok node, the pod runs with its runner container ready.
    let v = wait_phase(&e, "plain", VmPhase::Running).await;
    assert_eq!(condition(&v, "Ready").unwrap().0, "True");
    wait_event(&e, "plain", "PodCreated").await;
}

/// Test 2 (and, with `restart_operator`, test 8): a new mapping switches the liveReload VM
/// to a new pod and leaves the other VM's pod running with RestartRequired.
async fn mapping_created(prefix: &str, restart_operator: bool) {
    let e = env(prefix).await;
    let mut op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_vm("fast", true, "Always", COMPUTE).await;
    e.add_vm("steady", false, "Always", COMPUTE).await;
    let fast_before = wait_single_pod(&e, "fast", COMPUTE_NORMALIZED).await;
    let steady_before = wait_single_pod(&e, "steady", COMPUTE_NORMALIZED).await;

    // Watch every pod of the namespace for the rest of the test: never two live pods per VM.
    let never_two = NeverTwoLivePods::watch(&e);

    let target = "k3d-neon-local-registry:5000/vm-compute-node-v17:tilt-bce03df2bbb7ad9d";
    e.add_mapping("tilt", tilt_rule(target)).await;
    if restart_operator {
        // Stop the operator as soon as it has written anything for the change, then start a
        // new one: it must converge without duplicates.
        let writes_before = op.requests.writes();
        let requests = op.requests.clone();
        tokio::time::timeout(WAIT, async {
            while requests.writes() == writes_before {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        drop(op);
        op = Operator::start(&[&e.ns], Options::default()).await;
    }
    let fast_after = wait_single_pod(&e, "fast", target).await;
    assert_ne!(fast_after.name_any(), fast_before.name_any());
    let v = e.vms.get("fast").await.unwrap();
    let source = resolved(&v, "rootDisk").unwrap().source.clone().unwrap();
    assert_eq!(
        (
            source.kind.as_str(),
            source.name.as_str(),
            source.rule,
            source.match_kind.as_str()
        ),
        ("ImageMapping", "tilt", 0, "repository")
    );
    assert_eq!(condition(&v, "ImagesCurrent").unwrap().0, "True");

    let steady = &wait_condition(&e, "steady", "ImagesCurrent", "RestartRequired", "").await;
    assert_eq!(condition(steady, "ImagesCurrent").unwrap().0, "False");
    assert_eq!(
        resolved(steady, "rootDisk").unwrap().resolved.as_deref(),
        Some(target)
    );
    let steady_pod = e.pods.get(&steady_before.name_any()).await.unwrap();
    assert_eq!(
        steady_pod.uid(),
        steady_before.uid(),
        "the pod without liveReload is untouched"
    );
    assert_eq!(root_disk(&steady_pod), COMPUTE_NORMALIZED);
    wait_event(&e, "steady", "RestartRequired").await;

    let awaiting = format!("{}/steady", e.ns);
    wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        "mapping status",
        |ms| {
            ms.iter().any(|m| {
                m.status.as_ref().is_some_and(|s| {
                    s.awaiting_restart == [awaiting.clone()]
                        && s.affected_vms == Some(2)
                        && s.observed_generation == Some(1)
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
        },
    )
    .await;
    never_two.check().await;
    drop(op);
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn mapping_created_recreates_live_reload_pods_only() {
    mapping_created("op-created", false).await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn operator_restarted_mid_change_converges_without_duplicates() {
    mapping_created("op-restart", true).await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn tilt_loop_of_five_quick_changes_ends_with_one_pod_on_the_last_image() {
    let e = env("op-tilt").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:tilt-0"))
        .await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    let first = wait_single_pod(&e, "dev", "localhost:5000/compute:tilt-0").await;
    for i in 1..=5 {
        let patch =
            json!({"spec": {"rules": tilt_rule(&format!("localhost:5000/compute:tilt-{i}"))}});
        e.mappings
            .patch("tilt", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let last = wait_single_pod(&e, "dev", "localhost:5000/compute:tilt-5").await;
    assert_ne!(last.name_any(), first.name_any());
    let all = e
        .pods
        .list(&ListParams::default().labels(&format!("{VM_LABEL}=dev")))
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1, "every earlier pod is gone");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn mapping_deleted_restores_the_requested_images() {
    let e = env("op-deleted").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:tilt-1"))
        .await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    e.add_vm("keep", false, "Always", COMPUTE).await;
    wait_single_pod(&e, "dev", "localhost:5000/compute:tilt-1").await;
    let keep = wait_single_pod(&e, "keep", "localhost:5000/compute:tilt-1").await;
    e.mappings
        .delete("tilt", &DeleteParams::default())
        .await
        .unwrap();
    wait_single_pod(&e, "dev", COMPUTE_NORMALIZED).await;
    let keep_vm = &wait_condition(&e, "keep", "ImagesCurrent", "RestartRequired", "").await;
    let disk = resolved(keep_vm, "rootDisk").unwrap();
    assert_eq!(
        (disk.resolved.as_deref(), disk.source.as_ref()),
        (Some(COMPUTE_NORMALIZED), None)
    );
    assert_eq!(
        e.pods.get(&keep.name_any()).await.unwrap().uid(),
        keep.uid()
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn pods_are_replaced_per_restart_policy() {
    let e = env("op-restart-policy").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    // This test plays kubelet.
    for (name, policy) in [
        ("always", "Always"),
        ("onfailure", "OnFailure"),
        ("never", "Never"),
    ] {
        e.add_unscheduled_vm(name, false, policy, COMPUTE).await;
    }
    // Deleted by someone else while Pending: replaced, whatever the policy.
    let p = wait_pod(&e, "never", COMPUTE_NORMALIZED).await;
    e.pods
        .delete(&p.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    wait_list(
        e.pods.clone(),
        pods_of("never"),
        "never: pod replaced",
        |pods| pods.len() == 1 && pods[0].uid() != p.uid(),
    )
    .await;

    // Running, then finished.
    for name in ["always", "onfailure", "never"] {
        let p = wait_pod(&e, name, COMPUTE_NORMALIZED).await;
        set_pod_phase(&e, &p.name_any(), "Running", true).await;
    }
    wait_phase(&e, "always", VmPhase::Running).await;
    let always = e
        .pods
        .list(&ListParams::default().labels(&format!("{VM_LABEL}=always")))
        .await
        .unwrap()
        .items
        .remove(0);
    let v = e.vms.get("always").await.unwrap();
    assert_eq!(condition(&v, "Ready").unwrap().0, "True");

    set_pod_phase(&e, &always.name_any(), "Succeeded", false).await;
    wait_vm(&e, "always", "restarted", |v| {
        v.status.as_ref().is_some_and(|s| s.restart_count == 1)
    })
    .await;
    let pods = wait_list(
        e.pods.clone(),
        pods_of("always"),
        "always: new pod",
        |pods| pods.len() == 1 && pods[0].name_any() != always.name_any(),
    )
    .await;
    assert_eq!(pods[0].annotations()["imagemap.dev/restart-count"], "1");

    let onfailure = e
        .pods
        .list(&ListParams::default().labels(&format!("{VM_LABEL}=onfailure")))
        .await
        .unwrap()
        .items
        .remove(0);
    wait_phase(&e, "onfailure", VmPhase::Running).await;
    set_pod_phase(&e, &onfailure.name_any(), "Succeeded", false).await;
    wait_phase(&e, "onfailure", VmPhase::Succeeded).await;
    let v = e.vms.get("onfailure").await.unwrap();
    assert_eq!(v.status.as_ref().unwrap().restart_count, 0);
    assert!(
        e.pods
            .get_opt(&onfailure.name_any())
            .await
            .unwrap()
            .is_some(),
        "the succeeded pod stays"
    );

    // Never: a running VM whose pod vanishes has failed, and stays so.
    let never = e
        .pods
        .list(&ListParams::default().labels(&format!("{VM_LABEL}=never")))
        .await
        .unwrap()
        .items
        .remove(0);
    wait_phase(&e, "never", VmPhase::Running).await;
    e.pods
        .delete(&never.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    wait_phase(&e, "never", VmPhase::Failed).await;
    assert!(
        e.pods
            .list(&ListParams::default().labels(&format!("{VM_LABEL}=never")))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        e.vms
            .get("never")
            .await
            .unwrap()
            .status
            .unwrap()
            .restart_count,
        0
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn conflicting_mappings_both_report_and_the_vm_uses_the_winner() {
    let e = env("op-conflict").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("beta", tilt_rule("b.io/compute:1")).await;
    e.add_mapping("alpha", tilt_rule("a.io/compute:1")).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    wait_single_pod(&e, "dev", "a.io/compute:1").await;
    let ms = wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        "both mappings in Conflict",
        |ms| {
            ms.len() == 2
                && ms.iter().all(|m| {
                    m.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.reason == "Conflict" && c.status == "False")
                    })
                })
        },
    )
    .await;
    for m in &ms {
        let c = &m.status.as_ref().unwrap().conditions[0];
        let other = if m.name_any() == "alpha" {
            "beta"
        } else {
            "alpha"
        };
        assert!(c.message.contains(other), "{}: {}", m.name_any(), c.message);
    }
    let v = e.vms.get("dev").await.unwrap();
    let (status, reason, message) = condition(&v, "ImagesResolved").unwrap();
    assert_eq!((status, reason), ("True", "Conflict"));
    assert!(
        message.contains("alpha") && message.contains("beta"),
        "{message}"
    );
    assert_eq!(
        resolved(&v, "rootDisk")
            .unwrap()
            .source
            .as_ref()
            .unwrap()
            .name,
        "alpha"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn invalid_rewrites_and_disallowed_targets_leave_the_pod_alone() {
    let e = env("op-invalid").await;
    let options = Options {
        allowed_registries: imagemap::core::allowed_registries::AllowedRegistries::only(vec![
            "allowed.io".into(),
            "docker.io".into(),
        ]),
        ..Options::default()
    };
    let _op = Operator::start(&[&e.ns], options).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    let pod = wait_single_pod(&e, "dev", COMPUTE_NORMALIZED).await;

    // A regex rewrite whose result is not a reference.
    let bad =
        json!([{"match": {"regex": "docker\\.io/neondatabase/(.*)"}, "to": "allowed.io/UPPER/$1"}]);
    e.add_mapping("bad", bad).await;
    let vms = wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        "InvalidRewrite",
        |vms| {
            vms.iter()
                .any(|v| condition(v, "ImagesResolved").is_some_and(|c| c.1 == "InvalidRewrite"))
        },
    )
    .await;
    assert!(
        condition(&vms[0], "ImagesResolved")
            .unwrap()
            .2
            .contains("must be lowercase")
    );
    wait_event(&e, "dev", "InvalidRewrite").await;
    assert_eq!(e.pods.get(&pod.name_any()).await.unwrap().uid(), pod.uid());

    // A regex rewrite into a registry outside --allowed-registries.
    let evil = json!([{"match": {"regex": "docker\\.io/neondatabase/(.*)"}, "to": "evil.io/$1"}]);
    e.mappings
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"rules": evil}})),
        )
        .await
        .unwrap();
    wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        "disallowed target",
        |vms| {
            vms.iter().any(|v| {
                condition(v, "ImagesResolved").is_some_and(|c| {
                    c.1 == "DisallowedTarget"
                        && c.2.contains("not in the operator's allowed registries")
                })
            })
        },
    )
    .await;
    assert_eq!(e.pods.get(&pod.name_any()).await.unwrap().uid(), pod.uid());
    wait_event_matching(&e, "dev", "DisallowedTarget", "allowed registries").await;

    // A static target outside the allow-list refuses the rule and says so on the mapping.
    let static_evil =
        json!([{"match": {"repository": "neondatabase/neonvm-runner"}, "to": "evil.io/runner"}]);
    e.add_mapping("static", static_evil).await;
    wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        "DisallowedTarget",
        |ms| {
            ms.iter().any(|m| {
                m.name_any() == "static"
                    && m.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.reason == "DisallowedTarget" && c.message.contains("rule 0"))
                    })
            })
        },
    )
    .await;
    assert_eq!(e.pods.get(&pod.name_any()).await.unwrap().uid(), pod.uid());
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn steady_state_resync_makes_no_writes() {
    let e = env("op-steady").await;
    let first = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:1"))
        .await;
    for name in ["a", "b", "c"] {
        e.add_vm(name, name != "c", "Always", COMPUTE).await;
    }
    for name in ["a", "b", "c"] {
        wait_single_pod(&e, name, "localhost:5000/compute:1").await;
    }
    wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        "mapping status",
        |ms| {
            ms.iter()
                .any(|m| m.status.as_ref().is_some_and(|s| s.affected_vms == Some(3)))
        },
    )
    .await;
    wait_value(first.progress.status_covers(), "statuses settled", |n| {
        *n >= *first.progress.reconciles().borrow()
    })
    .await;
    drop(first);

    // A new operator lists everything afresh and reconciles every VM: a full resync.
    let second = Operator::start(&[&e.ns], Options::default()).await;
    let ns = e.ns.clone();
    wait_value(
        second.progress.reconciled_vms(),
        "every VM reconciled",
        |set| set.iter().filter(|k| k.namespace == ns).count() == 3,
    )
    .await;
    let reconciles = *second.progress.reconciles().borrow();
    wait_value(
        second.progress.status_covers(),
        "a status pass after them",
        |n| *n >= reconciles,
    )
    .await;
    let writes: Vec<String> = second
        .requests
        .snapshot()
        .into_iter()
        .filter(|(k, _)| k.is_write())
        .map(|(k, n)| format!("{k} x{n}"))
        .collect();
    assert!(writes.is_empty(), "writes in steady state: {writes:?}");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn cluster_mappings_follow_namespace_selectors_and_namespaced_ones_stay_home() {
    let client = client().await;
    install_crds(&client).await;
    let selected = fresh_namespace(&client, "op-selected").await;
    let other = fresh_namespace(&client, "op-other").await;
    let label = format!("selected-{selected}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &selected,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"imagemap-test/selected": label}}})),
        )
        .await
        .unwrap();
    let _op = Operator::start(&[&selected, &other], Options::default()).await;
    let cluster: ClusterImageMapping = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "ClusterImageMapping",
        "metadata": {"name": format!("{selected}-mirror")},
        "spec": {
            "namespaceSelector": {"matchLabels": {"imagemap-test/selected": label}},
            "rules": [{"match": {"prefix": "docker.io/neondatabase"}, "to": "mirror.io/neon"}]
        }
    }))
    .unwrap();
    Api::<ClusterImageMapping>::all(client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    // A namespaced mapping in `other` for busybox.
    let other_mappings: Api<ImageMapping> = Api::namespaced(client.clone(), &other);
    other_mappings
        .create(
            &PostParams::default(),
            &mapping(
                "local",
                &json!([{"match": {"repository": "busybox"}, "to": "other.io/busybox"}]),
            ),
        )
        .await
        .unwrap();
    let env_for = |ns: &str| Env {
        client: client.clone(),
        ns: ns.to_string(),
        vms: Api::namespaced(client.clone(), ns),
        pods: Api::namespaced(client.clone(), ns),
        mappings: Api::namespaced(client.clone(), ns),
    };
    let (sel, oth) = (env_for(&selected), env_for(&other));
    for e in [&sel, &oth] {
        e.add_vm("dev", true, "Always", COMPUTE).await;
        e.add_vm("box", true, "Always", "busybox:1.36").await;
    }
    wait_single_pod(&sel, "dev", "mirror.io/neon/vm-compute-node-v17:latest").await;
    wait_single_pod(&oth, "dev", COMPUTE_NORMALIZED).await;
    wait_single_pod(&oth, "box", "other.io/busybox:1.36").await;
    wait_single_pod(&sel, "box", "docker.io/library/busybox:1.36").await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_mapping_change_fans_out_to_200_vms_with_at_most_three_writes_each() {
    const N: usize = 200;
    let e = env("op-fanout").await;
    let op = Operator::start(
        &[&e.ns],
        Options {
            max_recreates_per_minute: 0,
            ..Options::default()
        },
    )
    .await;
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:1"))
        .await;
    // Scheduled onto the kwok nodes: each old pod terminates through its grace period.
    for i in 0..N {
        e.add_vm(&format!("vm-{i:03}"), true, "Always", COMPUTE)
            .await;
    }
    let limit = Duration::from_mins(3);
    let on_image = |tag: &'static str| {
        move |pods: &[Arc<Pod>]| {
            let l = live(pods);
            pods.len() == N
                && l.len() == N
                && l.iter()
                    .all(|p| root_disk(p) == format!("localhost:5000/compute:{tag}"))
        }
    };
    wait_list_for(
        limit,
        e.pods.clone(),
        watcher::Config::default(),
        "200 pods on :1",
        on_image("1"),
    )
    .await;
    let settled = |tag: &'static str| {
        move |vms: &[Arc<VirtualMachine>]| {
            vms.len() == N
                && vms.iter().all(|v| {
                    let s = v.status.as_ref();
                    resolved(v, "rootDisk").and_then(|r| r.resolved.as_deref())
                        == Some(&format!("localhost:5000/compute:{tag}"))
                        && s.and_then(|s| s.pod_name.as_ref()).is_some()
                })
        }
    };
    wait_list_for(
        limit,
        e.vms.clone(),
        watcher::Config::default(),
        "200 VMs settled on :1",
        settled("1"),
    )
    .await;
    wait_value(op.progress.status_covers(), "statuses settled", |n| {
        *n >= *op.progress.reconciles().borrow()
    })
    .await;

    let before = op.requests.snapshot();
    let started = Instant::now();
    let patch = json!({"spec": {"rules": tilt_rule("localhost:5000/compute:2")}});
    e.mappings
        .patch("tilt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_list_for(
        limit,
        e.pods.clone(),
        watcher::Config::default(),
        "200 pods on :2",
        on_image("2"),
    )
    .await;
    wait_list_for(
        limit,
        e.vms.clone(),
        watcher::Config::default(),
        "200 VMs settled on :2",
        settled("2"),
    )
    .await;
    let elapsed = started.elapsed();
    let after = op.requests.snapshot();
    let delta = |pred: &dyn Fn(&imagemap::api_requests::RequestKey) -> bool| -> u64 {
        after
            .iter()
            .filter(|(k, _)| pred(k))
            .map(|(k, n)| n - before.get(k).copied().unwrap_or(0))
            .sum()
    };
    let writes = delta(&|k| {
        k.is_write() && (k.resource == "pods" || k.resource == "virtualmachines/status")
    });
    let event_writes = delta(&|k| k.is_write() && k.resource == "events");
    let mapping_writes = delta(&|k| k.is_write() && k.resource.ends_with("imagemappings/status"));
    let lists = delta(&|k| k.verb == "list");
    let gets = delta(&|k| k.verb == "get");
    let pod_writes = |verb: &str| delta(&|k| k.verb == verb && k.resource == "pods");
    #[allow(clippy::cast_precision_loss)] // A ratio of small counts for the report.
    let per_vm = |n: u64| n as f64 / N as f64;
    println!(
        "fan-out: {N} liveReload VMs converged in {:.2}s with {writes} writes to pods and VMs ({:.2} per VM), {event_writes} event writes, {mapping_writes} mapping status writes, {lists} LISTs; all requests: {:?}",
        elapsed.as_secs_f64(),
        per_vm(writes),
        after
            .iter()
            .map(|(k, n)| (k.to_string(), n - before.get(k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect::<Vec<_>>()
    );
    assert!(writes <= 3 * N as u64, "{writes} writes for {N} VMs");
    assert_eq!(pod_writes("create"), N as u64, "one pod create per VM");
    assert_eq!(pod_writes("delete"), N as u64, "one pod delete per VM");
    assert_eq!(gets, 0, "no GET during the fan-out");
    let metrics = op.observers.metrics.render();
    assert!(
        metrics.contains(&format!("imagemap_pod_recreations_total {N}")),
        "{metrics}"
    );
    assert_eq!(lists, 0, "no LIST during the fan-out");
    assert_eq!(
        op.requests.unbounded_lists(),
        std::collections::BTreeMap::new(),
        "every LIST the operator sent since it started carried a limit of at most 500"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn only_the_leader_acts_and_another_takes_over() {
    let e = env("op-leader").await;
    let election = |identity: &str| imagemap::operator::LeaderElection {
        lease_name: "imagemap".into(),
        namespace: e.ns.clone(),
        identity: identity.into(),
        timing: imagemap::operator::LeaseTiming::for_duration(Duration::from_secs(4)),
    };
    let (mut first, first_stop) = Operator::start_elected(&[&e.ns], election("first")).await;
    e.add_vm("one", false, "Always", COMPUTE).await;
    wait_single_pod(&e, "one", COMPUTE_NORMALIZED).await;
    let (mut second, _second_stop) = Operator::start_elected(&[&e.ns], election("second")).await;
    e.add_vm("two", false, "Always", COMPUTE).await;
    wait_single_pod(&e, "two", COMPUTE_NORMALIZED).await;
    let acted = |op: &Operator| {
        op.requests.count(|k| {
            k.is_write() && (k.resource == "pods" || k.resource == "virtualmachines/status")
        })
    };
    assert!(acted(&first) > 0);
    assert_eq!(acted(&second), 0, "the follower wrote");

    // A graceful stop releases the Lease: the follower takes over at once.
    let started = Instant::now();
    first_stop.send(()).unwrap();
    first.finished().await;
    e.add_vm("three", false, "Always", COMPUTE).await;
    wait_single_pod(&e, "three", COMPUTE_NORMALIZED).await;
    let graceful = started.elapsed();
    assert!(acted(&second) > 0);
    assert!(
        graceful < Duration::from_secs(4),
        "takeover after a graceful stop took {graceful:?}, as long as an expiry"
    );

    // The leader stopped abruptly (its task aborted): a new instance takes over within the
    // lease duration.
    let (third, _third_stop) = Operator::start_elected(&[&e.ns], election("third")).await;
    let started = Instant::now();
    second.handle_abort();
    e.add_vm("four", false, "Always", COMPUTE).await;
    wait_single_pod(&e, "four", COMPUTE_NORMALIZED).await;
    let crashed = started.elapsed();
    assert!(acted(&third) > 0);
    assert!(
        // The lease duration, a follower's next look, and the pod's creation.
        crashed <= Duration::from_secs(4 + 5),
        "takeover took {crashed:?}"
    );
    println!(
        "leader takeover: {:.2}s after a graceful stop, {:.2}s after a crash (lease 4s)",
        graceful.as_secs_f64(),
        crashed.as_secs_f64()
    );
    for name in ["one", "two", "three", "four"] {
        let pods = e
            .pods
            .list(&ListParams::default().labels(&format!("{VM_LABEL}={name}")))
            .await
            .unwrap();
        assert_eq!(pods.items.len(), 1, "{name}");
    }
    second.finished().await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_pod_the_api_server_refuses_is_reported_and_tried_again() {
    let e = env("op-refused").await;
    // Pod Security admission, as a cluster administrator sets it for the namespace.
    let namespaces: Api<Namespace> = Api::all(e.client.clone());
    let enforce = |level: &str| json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}});
    namespaces
        .patch(
            &e.ns,
            &PatchParams::default(),
            &Patch::Merge(&enforce("restricted")),
        )
        .await
        .unwrap();
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    let mut priv_vm = vm("priv", true, "Always", COMPUTE);
    priv_vm.spec.extra_init_containers = vec![
        serde_json::from_value(json!({
            "name": "setup", "image": "busybox:1.36",
            "securityContext": {"privileged": true}
        }))
        .unwrap(),
    ];
    e.vms
        .create(&PostParams::default(), &priv_vm)
        .await
        .unwrap();

    // The VM says why it has no pod, with the API server's words, and a Warning says so.
    let refused = wait_for(e.vms.clone(), "priv", |vm: Option<&VirtualMachine>| {
        vm.and_then(|vm| condition(vm, "Ready"))
            .is_some_and(|(status, reason, _)| status == "False" && reason == "PodCreateFailed")
    })
    .await;
    let (_, _, message) = condition(&refused, "Ready").unwrap();
    assert!(
        message.contains("PodSecurity") && message.contains("privileged"),
        "{message}"
    );
    assert_eq!(kstatus(&[&refused]), ["Failed"]);
    let warning = wait_event(&e, "priv", "PodCreateFailed").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        e.pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The administrator allows privileged pods there: the next attempt creates the pod.
    namespaces
        .patch(
            &e.ns,
            &PatchParams::default(),
            &Patch::Merge(&enforce("privileged")),
        )
        .await
        .unwrap();
    wait_single_pod(&e, "priv", COMPUTE_NORMALIZED).await;
    let running = wait_for(e.vms.clone(), "priv", |vm: Option<&VirtualMachine>| {
        vm.and_then(|vm| condition(vm, "Ready"))
            .is_some_and(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(kstatus(&[&running]), ["Current"]);
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_replacement_the_recreation_budget_holds_back_is_reported_not_announced() {
    let e = env("op-budget").await;
    let options = Options {
        max_recreates_per_minute: 1,
        ..Options::default()
    };
    let _op = Operator::start(&[&e.ns], options).await;
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:1"))
        .await;
    for name in ["a", "b"] {
        e.add_vm(name, true, "Always", COMPUTE).await;
    }
    let mut before = BTreeMap::new();
    for name in ["a", "b"] {
        let pod = wait_single_pod(&e, name, "localhost:5000/compute:1").await;
        before.insert(name, pod.name_any());
    }
    // Two recreations wanted, one allowed this minute: one VM waits, and says so.
    e.mappings
        .patch(
            "tilt",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"rules": tilt_rule("localhost:5000/compute:2")}})),
        )
        .await
        .unwrap();
    let vms = wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        "one VM held back by the budget",
        |vms| {
            vms.iter().any(|v| {
                condition(v, "ImagesCurrent").is_some_and(|c| c.1 == "RecreationThrottled")
            })
        },
    )
    .await;
    let held = vms
        .iter()
        .find(|v| condition(v, "ImagesCurrent").is_some_and(|c| c.1 == "RecreationThrottled"))
        .unwrap();
    let name = held.name_any();
    assert_eq!(kstatus(&[held.as_ref()]), ["InProgress"]);
    let (status, _, message) = condition(held, "ImagesCurrent").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains("compute:1 → localhost:5000/compute:2"),
        "{message}"
    );
    // The status still names the old pod, which still runs.
    let old = &before[name.as_str()];
    assert_eq!(held.status.as_ref().unwrap().pod_name.as_ref(), Some(old));
    let pod = e.pods.get(old).await.unwrap();
    assert!(pod.metadata.deletion_timestamp.is_none());
    // The other VM was replaced and announced; the held one was not announced.
    let other = if name == "a" { "b" } else { "a" };
    wait_event(&e, other, "PodRecreated").await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let announced = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|ev| {
            ev.involved_object.name.as_deref() == Some(name.as_str())
                && ev.reason.as_deref() == Some("PodRecreated")
        });
    assert!(
        !announced,
        "{name} announced a recreation that did not happen"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_namespace_churning_its_mappings_leaves_recreation_budget_to_another() {
    let churn = env("op-share-churn").await;
    let quiet = env("op-share-quiet").await;
    let options = Options {
        max_recreates_per_minute: 2,
        ..Options::default()
    };
    let _op = Operator::start(&[&churn.ns, &quiet.ns], options).await;
    let point = |e: &Env, to: &str| {
        let (mappings, to) = (e.mappings.clone(), to.to_string());
        async move {
            mappings
                .patch(
                    "tilt",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"rules": tilt_rule(&to)}})),
                )
                .await
                .unwrap();
        }
    };
    for e in [&churn, &quiet] {
        e.add_mapping("tilt", tilt_rule("localhost:5000/compute:1"))
            .await;
    }
    for name in ["a", "b"] {
        churn.add_vm(name, true, "Always", COMPUTE).await;
        wait_single_pod(&churn, name, "localhost:5000/compute:1").await;
    }
    quiet.add_vm("q", true, "Always", COMPUTE).await;
    wait_single_pod(&quiet, "q", "localhost:5000/compute:1").await;
    // The churning namespace wants two recreations; alone, it may take half of the two.
    point(&churn, "localhost:5000/compute:2").await;
    wait_list(
        churn.vms.clone(),
        watcher::Config::default(),
        "one churning VM held back",
        |vms| {
            vms.iter().any(|v| {
                condition(v, "ImagesCurrent").is_some_and(|c| c.1 == "RecreationThrottled")
            })
        },
    )
    .await;
    // The other namespace's replacement finds the rest at once, not a minute later.
    let started = std::time::Instant::now();
    point(&quiet, "localhost:5000/compute:2").await;
    wait_single_pod(&quiet, "q", "localhost:5000/compute:2").await;
    let took = started.elapsed();
    let still_held = churn
        .vms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|v| condition(v, "ImagesCurrent").is_some_and(|c| c.1 == "RecreationThrottled"));
    println!(
        "beside a namespace holding its share of a budget of 2, another's replacement after {took:.2?}"
    );
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    assert!(still_held, "the churning namespace is still over its share");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_runner_pod_that_lost_its_label_gets_it_back_and_no_twin() {
    let e = env("op-unlabelled").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    let pod = wait_single_pod(&e, "dev", COMPUTE_NORMALIZED).await;
    // Someone removes the label the operator selects its pods by.
    e.pods
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {VM_LABEL: null}}})),
        )
        .await
        .unwrap();
    // The operator recognises its pod by the owner reference and puts the label back.
    let back = wait_single_pod(&e, "dev", COMPUTE_NORMALIZED).await;
    assert_eq!(back.uid(), pod.uid());
    let all = e.pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        all.len(),
        1,
        "{:?}",
        all.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    // And a change of images still replaces it with exactly one pod.
    e.add_mapping("tilt", tilt_rule("localhost:5000/compute:1"))
        .await;
    let replaced = wait_single_pod(&e, "dev", "localhost:5000/compute:1").await;
    assert_ne!(replaced.uid(), pod.uid());
}
