//! Every Pod, at admission, against the real control plane: `imagemap run --webhook-url`
//! registers its webhook and the API server sends it the pods of the test's namespace —
//! created pods get mapped images and records, a 1.4 MiB pod included; ephemeral containers
//! added by `kubectl debug` are mapped; what cannot be mapped is admitted unchanged with a
//! warning kubectl prints; a pod may opt out of its namespace's rules, never an
//! administrator's; mapping stays single pass when another webhook makes the API server
//! call again; and with the operator gone, pods are still created. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
#![allow(clippy::too_many_lines)] // scenarios read top to bottom

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::vms::{Env, env};
use support::webhooks::{InjectingWebhook, WebhookOperator, pod};
use support::*;

const ORIGINALS: &str = "imagemap.dev/original-images";
const RULES: &str = "imagemap.dev/image-rules";
const MAPPED: &str = "imagemap.dev/mapped";

/// Rules a → b and b → a: a pod mapped twice would run what it asked for.
fn swap_rules() -> serde_json::Value {
    json!([
        {"match": {"repository": "a.io/app"}, "to": "b.io/app"},
        {"match": {"repository": "b.io/app"}, "to": "a.io/app"},
    ])
}

fn images(pod: &Pod) -> Vec<(String, String)> {
    let spec = pod.spec.as_ref().unwrap();
    spec.init_containers
        .iter()
        .flatten()
        .map(|c| {
            (
                format!("init:{}", c.name),
                c.image.clone().unwrap_or_default(),
            )
        })
        .chain(
            spec.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default())),
        )
        .collect()
}

fn record(pod: &Pod, key: &str) -> BTreeMap<String, String> {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    serde_json::from_str(annotations.get(key).map_or("{}", String::as_str)).unwrap()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn pods_are_mapped_at_admission() {
    let e = env("admission").await;
    e.add_mapping(
        "mirror",
        json!([
            {"match": {"repository": "busybox"}, "to": "mirror.io/busybox"},
            {"match": {"repository": "nginx"}, "to": "mirror.io/nginx"},
            {"match": {"regex": "^docker\\.io/library/redis(.*)$"}, "to": "elsewhere.io/redis$1"},
        ]),
    )
    .await;
    let op = WebhookOperator::start(&e.ns, "busybox", &["--allowed-registries", "mirror.io"]).await;
    let configuration: Api<MutatingWebhookConfiguration> = Api::all(e.client.clone());
    assert!(
        configuration
            .get_opt(&op.configuration)
            .await
            .unwrap()
            .is_some()
    );

    // A pod: its init container and container are mapped, and recorded.
    let created = e
        .pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {
                    "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
                    "containers": [
                        {"name": "web", "image": "nginx:1.27"},
                        {"name": "cache", "image": "memcached"},
                    ],
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        images(&created),
        [
            (
                "init:setup".to_string(),
                "mirror.io/busybox:1.36".to_string()
            ),
            ("web".into(), "mirror.io/nginx:1.27".into()),
            ("cache".into(), "memcached".into()),
        ]
    );
    assert_eq!(
        record(&created, ORIGINALS),
        BTreeMap::from([
            ("init:setup".into(), "busybox:1.36".into()),
            ("web".into(), "nginx:1.27".into()),
        ])
    );
    assert_eq!(
        record(&created, RULES)["web"],
        format!("ImageMapping {}/mirror rule 1", e.ns)
    );
    assert_eq!(created.metadata.labels.as_ref().unwrap()[MAPPED], "true");

    // A 1.4 MiB pod is mapped too.
    let env_vars: Vec<serde_json::Value> = (0..1400)
        .map(|i| json!({"name": format!("VAR_{i}"), "value": "x".repeat(1000)}))
        .collect();
    let big: Pod = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {"containers": [{"name": "app", "image": "busybox", "env": env_vars}]},
    }))
    .unwrap();
    let size = serde_json::to_vec(&big).unwrap().len();
    assert!(size > 1_400_000, "{size} bytes");
    let big = e.pods.create(&PostParams::default(), &big).await.unwrap();
    assert_eq!(
        images(&big),
        [("app".to_string(), "mirror.io/busybox".to_string())]
    );

    // What cannot be mapped is admitted as it is, and kubectl prints why.
    let out = kubectl(&[
        "run",
        "cache",
        "-n",
        &e.ns,
        "--image=redis:7",
        "--restart=Never",
    ]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning: imagemap: container cache (redis:7) is not mapped")
            && stderr.contains("elsewhere.io"),
        "{stderr}"
    );
    let cache = e.pods.get("cache").await.unwrap();
    assert_eq!(
        images(&cache),
        [("cache".to_string(), "redis:7".to_string())]
    );

    // kubectl debug: the ephemeral container it adds is mapped, and the warning says so.
    let out = kubectl(&[
        "debug",
        "web",
        "-n",
        &e.ns,
        "--image=busybox:1.36",
        "--container=debugger",
        "--attach=false",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("ephemeral container ephemeral:debugger runs mirror.io/busybox:1.36"),
        "{out:?}"
    );
    let debugged = e.pods.get("web").await.unwrap();
    let ephemeral = debugged.spec.clone().unwrap().ephemeral_containers.unwrap();
    assert_eq!(
        ephemeral[0].image.as_deref(),
        Some("mirror.io/busybox:1.36")
    );
    assert_eq!(
        images(&debugged),
        images(&created),
        "the running containers are never rewritten again"
    );

    // Counted by result.
    assert!(
        op.process
            .metric("imagemap_admissions_total{result=\"mutated\"}")
            >= 3.0
    );
    assert!(
        op.process
            .metric("imagemap_admission_duration_seconds_count")
            >= 4.0
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_pod_opts_out_of_its_namespaces_rules_never_out_of_the_clusters() {
    let e = env("admission-skip").await;
    e.add_mapping(
        "tenant",
        json!([{"match": {"repository": "busybox"}, "to": "tenant.io/busybox"}]),
    )
    .await;
    let admin = cluster_mapping_for(
        &e,
        "admin",
        json!({"repository": "nginx"}),
        "mirror.io/nginx",
    )
    .await;
    let _op = WebhookOperator::start(&e.ns, "busybox", &[]).await;
    let opted_out: Pod = serde_json::from_value(json!({
        "metadata": {"name": "opted-out", "labels": {"imagemap.dev/skip": "true"}},
        "spec": {"containers": [
            {"name": "a", "image": "busybox"},
            {"name": "b", "image": "nginx"},
        ]},
    }))
    .unwrap();
    let created = e
        .pods
        .create(&PostParams::default(), &opted_out)
        .await
        .unwrap();
    assert_eq!(
        images(&created),
        [
            ("a".to_string(), "busybox".to_string()),
            ("b".into(), "mirror.io/nginx".into()),
        ]
    );
    Api::<imagemap::core::api::ClusterImageMapping>::all(e.client.clone())
        .delete(&admin, &kube::api::DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn mapping_stays_single_pass_when_another_webhook_makes_the_api_server_call_again() {
    let e = env("admission-again").await;
    // a → b and b → a: run again on its own output, the webhook would undo itself.
    e.add_mapping("swap", swap_rules()).await;
    let _op = WebhookOperator::start(&e.ns, "a.io/app:0", &[]).await;
    // Called after imagemap (configurations go in name order), it adds a container: the
    // API server then calls imagemap again, with imagemap's own output.
    let _inject =
        InjectingWebhook::start(&e.ns, json!({"name": "sidecar", "image": "b.io/app:2"})).await;
    let created = e
        .pods
        .create(&PostParams::default(), &pod("app", "a.io/app:1"))
        .await
        .unwrap();
    assert_eq!(
        images(&created),
        [
            ("app".to_string(), "b.io/app:1".to_string()),
            ("sidecar".into(), "a.io/app:2".into()),
        ],
        "app is not mapped back, and the injected sidecar is mapped"
    );
    assert_eq!(
        record(&created, ORIGINALS),
        BTreeMap::from([
            ("app".into(), "a.io/app:1".into()),
            ("sidecar".into(), "b.io/app:2".into()),
        ])
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn with_the_operator_gone_pods_are_still_created_and_a_stopped_one_leaves_no_webhook() {
    let e = env("admission-gone").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(e.client.clone());

    // Stopped (SIGTERM): it deletes the configuration it registered.
    let mut op = WebhookOperator::start(&e.ns, "busybox", &[]).await;
    let pid = op.process.child.0.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_until(WAIT, "the operator exits", || !op.process.running()).await;
    assert!(
        configurations
            .get_opt(&op.configuration)
            .await
            .unwrap()
            .is_none(),
        "{}",
        op.process.logs()
    );
    drop(op);

    // Killed: its configuration stays, pointing at nothing; pods are created all the same
    // (fail open), unmapped, within seconds.
    let mut op = WebhookOperator::start(&e.ns, "busybox", &[]).await;
    op.process.child.0.kill().unwrap();
    op.process.child.0.wait().unwrap();
    assert!(
        configurations
            .get_opt(&op.configuration)
            .await
            .unwrap()
            .is_some()
    );
    let started = std::time::Instant::now();
    let created = e
        .pods
        .create(&PostParams::default(), &pod("unmapped", "busybox"))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(
        images(&created),
        [("app".to_string(), "busybox".to_string())]
    );
    println!("with the webhook's operator killed, a pod was created in {took:?}");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_operators_own_runner_pods_are_left_alone_and_a_forged_owner_is_not() {
    let e = env("admission-own").await;
    // a → b and b → a: a runner pod (resolved already) mapped again would undo its images.
    e.add_mapping("swap", swap_rules()).await;
    let _op = WebhookOperator::start(&e.ns, "a.io/app:0", &[]).await;
    e.add_vm("vm", false, "Always", "a.io/app:1").await;
    support::vms::wait_single_pod(&e, "vm", "b.io/app:1").await;

    // Anyone may write an owner reference to an imagemap VirtualMachine: such a pod, created
    // by another user than the operator's, is mapped.
    let forged = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "forged", "namespace": e.ns, "ownerReferences": [{
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine", "name": "vm",
            "uid": "00000000-0000-4000-8000-000000000000", "controller": true,
        }]},
        "spec": {"containers": [{"name": "app", "image": "a.io/app:1"}]},
    });
    let file = std::env::temp_dir().join(format!("forged-{}.json", e.ns));
    std::fs::write(&file, forged.to_string()).unwrap();
    kubectl_ok(&[
        "create",
        "-f",
        file.to_str().unwrap(),
        "--as=tenant",
        "--as-group=system:masters",
    ]);
    let created = e.pods.get("forged").await.unwrap();
    assert_eq!(
        images(&created),
        [("app".to_string(), "b.io/app:1".to_string())]
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_tag_only_pods_follow_is_asked_of_the_leader_by_the_pod_and_later_pods_are_pinned() {
    let e = env("admission-pod-tags").await;
    let support::vms::FollowedApp {
        registry: _registry,
        host,
        digest,
        tag,
    } = e.follow_app().await;
    // No VirtualMachine follows the tag: only pods ask for it.
    let op = WebhookOperator::start(
        &e.ns,
        "example.org/app",
        &[
            "--allowed-registries",
            &host,
            "--insecure-registries",
            &host,
        ],
    )
    .await;
    assert!(
        op.process.metric("imagemap_tag_checks_total").abs() < f64::EPSILON,
        "a dry run asks nothing of the leader"
    );
    // The first pod: no digest held yet, admitted as the rule writes it, and counted.
    let first = e
        .pods
        .create(&PostParams::default(), &pod("first", "example.org/app"))
        .await
        .unwrap();
    assert_eq!(images(&first), [("app".to_string(), tag.clone())]);
    assert!(
        op.process
            .metric("imagemap_admission_unpinned_containers_total")
            >= 1.0
    );
    // Its check was asked of the leader by that pod: later pods are pinned.
    let pinned = format!("{tag}@{digest}");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let later = e
            .pods
            .create(&dry_run, &pod("later", "example.org/app"))
            .await
            .unwrap();
        if images(&later) == [("app".to_string(), pinned.clone())] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "later pods never pinned to {pinned}:\n{}",
            op.process.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(op.process.metric("imagemap_tag_checks_total") >= 1.0);
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_cluster_without_neonvm_is_ready_and_maps_pods() {
    let e = env("admission-no-neonvm").await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(e.client.clone());
    assert!(
        crds.get_opt("virtualmachines.vm.neon.tech")
            .await
            .unwrap()
            .is_none(),
        "this cluster has no NeonVM"
    );
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    // Ready (the start waits for /readyz) and mapping pods.
    let op = WebhookOperator::start(&e.ns, "busybox", &[]).await;
    let created = e
        .pods
        .create(&PostParams::default(), &pod("app", "busybox:1.36"))
        .await
        .unwrap();
    assert_eq!(
        images(&created),
        [("app".to_string(), "mirror.io/busybox:1.36".to_string())]
    );
    let logs = op.process.logs();
    assert!(
        !logs.contains("ERROR") && !logs.contains("NeonVM's CRDs exist"),
        "{logs}"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_refused_rule_that_matches_is_told_at_admission_unless_a_rule_outranks_it() {
    let e = env("admission-refused").await;
    let mapping = |name: &str, priority: i32, rules: serde_json::Value| {
        serde_json::from_value::<imagemap::core::api::ImageMapping>(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": name},
            "spec": {"priority": priority, "rules": rules},
        }))
        .unwrap()
    };
    // Refused: they rewrite outside the allowed registries.
    e.mappings
        .create(
            &PostParams::default(),
            &mapping(
                "evil",
                0,
                json!([
                    {"match": {"repository": "acme/evil"}, "to": "evil.io/evil"},
                    {"match": {"repository": "acme/outranked"}, "to": "evil.io/outranked"},
                ]),
            ),
        )
        .await
        .unwrap();
    // Applies, and outranks the refused rule for acme/outranked.
    e.mappings
        .create(
            &PostParams::default(),
            &mapping(
                "good",
                10,
                json!([{"match": {"repository": "acme/outranked"}, "to": "mirror.io/outranked"}]),
            ),
        )
        .await
        .unwrap();
    let admin = cluster_mapping_for(
        &e,
        "refused",
        json!({"repository": "acme/cluster-evil"}),
        "evil.io/x",
    )
    .await;
    let op = WebhookOperator::start(
        &e.ns,
        "acme/outranked",
        &["--allowed-registries", "mirror.io"],
    )
    .await;
    let run = |name: &str, image: &str| {
        let out = kubectl(&[
            "run",
            name,
            "-n",
            &e.ns,
            &format!("--image={image}"),
            "--restart=Never",
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let refused = "which is not in the operator's allowed registries";
    let stderr = run("bad", "acme/evil:1");
    assert!(
        stderr.contains(&format!(
            "Warning: imagemap: container bad (acme/evil:1): ImageMapping {}/evil rule 0 matches but is refused: rewrites to registry evil.io, {refused}",
            e.ns
        )),
        "{stderr}"
    );
    let stderr = run("cluster-bad", "acme/cluster-evil:1");
    assert!(
        stderr.contains(&format!(
            "Warning: imagemap: container cluster-bad (acme/cluster-evil:1): ClusterImageMapping {admin} rule 0 matches but is refused: rewrites to registry evil.io, {refused}"
        )),
        "{stderr}"
    );
    // Outranked by a rule that applies: mapped, and nothing to say.
    let stderr = run("good", "acme/outranked:1");
    assert!(!stderr.contains("imagemap"), "{stderr}");
    for (pod, image) in [
        ("bad", "acme/evil:1"),
        ("cluster-bad", "acme/cluster-evil:1"),
        ("good", "mirror.io/outranked:1"),
    ] {
        let created = e.pods.get(pod).await.unwrap();
        assert_eq!(images(&created), [(pod.to_string(), image.to_string())]);
    }
    assert!(
        op.process
            .metric("imagemap_admission_warnings_total{reason=\"refused_rule\"}")
            >= 2.0
    );
    Api::<imagemap::core::api::ClusterImageMapping>::all(e.client.clone())
        .delete(&admin, &kube::api::DeleteParams::default())
        .await
        .unwrap();
}

/// Creates a ClusterImageMapping `PREFIX-NS` selecting the test's namespace alone, with one
/// rule from `matches` to `to`; its name.
async fn cluster_mapping_for(
    e: &Env,
    prefix: &str,
    matches: serde_json::Value,
    to: &str,
) -> String {
    let name = format!("{prefix}-{}", e.ns);
    let mapping = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1",
        "kind": "ClusterImageMapping",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e.ns}},
            "rules": [{"match": matches, "to": to}],
        },
    }))
    .unwrap();
    Api::<imagemap::core::api::ClusterImageMapping>::all(e.client.clone())
        .create(&PostParams::default(), &mapping)
        .await
        .unwrap();
    name
}
