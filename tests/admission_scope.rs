//! What the webhook is never sent, against the real control plane: an operator acting in
//! every namespace registers its webhook, and a pod created in `kube-system` never reaches
//! it (the configuration's namespace selector), while a pod of an ordinary namespace does.
//! Alone in its test binary: a webhook for every namespace sees every other test's pods.
//! Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::vms::env;
use support::webhooks::{WebhookOperator, pod};

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_kube_system_pod_is_never_sent() {
    let e = env("admission-scope").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    // Every namespace: no --namespace.
    let op = WebhookOperator::launch(&e.ns, &[]).await;
    op.wait_sent(&e.ns, "busybox").await;
    let sent = |op: &WebhookOperator| op.process.metric("imagemap_admissions_total");
    let before = sent(&op);
    let system: Api<Pod> = Api::namespaced(e.client.clone(), "kube-system");
    let name = format!("never-sent-{}", std::process::id());
    let created = system
        .create(&PostParams::default(), &pod(&name, "busybox"))
        .await
        .unwrap();
    assert_eq!(
        created.spec.unwrap().containers[0].image.as_deref(),
        Some("busybox")
    );
    assert!(
        (sent(&op) - before).abs() < f64::EPSILON,
        "the webhook was sent a kube-system pod"
    );
    // An ordinary namespace's pod is sent, and counted.
    let mapped = e
        .pods
        .create(&PostParams::default(), &pod("sent", "busybox"))
        .await
        .unwrap();
    assert_eq!(
        mapped.spec.unwrap().containers[0].image.as_deref(),
        Some("mirror.io/busybox")
    );
    assert!((sent(&op) - before - 1.0).abs() < f64::EPSILON);
    system
        .delete(&name, &DeleteParams::background().grace_period(0))
        .await
        .unwrap();
}
