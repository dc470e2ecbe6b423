//! Pods admission did not map, found by the leader's paged passes over the pods and counted
//! in the mapping's status (`unmappedPods`), against the real control plane: pods created
//! before the operator ran are found at its start; after a change of rules, the namespaces
//! the change reaches are counted again, at most once a minute each (20 s here); mapped
//! pods are counted (`affectedPods`). Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::time::{Duration, Instant};

use imagemap::core::api::ImageMappingStatus;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::vms::{Env, env};
use support::webhooks::WebhookOperator;

async fn create_pod(pods: &Api<Pod>, name: &str, image: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        // No scheduler takes it: creating it is all this test needs.
        "spec": {"schedulerName": "nobody", "containers": [{"name": "app", "image": image}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

/// Waits until the status of mapping `name` satisfies `pred`; that status.
async fn status(
    e: &Env,
    name: &str,
    pred: impl Fn(&ImageMappingStatus) -> bool,
) -> ImageMappingStatus {
    let deadline = Instant::now() + Duration::from_mins(2);
    loop {
        let status = e
            .mappings
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|m| m.status)
            .unwrap_or_default();
        if pred(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the status of {name}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn pods_admission_did_not_map_are_found_and_counted() {
    let e = env("unmapped").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
    )
    .await;
    // Created while no webhook answers: unmapped.
    for i in 0..3 {
        create_pod(&e.pods, &format!("early-{i}"), "nginx:1.27").await;
    }
    create_pod(&e.pods, "redis", "redis:7").await;
    // Rule changes bring a namespace's pass at most every 20 s here (a minute by default);
    // every namespace is counted at start and then every 5 minutes (the default).
    let started = Instant::now();
    let op = WebhookOperator::start(&e.ns, "nginx", &["--pod-scan-namespace-seconds", "20"]).await;
    // The pass at start finds the three, and the status says when it counted them.
    let s = status(&e, "mirror", |s| s.unmapped_pods == Some(3)).await;
    assert!(s.pods_counted_at.is_some(), "{s:?}");
    println!(
        "3 pods created before the operator counted unmappedPods within {:?} of its start",
        started.elapsed()
    );
    // A pod created now is mapped: counted as affected at the namespace's next pass.
    create_pod(&e.pods, "late", "nginx:1.27").await;
    // A new rule for redis: the namespace was counted less than 20 s ago (at the start), so
    // its next pass waits for its 20 s; then the redis pod is found, and the late pod
    // counted.
    let changed = Instant::now();
    assert!(started.elapsed() < Duration::from_secs(20), "{started:?}");
    e.add_mapping(
        "redis",
        json!([{"match": {"repository": "redis"}, "to": "mirror.io/redis"}]),
    )
    .await;
    status(&e, "redis", |s| s.unmapped_pods == Some(1)).await;
    let took = changed.elapsed();
    println!(
        "after a new rule, its namespace was counted again in {took:?}, {:?} after the operator started",
        started.elapsed()
    );
    assert!(started.elapsed() >= Duration::from_secs(20), "{took:?}");
    assert!(took < Duration::from_secs(40), "{took:?}");
    let s = status(&e, "mirror", |s| s.affected_pods == Some(1)).await;
    assert_eq!(s.rules[0].affected_pods, 1);
    assert_eq!(s.unmapped_pods, Some(3));
    // Deleting the early pods: the next pass forgets them (the periodic one is 5 minutes
    // away; a change of the rule reaching the namespace counts it again).
    for i in 0..3 {
        e.pods
            .delete(&format!("early-{i}"), &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }
    e.mappings
        .patch(
            "mirror",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"priority": 1}})),
        )
        .await
        .unwrap();
    status(&e, "mirror", |s| s.unmapped_pods.is_none()).await;
    // Three passes, the watches' lists: every LIST carried a limit of at most 500.
    assert!(
        op.process
            .metric("imagemap_api_unbounded_lists_total")
            .abs()
            < f64::EPSILON,
        "a LIST without a bounded limit: {}",
        op.process.metric("imagemap_api_unbounded_lists_total")
    );
}
