//! Live reload for workloads against the real control plane (the Deployment, ReplicaSet,
//! StatefulSet, DaemonSet and disruption controllers, kwok nodes): `imagemap run` serves its
//! webhook, and a rule change rolls the pods labelled `imagemap.dev/live-reload: "true"` by
//! eviction, one at a time per workload, with no spec written; PodDisruptionBudgets hold; a
//! pod nothing would recreate is told `RestartRequired` and stays. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
#![allow(clippy::too_many_lines)] // scenarios read top to bottom
#![allow(clippy::float_cmp)] // counts read from /metrics are whole numbers

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use support::vms::env;
use support::webhooks::WebhookOperator;
use support::*;

const LIVE: &str = "imagemap.dev/live-reload";

/// A pod template of `app` labelled for live reload, running `image`.
fn template(app: &str, image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app, LIVE: "true"}},
        "spec": {"containers": [{"name": "app", "image": image}]},
    })
}

fn image(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until `n` pods of `app` exist, none going, all Ready and running `want`.
async fn pods_run(pods: &Api<Pod>, app: &str, n: usize, want: &str) -> Vec<Arc<Pod>> {
    wait_list_for(
        Duration::from_mins(2),
        pods.clone(),
        watcher::Config::default().labels(&format!("app={app}")),
        &format!("{n} Ready pods of {app} running {want}"),
        |p| p.len() == n && p.iter().all(|p| ready(p) && image(p) == want),
    )
    .await
}

/// The fewest Ready pods of `app` seen at once from now on (counting from the first time
/// `n` were Ready).
fn fewest_ready(pods: &Api<Pod>, app: &str, n: usize) -> Arc<AtomicUsize> {
    let fewest = Arc::new(AtomicUsize::new(usize::MAX));
    let seen = Arc::clone(&fewest);
    let (reader, writer) = reflector::store();
    let events = watcher(
        pods.clone(),
        watcher::Config::default().labels(&format!("app={app}")),
    )
    .default_backoff()
    .reflect(writer);
    tokio::spawn(async move {
        let mut events = events.boxed();
        let mut counting = false;
        while let Some(event) = events.next().await {
            if event.is_err() {
                continue;
            }
            let now = reader.state().iter().filter(|p| ready(p)).count();
            counting |= now >= n;
            if counting {
                seen.fetch_min(now, Ordering::Relaxed);
            }
        }
    });
    fewest
}

/// The reasons of the Events on the object `name`.
async fn reasons(events: &Api<Event>, name: &str) -> Vec<(String, String)> {
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Waits until the object `name` has an Event with `reason`; its message.
async fn told(events: &Api<Event>, name: &str, reason: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_mins(2);
    loop {
        if let Some((_, message)) = reasons(events, name)
            .await
            .into_iter()
            .find(|(r, _)| r == reason)
        {
            return message;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {reason} Event on {name}: {:?}",
            reasons(events, name).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Changes the mapping `mirror` to one rule: nginx → `to`.
async fn nginx_to(e: &support::vms::Env, to: &str) {
    e.mappings
        .patch(
            "mirror",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"rules": [
                {"match": {"repository": "nginx"}, "to": to}]}})),
        )
        .await
        .unwrap();
}

/// Creates the Deployment `web` of `replicas` live-reload pods running `image`; its API.
async fn deploy(e: &support::vms::Env, replicas: u32, image: &str) -> Api<Deployment> {
    let deployments: Api<Deployment> = Api::namespaced(e.client.clone(), &e.ns);
    create(
        &deployments,
        json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": template("web", image)},
        }),
    )
    .await;
    deployments
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_deployment_under_a_budget_rolls_on_a_mapping_change_and_its_spec_stays() {
    let e = env("reload-deploy").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
    )
    .await;
    // The leader counts the pods every 2 s here (5 minutes by default): the status follows
    // the roll.
    let op = WebhookOperator::start(&e.ns, "nginx", &["--pod-count-seconds", "2"]).await;
    let deployments = deploy(&e, 3, "nginx:1.27").await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(e.client.clone(), &e.ns);
    create(
        &budgets,
        json!({"metadata": {"name": "web"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    // A labelled pod nothing recreates.
    create(
        &e.pods,
        json!({"metadata": {"name": "lonely", "labels": {"app": "lonely", LIVE: "true"}},
               "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}),
    )
    .await;
    // And one a custom resource controls (the ImageMapping itself: nothing recreates it).
    let owner = e.mappings.get("mirror").await.unwrap();
    create(
        &e.pods,
        json!({"metadata": {"name": "owned", "labels": {"app": "owned", LIVE: "true"},
                            "ownerReferences": [{"apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
                                                 "name": "mirror", "uid": owner.metadata.uid, "controller": true}]},
               "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}),
    )
    .await;
    pods_run(&e.pods, "web", 3, "mirror.io/nginx:1.27").await;
    let lonely = pods_run(&e.pods, "lonely", 1, "mirror.io/nginx:1.27").await;
    let controlled = pods_run(&e.pods, "owned", 1, "mirror.io/nginx:1.27").await;
    let before = deployments.get("web").await.unwrap();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(e.client.clone(), &e.ns);
    assert_eq!(
        replica_sets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let fewest = fewest_ready(&e.pods, "web", 3);

    nginx_to(&e, "mirror2.io/nginx").await;
    let rolled = pods_run(&e.pods, "web", 3, "mirror2.io/nginx:1.27").await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let finished = told(&events, "web", "LiveReloadFinished").await;
    let started = told(&events, "web", "LiveReloadStarted").await;
    println!("{started}\n{finished}");
    assert!(started.contains("mirror2.io/nginx:1.27"), "{started}");
    assert!(finished.contains("3 pod(s)"), "{finished}");
    // Never fewer than the budget's 2 Ready.
    let fewest = fewest.load(Ordering::Relaxed);
    assert!((2..=3).contains(&fewest), "{fewest} Ready at the fewest");
    println!("a 3-pod Deployment rolled under minAvailable 2: never fewer than {fewest} Ready");
    // No spec written: the same generation, template and one ReplicaSet.
    let after = deployments.get("web").await.unwrap();
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(
        serde_json::to_value(&after.spec.as_ref().unwrap().template).unwrap(),
        serde_json::to_value(&before.spec.as_ref().unwrap().template).unwrap()
    );
    assert_eq!(
        replica_sets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert!(rolled.iter().all(|p| {
        p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("imagemap.dev/original-images"))
    }));
    // The pod nothing recreates stays, told.
    let message = told(&events, "lonely", "RestartRequired").await;
    assert!(message.contains("mirror2.io/nginx:1.27"), "{message}");
    let still = e.pods.get("lonely").await.unwrap();
    assert_eq!(still.metadata.uid, lonely[0].metadata.uid);
    assert_eq!(image(&still), "mirror.io/nginx:1.27");
    let message = told(&events, "owned", "RestartRequired").await;
    assert!(message.contains("ImageMapping mirror"), "{message}");
    let still = e.pods.get("owned").await.unwrap();
    assert_eq!(still.metadata.uid, controlled[0].metadata.uid);
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 3.0);
    // Counted: the 3 rolled pods, the lonely and the owned one, mapped at admission and
    // decided by the rule now.
    wait_status(&e, |s| {
        s.affected_pods == Some(5) && s.rules[0].affected_pods == 5
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_statefulset_and_a_daemonset_roll() {
    let e = env("reload-sets").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    let op = WebhookOperator::start(&e.ns, "busybox", &[]).await;
    let stateful_sets: Api<StatefulSet> = Api::namespaced(e.client.clone(), &e.ns);
    create(
        &stateful_sets,
        json!({"metadata": {"name": "db"},
               "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                        "template": template("db", "busybox:1.36")}}),
    )
    .await;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(e.client.clone(), &e.ns);
    create(
        &daemon_sets,
        json!({"metadata": {"name": "agent"},
               "spec": {"selector": {"matchLabels": {"app": "agent"}},
                        "template": template("agent", "busybox:1.36")}}),
    )
    .await;
    pods_run(&e.pods, "db", 2, "mirror.io/busybox:1.36").await;
    let agents = wait_list(
        e.pods.clone(),
        watcher::Config::default().labels("app=agent"),
        "a DaemonSet pod per node",
        |p| {
            !p.is_empty()
                && p.iter()
                    .all(|p| ready(p) && image(p) == "mirror.io/busybox:1.36")
        },
    )
    .await
    .len();
    let before = (
        stateful_sets.get("db").await.unwrap().metadata.generation,
        daemon_sets.get("agent").await.unwrap().metadata.generation,
    );

    e.mappings
        .patch(
            "mirror",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"rules": [
                {"match": {"repository": "busybox"}, "to": "mirror2.io/busybox"}]}})),
        )
        .await
        .unwrap();
    pods_run(&e.pods, "db", 2, "mirror2.io/busybox:1.36").await;
    pods_run(&e.pods, "agent", agents, "mirror2.io/busybox:1.36").await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    told(&events, "db", "LiveReloadFinished").await;
    told(&events, "agent", "LiveReloadFinished").await;
    assert_eq!(
        before,
        (
            stateful_sets.get("db").await.unwrap().metadata.generation,
            daemon_sets.get("agent").await.unwrap().metadata.generation,
        )
    );
    assert_eq!(
        op.process.metric("imagemap_pods_evicted_total"),
        f64::from(u32::try_from(2 + agents).unwrap())
    );
    println!("a 2-pod StatefulSet and a {agents}-pod DaemonSet rolled");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_budget_allowing_no_disruption_holds_the_roll_until_it_allows_one() {
    let e = env("reload-held").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
    )
    .await;
    // The leader counts the pods every 2 s here (5 minutes by default): the status follows
    // the roll.
    let op = WebhookOperator::start(&e.ns, "nginx", &["--pod-count-seconds", "2"]).await;
    deploy(&e, 2, "nginx:1.27").await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(e.client.clone(), &e.ns);
    create(
        &budgets,
        json!({"metadata": {"name": "web-budget"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    let first = pods_run(&e.pods, "web", 2, "mirror.io/nginx:1.27").await;
    nginx_to(&e, "mirror2.io/nginx").await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let held = told(&events, "web", "DisruptionBudgetHolds").await;
    println!("{held}");
    assert!(held.contains("web-budget"), "{held}");
    assert!(held.contains("2 pod(s) left"), "{held}");
    // Nothing went.
    let now = e
        .pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    let uids = |pods: &[Pod]| {
        let mut uids: Vec<_> = pods.iter().map(|p| p.metadata.uid.clone()).collect();
        uids.sort();
        uids
    };
    let first: Vec<Pod> = first.iter().map(|p| (**p).clone()).collect();
    assert_eq!(uids(&now), uids(&first));
    assert!(now.iter().all(|p| p.metadata.deletion_timestamp.is_none()));
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 0.0);
    // The mapping's status counts the pods waiting and the workload rolling.
    let rolling = format!("Deployment {}/web", e.ns);
    let status = wait_status(&e, |s| s.pods_awaiting_roll == Some(2)).await;
    assert_eq!(status.rolling_workloads, [rolling]);
    assert_eq!(status.rolling_workloads_count, Some(1));
    assert_eq!(op.process.metric("imagemap_workload_rolls"), 1.0);
    // The budget allows one: the roll goes on.
    budgets
        .patch(
            "web-budget",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"minAvailable": 1}})),
        )
        .await
        .unwrap();
    pods_run(&e.pods, "web", 2, "mirror2.io/nginx:1.27").await;
    told(&events, "web", "LiveReloadFinished").await;
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 2.0);
    let status = wait_status(&e, |s| {
        s.pods_awaiting_roll.is_none() && s.affected_pods == Some(2)
    })
    .await;
    assert!(status.rolling_workloads.is_empty());
    assert_eq!(status.rules[0].affected_pods, 2);
    assert_eq!(op.process.metric("imagemap_workload_rolls"), 0.0);
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_pod_under_two_budgets_is_reported_and_stays() {
    let e = env("reload-two-budgets").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
    )
    .await;
    let op = WebhookOperator::start(&e.ns, "nginx", &[]).await;
    deploy(&e, 1, "nginx:1.27").await;
    // Two budgets, each allowing a disruption: the Eviction API refuses a pod under both
    // with a 500.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(e.client.clone(), &e.ns);
    for name in ["web-budget", "web-extra"] {
        create(
            &budgets,
            json!({"metadata": {"name": name},
                   "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
    }
    let first = pods_run(&e.pods, "web", 1, "mirror.io/nginx:1.27").await;
    let before = evictions_refused_with_500();
    nginx_to(&e, "mirror2.io/nginx").await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let refused = told(&events, "web", "EvictionRefused").await;
    println!("{refused}");
    assert!(
        refused.contains("more than one PodDisruptionBudget"),
        "{refused}"
    );
    assert!(refused.contains("1 pod(s) left"), "{refused}");
    // The pod stays, and the refusal is not tried again at once (the roller looks again
    // every second while a roll waits): the API server answered one eviction with a 500.
    let now = pods_run(&e.pods, "web", 1, "mirror.io/nginx:1.27").await;
    assert_eq!(now[0].metadata.uid, first[0].metadata.uid);
    assert!(now[0].metadata.deletion_timestamp.is_none());
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 0.0);
    assert_eq!(evictions_refused_with_500() - before, 1.0);
}

/// The evictions the API server answered with a 500 (a pod under two budgets), from its
/// `/metrics` (counted since it started); no other test makes one.
fn evictions_refused_with_500() -> f64 {
    let metrics = kubectl_ok(&["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"code="500""#)
                && l.contains(r#"subresource="eviction""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the status of the mapping `mirror` satisfies `pred`; that status.
async fn wait_status(
    e: &support::vms::Env,
    pred: impl Fn(&imagemap::core::api::ImageMappingStatus) -> bool,
) -> imagemap::core::api::ImageMappingStatus {
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    loop {
        let status = e
            .mappings
            .get("mirror")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if pred(&status) {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the mapping's status: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every pod UID of `app` seen from now on.
fn uids_seen(
    pods: &Api<Pod>,
    app: &str,
) -> Arc<std::sync::Mutex<std::collections::BTreeSet<String>>> {
    let seen = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let into = Arc::clone(&seen);
    let mut events = watcher(
        pods.clone(),
        watcher::Config::default().labels(&format!("app={app}")),
    )
    .default_backoff()
    .applied_objects()
    .boxed();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let Ok(pod) = event {
                into.lock()
                    .unwrap()
                    .insert(pod.metadata.uid.clone().unwrap_or_default());
            }
        }
    });
    seen
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_roll_cut_by_a_restart_finishes_and_a_second_restart_evicts_nothing() {
    let e = env("reload-restart").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"},
               {"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    let op = WebhookOperator::start(&e.ns, "nginx", &[]).await;
    let deployments: Api<Deployment> = Api::namespaced(e.client.clone(), &e.ns);
    // minReadySeconds makes each step last: the roll is cut in its middle.
    create(
        &deployments,
        json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 4, "minReadySeconds": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": template("web", "nginx:1.27")},
        }),
    )
    .await;
    create(
        &deployments,
        json!({
            "metadata": {"name": "canary"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "canary"}},
                     "template": template("canary", "busybox:1.36")},
        }),
    )
    .await;
    pods_run(&e.pods, "web", 4, "mirror.io/nginx:1.27").await;
    pods_run(&e.pods, "canary", 1, "mirror.io/busybox:1.36").await;
    let seen = uids_seen(&e.pods, "web");
    let rules = |nginx: &str, busybox: &str| {
        json!({"spec": {"rules": [
            {"match": {"repository": "nginx"}, "to": nginx},
            {"match": {"repository": "busybox"}, "to": busybox}]}})
    };
    e.mappings
        .patch(
            "mirror",
            &PatchParams::default(),
            &Patch::Merge(&rules("mirror2.io/nginx", "mirror.io/busybox")),
        )
        .await
        .unwrap();
    wait_until(Duration::from_mins(1), "a first eviction", || {
        op.process.metric("imagemap_pods_evicted_total") >= 1.0
    })
    .await;
    // Stopped once the first replacement was admitted (mapped) by its webhook.
    wait_until(Duration::from_mins(1), "a first replacement", || {
        seen.lock().unwrap().len() >= 5
    })
    .await;
    drop(op);
    // A new operator finishes the roll.
    let op = WebhookOperator::start(&e.ns, "nginx", &[]).await;
    let rolled = pods_run(&e.pods, "web", 4, "mirror2.io/nginx:1.27").await;
    let after_first: Vec<_> = rolled.iter().map(|p| p.metadata.uid.clone()).collect();
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    told(&events, "web", "LiveReloadFinished").await;
    // Each pod evicted once: 4 pods, 4 replacements.
    assert_eq!(seen.lock().unwrap().len(), 8, "{:?}", seen.lock().unwrap());
    drop(op);

    // A second restart: the pods are current, and nothing is evicted; a change of the
    // canary's rule shows the new leader judged every labelled pod.
    let op = WebhookOperator::start(&e.ns, "nginx", &[]).await;
    e.mappings
        .patch(
            "mirror",
            &PatchParams::default(),
            &Patch::Merge(&rules("mirror2.io/nginx", "mirror2.io/busybox")),
        )
        .await
        .unwrap();
    pods_run(&e.pods, "canary", 1, "mirror2.io/busybox:1.36").await;
    told(&events, "canary", "LiveReloadFinished").await;
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 1.0);
    let now = pods_run(&e.pods, "web", 4, "mirror2.io/nginx:1.27").await;
    let mut now: Vec<_> = now.iter().map(|p| p.metadata.uid.clone()).collect();
    let mut before = after_first;
    now.sort();
    before.sort();
    assert_eq!(now, before);
    assert_eq!(seen.lock().unwrap().len(), 8);
    println!(
        "a roll cut after its first eviction finished under a new operator; 8 pod UIDs in all; a second restart evicted nothing"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_followed_tag_pushed_rolls_the_deployment_that_follows_it() {
    let registry = support::registry::TestRegistry::start("reload-push").await;
    let host = registry.host();
    let first = registry.push("app", "dev", "build 1");
    let tag = format!("{host}/app:dev");
    let e = env("reload-push").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "example.test/app"}, "to": tag, "followTag": true}]),
    )
    .await;
    let op = WebhookOperator::start(
        &e.ns,
        "example.test/app:dev",
        &[
            "--allowed-registries",
            &host,
            "--insecure-registries",
            &host,
            "--tag-poll-interval",
            "500ms",
        ],
    )
    .await;
    // A first pod asks for the tag's check by existing (admitted unpinned); once the leader
    // verified the tag, admission pins it: a dry-run pod shows it.
    create(
        &e.pods,
        json!({"metadata": {"name": "seed"},
               "spec": {"schedulerName": "nobody", "containers": [{"name": "app", "image": "example.test/app:dev"}]}}),
    )
    .await;
    let pinned = format!("{tag}@{first}");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    loop {
        let probe: Pod = serde_json::from_value(json!({
            "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "app", "image": "example.test/app:dev"}]},
        }))
        .unwrap();
        if image(&e.pods.create(&dry_run, &probe).await.unwrap()) == pinned {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tag was never pinned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    deploy(&e, 2, "example.test/app:dev").await;
    pods_run(&e.pods, "web", 2, &pinned).await;
    let pushed = std::time::Instant::now();
    let second = registry.push("app", "dev", "build 2");
    pods_run(&e.pods, "web", 2, &format!("{tag}@{second}")).await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    told(&events, "web", "LiveReloadFinished").await;
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 2.0);
    println!(
        "a followed tag pushed: both pods of the Deployment run the new digest {:.2} s later",
        pushed.elapsed().as_secs_f64()
    );
}

/// `imagemap run` registering its webhook for `namespace` at a port nothing listens on: the
/// API server cannot reach it, and (failing open) admits every pod unmapped.
async fn unreachable_webhook(namespace: &str) -> WebhookOperator {
    let nobody = format!("https://127.0.0.1:{}", free_port());
    WebhookOperator::launch_at(namespace, &["--namespace", namespace], &nobody).await
}

/// Waits until a pod of `app`, not going, carries the unmapped replacement's annotation.
async fn marked_unmapped(pods: &Api<Pod>, app: &str) -> Pod {
    let deadline = std::time::Instant::now() + Duration::from_mins(2);
    let selector = ListParams::default().labels(&format!("app={app}"));
    loop {
        let listed = pods.list(&selector).await.unwrap().items;
        if let Some(pod) = listed.iter().find(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata.annotations.as_ref().is_some_and(|a| {
                    a.get("imagemap.dev/not-mapped-at-admission")
                        .map(String::as_str)
                        == Some("true")
                })
        }) {
            return pod.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pod of {app} marked as an unmapped replacement: {:?}",
            listed.iter().map(|p| &p.metadata).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn an_unmapped_replacement_is_evicted_by_neither_its_leader_nor_the_next() {
    let e = env("reload-unmapped").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"},
               {"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let seen = uids_seen(&e.pods, "web");
    let op = unreachable_webhook(&e.ns).await;
    // Admitted unmapped (missed): evicted; its replacement, unmapped too, is told and marked.
    let deployments = deploy(&e, 1, "nginx:1.27").await;
    let marked = marked_unmapped(&e.pods, "web").await;
    let name = marked.metadata.name.clone().unwrap();
    let message = told(&events, &name, "NotMappedAtAdmission").await;
    println!("{name}: NotMappedAtAdmission: {message}");
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 1.0);
    drop(op);

    // The next leader, which remembers nothing: a canary created now is evicted and its
    // replacement marked (so it has judged the labelled pods), and the marked pod stays.
    let op = unreachable_webhook(&e.ns).await;
    create(
        &deployments,
        json!({
            "metadata": {"name": "canary"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "canary"}},
                     "template": template("canary", "busybox:1.36")},
        }),
    )
    .await;
    marked_unmapped(&e.pods, "canary").await;
    assert_eq!(op.process.metric("imagemap_pods_evicted_total"), 1.0);
    let web = e
        .pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    let uids: Vec<_> = web
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.metadata.uid.clone())
        .collect();
    assert_eq!(uids, vec![marked.metadata.uid.clone()]);
    assert_eq!(seen.lock().unwrap().len(), 2, "{:?}", seen.lock().unwrap());
    println!(
        "an unmapped replacement marked by one leader was not evicted by the next (1 eviction each, for the missed pods)"
    );
}
