//! The test bed runs the workload controllers live reload for workloads needs: a StatefulSet
//! and a DaemonSet get their pods on the kwok nodes, and the disruption controller computes a
//! PodDisruptionBudget's allowed disruptions (which the Eviction API honours; without it every
//! eviction under a budget is refused). Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code

mod support;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::*;

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn statefulsets_daemonsets_and_pod_disruption_budgets_work_in_the_test_bed() {
    let client = client().await;
    let ns = fresh_namespace(&client, "workloads").await;
    let labels = json!({"app": "web"});
    let template = json!({
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    });
    let statefulset: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": labels},
                 "template": template},
    }))
    .unwrap();
    Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &statefulset)
        .await
        .unwrap();
    let daemon_labels = json!({"app": "agent"});
    let daemonset: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": daemon_labels},
                 "template": {"metadata": {"labels": daemon_labels},
                              "spec": {"containers": [{"name": "agent", "image": "busybox"}]}}},
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &daemonset)
        .await
        .unwrap();
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }))
    .unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    // Two StatefulSet pods; one DaemonSet pod per node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    wait_for(budgets.clone(), "web", |b: Option<&PodDisruptionBudget>| {
        b.and_then(|b| b.status.as_ref())
            .is_some_and(|s| s.expected_pods == Some(2) && s.disruptions_allowed == Some(1))
    })
    .await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let agents = pods
            .list(&ListParams::default().labels("app=agent"))
            .await
            .unwrap()
            .items
            .len();
        if agents == nodes {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{agents} DaemonSet pods on {nodes} nodes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
