//! Evidence for "gone", on the real control plane: the operator never takes a pod for gone
//! (and starts its replacement) on less than evidence — not a pod object removed while a
//! kubelet may still run it, not a pod missing from a label-selected cache, not a mapping it
//! cannot read, not a cache that has not caught up with its own deletion. Run with
//! `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::Instant;

use futures::StreamExt;
use imagemap::core::api::VirtualMachine;
use imagemap::operator::Options;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::fault_proxy::FaultProxy;
use support::vms::*;
use support::*;

fn image(i: usize) -> String {
    format!("localhost:5000/compute:tilt-{i}")
}

async fn point_mapping_at(e: &Env, to: &str) {
    let patch = json!({"spec": {"rules": tilt_rule(to)}});
    e.mappings
        .patch("tilt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Every pod of the namespace, labelled or not.
async fn all_pods(e: &Env) -> Vec<Pod> {
    e.pods.list(&ListParams::default()).await.unwrap().items
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_vm_asking_for_no_grace_period_is_replaced_only_once_its_kubelet_let_go() {
    let e = env("evidence-grace").await;
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    let mut live = vm("live", true, "Always", COMPUTE);
    live.spec.termination_grace_period_seconds = Some(0);
    e.vms.create(&PostParams::default(), &live).await.unwrap();
    let old = wait_single_pod(&e, "live", &image(0)).await;
    assert_eq!(
        old.spec.as_ref().unwrap().termination_grace_period_seconds,
        Some(1),
        "a runner pod is given a grace period of at least 1 s"
    );
    // Every event of the VM's pods, in order, with when it arrived.
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&events);
    let pods = e.pods.clone();
    // The watch has listed before the mapping changes, so the old pod's terminating update
    // arrives as an update, never folded into the initial list.
    let (listed, has_listed) = tokio::sync::oneshot::channel();
    let watching = tokio::spawn(async move {
        let mut stream = watcher(pods, pods_of("live")).boxed();
        let mut listed = Some(listed);
        while let Some(Ok(event)) = stream.next().await {
            if matches!(event, watcher::Event::InitDone)
                && let Some(tx) = listed.take()
            {
                let _ = tx.send(());
            }
            seen.lock().unwrap().push((Instant::now(), event));
        }
    });
    has_listed.await.unwrap();
    point_mapping_at(&e, &image(1)).await;
    let new = wait_single_pod(&e, "live", &image(1)).await;
    watching.abort();
    let events = events.lock().unwrap();
    let old_name = old.name_any();
    let terminating = events.iter().find_map(|(at, ev)| match ev {
        watcher::Event::Apply(p) if p.name_any() == old_name => p
            .metadata
            .deletion_grace_period_seconds
            .map(|grace| (*at, grace)),
        _ => None,
    });
    let gone = events.iter().find_map(|(at, ev)| match ev {
        watcher::Event::Delete(p) if p.name_any() == old_name => Some(*at),
        _ => None,
    });
    let created = events.iter().find_map(|(at, ev)| match ev {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p)
            if p.name_any() == new.name_any() =>
        {
            Some(*at)
        }
        _ => None,
    });
    let (terminating_at, grace) =
        terminating.expect("the old pod terminated (it was not removed at once)");
    let (gone, created) = (
        gone.expect("the old pod went"),
        created.expect("the new pod came"),
    );
    println!(
        "grace period 0 asked: the old pod terminated with grace {grace} s, went {:.2} s later; the new pod came {:.2} s after it went",
        (gone - terminating_at).as_secs_f64(),
        (created - gone).as_secs_f64()
    );
    assert!(grace >= 1);
    assert!(created > gone, "the new pod only once the old one is gone");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_pod_that_lost_its_label_while_no_operator_ran_gets_it_back_not_a_twin() {
    let e = env("evidence-label").await;
    let first = Operator::start(&[&e.ns], Options::default()).await;
    e.add_vm("vm", false, "Always", COMPUTE).await;
    let pod = wait_single_pod(&e, "vm", COMPUTE_NORMALIZED).await;
    wait_phase(&e, "vm", imagemap::core::api::VmPhase::Running).await;
    // The operator stops (a crash, an upgrade); meanwhile someone strips the pod's label.
    drop(first);
    e.pods
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"labels": {imagemap::core::runner_pod::VM_LABEL: null}}}),
            ),
        )
        .await
        .unwrap();
    // A new operator's label-selected cache never saw that pod: it looks it up by the name
    // the VM's status gives, and puts the label back.
    let second = Operator::start(&[&e.ns], Options::default()).await;
    let back = wait_single_pod(&e, "vm", COMPUTE_NORMALIZED).await;
    assert_eq!(back.uid(), pod.uid(), "the same pod, labelled again");
    // Looked at again with the pod back in the cache: still one pod.
    let reconciles = second.progress.reconciles();
    let at = *reconciles.borrow();
    e.vms
        .patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .unwrap();
    wait_value(reconciles, "a reconcile with the pod back", |n| *n > at).await;
    let pods = all_pods(&e).await;
    assert_eq!(
        pods.len(),
        1,
        "no twin: {:?}",
        pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    let vm = e.vms.get("vm").await.unwrap();
    let status = vm.status.unwrap();
    assert_eq!(status.pod_name.as_deref(), Some(pod.name_any().as_str()));
    assert_eq!(status.restart_count, 0);
    assert_eq!(status.phase, Some(imagemap::core::api::VmPhase::Running));
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_replacement_is_issued_once_while_the_pod_watch_lags() {
    let e = env("evidence-lag").await;
    let proxy = FaultProxy::start(e.client.clone()).await;
    let base = kube::Config::infer().await.unwrap();
    let op = Operator::start_with(proxy.config(&base), &[&e.ns], Options::default());
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    let old = wait_single_pod(&e, "dev", &image(0)).await;
    let never_two = NeverTwoLivePods::watch(&e);

    // The pod watch delivers nothing while the replacement is under way.
    proxy.stall_watches("/pods");
    let changed = Instant::now();
    point_mapping_at(&e, &image(1)).await;
    let pod_path = format!("/pods/{}", old.name_any());
    let first_delete = proxy
        .wait_seen("the replacement's delete", |s| {
            s.at > changed && s.method == http::Method::DELETE && s.target.contains(&pod_path)
        })
        .await;
    // The operator looks at the VM again and again (its own rechecks) while the cache
    // still shows the old pod live.
    let reconciles = op.progress.reconciles();
    let after_delete = *reconciles.borrow();
    wait_value(reconciles, "three more reconciles during the lag", |n| {
        *n >= after_delete + 3
    })
    .await;
    let deletes = proxy
        .seen()
        .iter()
        .filter(|s| {
            s.at >= first_delete.at
                && s.method == http::Method::DELETE
                && s.target.contains(&pod_path)
        })
        .count();
    let recreations = op
        .observers
        .metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix("imagemap_pod_recreations_total "))
        .map(|v| v.trim().parse::<f64>().unwrap())
        .unwrap();
    proxy.heal();
    wait_single_pod(&e, "dev", &image(1)).await;
    never_two.check().await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    wait_list(
        events.clone(),
        watcher::Config::default(),
        "PodRecreated",
        |evs| {
            evs.iter()
                .any(|ev| ev.reason.as_deref() == Some("PodRecreated"))
        },
    )
    .await;
    // Queued Events go out once reconciles are idle: after one more, any duplicate is in.
    let reconciles = op.progress.reconciles();
    let at = *reconciles.borrow();
    e.vms
        .patch(
            "dev",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .unwrap();
    wait_value(reconciles, "a reconcile after the replacement", |n| *n > at).await;
    let recreated = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|ev| ev.reason.as_deref() == Some("PodRecreated"))
        .count();
    println!(
        "pod watch stalled through a replacement: {deletes} DELETE, {recreations} recreation counted, {recreated} PodRecreated Event"
    );
    assert_eq!(deletes, 1);
    assert!((recreations - 1.0).abs() < f64::EPSILON, "{recreations}");
    assert_eq!(recreated, 1);
}

/// Loosens (or restores) the ImageMapping CRD as an older CRD might have it: `priority`
/// without a maximum or a format, so the API server stores values the operator cannot read.
async fn loosen_mapping_crd(client: &kube::Client, loose: bool) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "imagemappings.imagemap.dev";
    let current = crds.get(name).await.unwrap();
    let shipped = imagemap::core::crd_yaml::all()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap();
    let mut value = serde_json::to_value(&shipped).unwrap();
    if loose {
        let priority = &mut value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["priority"];
        let priority = priority.as_object_mut().unwrap();
        priority.remove("maximum");
        priority.remove("format");
    }
    let mut crd: CustomResourceDefinition = serde_json::from_value(value).unwrap();
    crd.metadata.resource_version = current.metadata.resource_version;
    crds.replace(name, &PostParams::default(), &crd)
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn an_unreadable_mapping_never_replaces_a_pod() {
    let e = env("evidence-unreadable").await;
    let op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    let pod = wait_single_pod(&e, "dev", &image(0)).await;
    let never_two = NeverTwoLivePods::watch(&e);

    // The mapping becomes unreadable (written under a looser CRD), with another target.
    loosen_mapping_crd(&e.client, true).await;
    let unreadable =
        json!({"spec": {"priority": 5_000_000_000_i64, "rules": tilt_rule(&image(1))}});
    // The API server takes a little while to serve the loosened schema.
    let deadline = Instant::now() + WAIT;
    // (Untyped: what the API server answers is unreadable to the typed client too.)
    let untyped: Api<kube::api::DynamicObject> = Api::namespaced_with(
        e.client.clone(),
        &e.ns,
        &kube::api::ApiResource::erase::<imagemap::core::api::ImageMapping>(&()),
    );
    while let Err(err) = untyped
        .patch("tilt", &PatchParams::default(), &Patch::Merge(&unreadable))
        .await
    {
        assert!(
            Instant::now() < deadline,
            "the loosened CRD never took: {err}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    wait_list(
        events.clone(),
        watcher::Config::default(),
        "InvalidObject on tilt",
        |evs| {
            evs.iter().any(|ev| {
                ev.reason.as_deref() == Some("InvalidObject")
                    && ev.involved_object.name.as_deref() == Some("tilt")
            })
        },
    )
    .await;
    // Its last readable rules stay in force: the pod runs on.
    let reconciles = op.progress.reconciles();
    let at = *reconciles.borrow();
    e.vms
        .patch(
            "dev",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .unwrap();
    wait_value(
        reconciles,
        "a reconcile after the mapping became unreadable",
        |n| *n > at,
    )
    .await;
    let same = e.pods.get(&pod.name_any()).await.unwrap();
    assert_eq!(same.uid(), pod.uid());
    assert!(same.metadata.deletion_timestamp.is_none());
    assert_eq!(root_disk(&same), image(0));

    // A new operator process, which never read it: its VMs keep their pods and say why.
    drop(op);
    let second = Operator::start(&[&e.ns], Options::default()).await;
    let vms = wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        "dev says why",
        |vms| {
            vms.iter().any(|v| {
                condition(v, "ImagesResolved").is_some_and(|c| {
                    c.0 == "Unknown" && c.1 == "MappingUnreadable" && c.2.contains("ImageMapping")
                })
            })
        },
    )
    .await;
    let held: &VirtualMachine = &vms[0];
    assert_eq!(kstatus(&[held]), ["Failed"]);
    let same = e.pods.get(&pod.name_any()).await.unwrap();
    assert_eq!(same.uid(), pod.uid(), "kept while its rules are unknown");
    assert!(same.metadata.deletion_timestamp.is_none());

    // Readable again: the new target is followed (liveReload).
    e.mappings
        .patch(
            "tilt",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"priority": 1}})),
        )
        .await
        .unwrap();
    loosen_mapping_crd(&e.client, false).await;
    wait_single_pod(&e, "dev", &image(1)).await;
    never_two.check().await;
    drop(second);
}
