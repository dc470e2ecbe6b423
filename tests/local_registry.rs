//! The cluster's local registry as the cluster advertises it (KEP-1755: the ConfigMap
//! `kube-public/local-registry-hosting`), against a real CNCF registry and the real control
//! plane: one loopback registry known by three names — `host` (the test's and the
//! operator's), `hostFromContainerRuntime` (written into pods; no such host resolves here)
//! and `hostFromClusterNetwork` — followed with neither registry flag given. Run with
//! `scripts/test`.
//!
//! The ConfigMap is one per cluster: the tests of this file take turns (`TURN`), and each
//! deletes it when it ends, so the other test binaries never see it.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::{Duration, Instant};

use imagemap::operator::Options;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::registry::TestRegistry;
use support::vms::*;
use support::*;

/// One test at a time holds the cluster's ConfigMap.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const HELP: &str = "https://imagemap.dev/test-registry-help";

/// The ConfigMap as k3d writes it, deleted when dropped.
struct Hosting {
    api: Api<ConfigMap>,
}

impl Hosting {
    fn new(client: &kube::Client) -> Hosting {
        Hosting {
            api: Api::namespaced(client.clone(), "kube-public"),
        }
    }

    /// Advertises a registry by its three names.
    async fn advertise(&self, host: &str, runtime: &str, cluster_network: &str) {
        let document = format!(
            "host: \"{host}\"\nhostFromContainerRuntime: \"{runtime}\"\n\
             hostFromClusterNetwork: \"{cluster_network}\"\nhelp: \"{HELP}\"\n"
        );
        let configmap = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
            "data": {"localRegistryHosting.v1": document}
        });
        self.api
            .patch(
                "local-registry-hosting",
                &PatchParams::apply("local-registry-test").force(),
                &Patch::Apply(&configmap),
            )
            .await
            .unwrap();
    }
}

impl Drop for Hosting {
    fn drop(&mut self) {
        kubectl(&[
            "delete",
            "configmap",
            "local-registry-hosting",
            "-n",
            "kube-public",
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

/// A mapping that sends the compute image to `to` and follows its tag.
fn follow_rule(to: &str) -> serde_json::Value {
    json!([{"match": {"repository": "neondatabase/vm-compute-node-v17"}, "to": to, "followTag": true}])
}

/// A liveReload VM asking for the compute image whose old pods go at once (no grace
/// period), so the times measured are the operator's.
async fn add_graceless_vm(e: &Env, name: &str) {
    let mut live = vm(name, true, "Always", COMPUTE);
    live.spec.termination_grace_period_seconds = Some(0);
    e.vms
        .create(&kube::api::PostParams::default(), &live)
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_advertised_registry_is_followed_by_any_of_its_names_without_flags() {
    let _turn = TURN.lock().await;
    let e = env("local-registry").await;
    let mut registry = TestRegistry::start(&e.ns).await;
    let runtime = format!("imagemap-test-registry:{}", registry.port);
    let cluster_network = format!("imagemap-test-registry.cluster.invalid:{}", registry.port);
    let hosting = Hosting::new(&e.client);
    hosting
        .advertise(&registry.host(), &runtime, &cluster_network)
        .await;
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    // Neither --insecure-registries nor --allowed-registries.
    let _op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: Duration::from_secs(1),
            ..Options::default()
        },
    )
    .await;
    let tag = format!("{runtime}/vm-compute-node-v17:dev");
    e.add_mapping("constant", follow_rule(&tag)).await;
    add_graceless_vm(&e, "live").await;
    // Pods get the container runtime's name, pinned to the digest asked at `host`.
    wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    // A VM naming the registry as the laptop does (`host`) gets the runtime's name too.
    e.add_vm(
        "by-host",
        true,
        "Always",
        &format!("{}/app:1", registry.host()),
    )
    .await;
    wait_single_pod(&e, "by-host", &format!("{runtime}/app:1")).await;

    // A build pushed to `host` is followed.
    let never_two = NeverTwoLivePods::watch(&e);
    let second = registry.push("vm-compute-node-v17", "dev", "build 2");
    let pushed = Instant::now();
    wait_single_pod(&e, "live", &format!("{tag}@{second}")).await;
    println!(
        "push to host → pinned replacement pod, polling every 1s: {:.2} s",
        pushed.elapsed().as_secs_f64()
    );

    // The registry stops answering: the VM says where it was asked and the cluster's help.
    registry.stop();
    wait_resolved_reason(&e, "live", "DigestUnverified", &registry.host()).await;
    wait_resolved_reason(&e, "live", "DigestUnverified", HELP).await;
    registry.restart().await;

    // The ConfigMap changes the runtime's name: in force at once. The VM naming `host` gets
    // the new name; the rule naming the old one names a registry the cluster no longer
    // advertises, which without --allowed-registries is not followed (its pod stays).
    let renamed = format!("imagemap-test-registry-2:{}", registry.port);
    hosting
        .advertise(&registry.host(), &renamed, &cluster_network)
        .await;
    wait_single_pod(&e, "by-host", &format!("{renamed}/app:1")).await;
    wait_resolved_reason(
        &e,
        "live",
        "AllowedRegistriesRequired",
        "--allowed-registries",
    )
    .await;

    // The ConfigMap deleted: back to the flags — `host` is a registry of its own again.
    drop(hosting);
    wait_single_pod(&e, "by-host", &format!("{}/app:1", registry.host())).await;
    let pods = e
        .pods
        .list(&kube::api::ListParams::default())
        .await
        .unwrap();
    assert!(
        pods.items
            .iter()
            .any(|p| root_disk(p) == format!("{tag}@{second}")),
        "the pinned pod stays"
    );
    never_two.check().await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_push_notification_from_the_advertised_registry_names_it_by_host() {
    let _turn = TURN.lock().await;
    let e = env("local-registry-push").await;
    let (notify_port, token) = (free_port(), "local-registry-notification-token");
    let registry = TestRegistry::start_notifying(
        &e.ns,
        &format!("http://127.0.0.1:{notify_port}/events"),
        token,
    )
    .await;
    let runtime = format!("imagemap-test-registry:{}", registry.port);
    let hosting = Hosting::new(&e.client);
    hosting
        .advertise(
            &registry.host(),
            &runtime,
            &format!("imagemap-test-registry.cluster.invalid:{}", registry.port),
        )
        .await;
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let token_file = std::env::temp_dir().join(format!("{}-notification-token", e.ns));
    std::fs::write(&token_file, token).unwrap();
    let endpoint = imagemap::operator::RegistryNotifications {
        addr: format!("127.0.0.1:{notify_port}"),
        token: std::sync::Arc::new(imagemap::operator::TokenFile::open(&token_file).unwrap()),
    };
    let op = Operator::start(
        &[&e.ns],
        Options {
            // Polling alone would take minutes: what moves the pod is the notification.
            tag_poll_interval: Duration::from_mins(5),
            ..Options::default()
        },
    )
    .await;
    let _endpoint = imagemap::operator::serve_notifications(&endpoint, &op.observers)
        .await
        .unwrap();
    let tag = format!("{runtime}/vm-compute-node-v17:dev");
    e.add_mapping("constant", follow_rule(&tag)).await;
    add_graceless_vm(&e, "live").await;
    wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    let checks = op.observers.metrics.tag_checks("ok");

    // The registry reports the push as made to `host`: the followed tag is checked at once.
    let second = registry.push("vm-compute-node-v17", "dev", "build 2");
    let pushed = Instant::now();
    wait_single_pod(&e, "live", &format!("{tag}@{second}")).await;
    println!(
        "push to host → pinned replacement pod with a notification: {:.2} s (poll interval 5 min)",
        pushed.elapsed().as_secs_f64()
    );
    assert!(op.observers.metrics.tag_checks("ok") > checks);
    drop(hosting);
}
