//! `imagemap explain` against the real control plane: every verdict comes from a real
//! scenario — pods mapped by the operator's webhook, pods created while no webhook
//! answered, rules changed after admission, refused rules, opted-out pods, a workload and
//! its pods, a namespace the webhook is never sent, imagemap's own runner pods — and a
//! read-only user gets verdicts that say what it could not read. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
#![allow(clippy::too_many_lines)] // scenarios read top to bottom

mod support;

use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::vms::env;
use support::webhooks::WebhookOperator;
use support::*;

/// `imagemap explain ARGS -o json`: its exit status and document.
fn explain(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .arg("explain")
        .args(args)
        .args(["-o", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), doc, stderr)
}

/// The verdict of each slot of `doc`, by slot.
fn verdicts(doc: &Value) -> Vec<(String, String)> {
    doc["slots"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| {
            (
                s["slot"].as_str().unwrap_or_default().to_string(),
                s["verdict"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pod(name: &str, labels: &Value, images: &[&str]) -> Pod {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": if images.len() == 1 { "app".to_string() } else { format!("c{i}") }, "image": image}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": containers},
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn every_verdict_comes_from_a_real_scenario() {
    let e = env("explain").await;
    let ns = e.ns.clone();
    let mapping = |name: &str, dry_run: bool, rules: Value| -> imagemap::core::api::ImageMapping {
        serde_json::from_value(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": name},
            "spec": {"dryRun": dry_run, "rules": rules},
        }))
        .unwrap()
    };
    let pp = PostParams::default();
    e.mappings
        .create(
            &pp,
            &mapping(
                "mirror",
                false,
                json!([
                    {"match": {"repository": "nginx"}, "to": "mirror.io/nginx"},
                    {"match": {"repository": "busybox"}, "to": "mirror.io/busybox"},
                    {"match": {"repository": "app"}, "to": "mirror.io/app:dev", "followTag": true},
                ]),
            ),
        )
        .await
        .unwrap();
    e.mappings
        .create(
            &pp,
            &mapping(
                "evil",
                false,
                json!([{"match": {"repository": "acme/evil"}, "to": "evil.io/evil"}]),
            ),
        )
        .await
        .unwrap();
    e.mappings
        .create(
            &pp,
            &mapping(
                "dry",
                true,
                json!([{"match": {"repository": "redis"}, "to": "mirror.io/redis"}]),
            ),
        )
        .await
        .unwrap();
    // Created while no replica answers: the operator is not running yet.
    e.pods
        .create(&pp, &pod("while-down", &json!({}), &["busybox:1"]))
        .await
        .unwrap();
    let op = WebhookOperator::start(&ns, "busybox", &["--allowed-registries", "mirror.io"]).await;
    let configuration = op.configuration.clone();
    let common = [
        "-n",
        ns.as_str(),
        "--webhook-configuration",
        configuration.as_str(),
        "--allowed-registries",
        "mirror.io",
    ];
    let explained = |target: &str| {
        let mut args = vec![target];
        args.extend_from_slice(&common);
        explain(&args)
    };
    // Each verdict's table, as a user sees it (shown with --nocapture).
    let shown = |target: &str, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_imagemap"))
            .args(["explain", target])
            .args(extra)
            .output()
            .unwrap();
        println!(
            "$ imagemap explain {target} -n NS\n{}",
            String::from_utf8_lossy(&out.stdout).replace(&ns, "NS")
        );
    };
    for (name, labels, images) in [
        ("current", json!({}), vec!["nginx:1"]),
        ("stale", json!({}), vec!["busybox:2"]),
        ("typo", json!({}), vec!["ngnix:1"]),
        ("evil", json!({}), vec!["acme/evil:1"]),
        (
            "skip",
            json!({"imagemap.dev/skip": "true"}),
            vec!["nginx:1"],
        ),
        ("dry", json!({}), vec!["redis:7"]),
        ("follow", json!({}), vec!["app:1"]),
    ] {
        e.pods
            .create(&pp, &pod(name, &labels, &images))
            .await
            .unwrap();
    }
    // Records over 8 KiB: 300 containers, each mapped.
    let many: Vec<String> = (0..300)
        .map(|i| format!("nginx:{i}-{}", "v".repeat(12)))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    e.pods
        .create(&pp, &pod("whole", &json!({}), &many))
        .await
        .unwrap();
    // A workload without live reload.
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "busybox:3"}]}}},
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(e.client.clone(), &ns)
        .create(&pp, &deployment)
        .await
        .unwrap();
    wait_list(
        e.pods.clone(),
        kube::runtime::watcher::Config::default().labels("app=web"),
        "the Deployment's pod",
        |pods| pods.len() == 1,
    )
    .await;
    // imagemap's own VM: its runner pod is left alone at admission.
    e.add_vm("vm", false, "Always", "nginx:9").await;
    wait_list(
        e.pods.clone(),
        support::vms::pods_of("vm"),
        "the VM's runner pod",
        |pods| pods.len() == 1,
    )
    .await;

    shown("pod/current", &common);
    let (code, doc, err) = explained("pod/current");
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc["apiVersion"], "imagemap.dev/explain/v1");
    assert_eq!(
        verdicts(&doc),
        [("app".into(), "mapped-current".into())],
        "{doc:#}"
    );
    assert_eq!(doc["slots"][0]["requested"], "nginx:1");
    assert_eq!(doc["slots"][0]["requestedFrom"], "record");
    assert_eq!(doc["slots"][0]["runs"], "mirror.io/nginx:1");
    assert_eq!(
        doc["slots"][0]["rule"],
        format!("ImageMapping {ns}/mirror rule 0")
    );

    let single = |target: &str, verdict: &str| {
        shown(target, &common);
        let (code, doc, err) = explained(target);
        assert_eq!(code, 0, "{target}: {err}");
        let found = verdicts(&doc);
        assert!(
            found.iter().all(|(_, v)| v == verdict) && !found.is_empty(),
            "{target}: {doc:#}\n{err}"
        );
        doc
    };
    single("pod/while-down", "not-mapped-at-admission");
    let typo = single("pod/typo", "no-rule-matches");
    assert!(
        typo["slots"][0]["nearest"][0]
            .as_str()
            .unwrap()
            .contains("mirror rule 0"),
        "{typo:#}"
    );
    let evil = single("pod/evil", "rule-refused");
    assert!(
        evil["slots"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("not in the operator's allowed registries"),
        "{evil:#}"
    );
    single("pod/skip", "opted-out");
    single("pod/dry", "dry-run");
    single("pod/follow", "followed-tag-not-pinned");
    single("pod/whole", "not-mapped-whole");
    let runner = e
        .pods
        .list(&kube::api::ListParams::default().labels("imagemap.dev/virtualmachine=vm"))
        .await
        .unwrap();
    let runner = runner.items[0].metadata.name.clone().unwrap();
    single(&format!("pod/{runner}"), "left-alone-by-design");
    // A namespace the webhook is never sent: the operator acts in the test's alone.
    let other = fresh_namespace(&e.client, "explain-other").await;
    Api::<Pod>::namespaced(e.client.clone(), &other)
        .create(&pp, &pod("elsewhere", &json!({}), &["nginx:1"]))
        .await
        .unwrap();
    shown(
        "pod/elsewhere",
        &["-n", &other, "--webhook-configuration", &configuration],
    );
    let (_, doc, err) = explain(&[
        "pod/elsewhere",
        "-n",
        &other,
        "--webhook-configuration",
        &configuration,
    ]);
    assert_eq!(
        verdicts(&doc),
        [("app".into(), "namespace-never-sent".into())],
        "{doc:#}\n{err}"
    );

    // A rule changed since admission.
    e.mappings
        .patch(
            "mirror",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rules": [
                {"match": {"repository": "nginx"}, "to": "mirror.io/nginx"},
                {"match": {"repository": "busybox"}, "to": "mirror.io/other/busybox"},
                {"match": {"repository": "app"}, "to": "mirror.io/app:dev", "followTag": true},
            ]}})),
        )
        .await
        .unwrap();
    let stale = single("pod/stale", "mapped-stale");
    assert!(
        stale["slots"][0]["next"]
            .as_str()
            .unwrap()
            .contains("RestartRequired"),
        "{stale:#}"
    );
    assert_eq!(stale["slots"][0]["now"], "mirror.io/other/busybox:2");
    // The workload: its template maps to the new image; its pod is stale, new pods only.
    shown("deploy/web", &common);
    let (code, web, err) = explained("deploy/web");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        verdicts(&web),
        [("app".into(), "mapped-current".into())],
        "{web:#}"
    );
    assert_eq!(web["podCount"], 1);
    assert_eq!(
        web["pods"][0]["slots"][0]["verdict"], "stale-new-pods-only",
        "{web:#}"
    );
    // --exit-code: a stale slot is worth a look; no rule matching is not.
    let mut args = vec!["pod/stale", "--exit-code"];
    args.extend_from_slice(&common);
    assert_eq!(explain(&args).0, 1);
    let mut args = vec!["pod/typo", "--exit-code"];
    args.extend_from_slice(&common);
    assert_eq!(explain(&args).0, 0);
    // The table says the same.
    let out = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args(["explain", "pod/stale"])
        .args(common)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("mapped-stale") && table.contains("RestartRequired"),
        "{table}"
    );
    // A pod that does not exist: exit 2, with the API's reason.
    let (code, _, err) = explained("pod/nothing");
    assert_eq!(code, 2);
    assert!(err.contains("not found"), "{err}");
    drop(op);
}

/// A kubeconfig whose context `reader` is the ServiceAccount `account` of `namespace`.
fn reader_kubeconfig(dir: &std::path::Path, namespace: &str, account: &str) -> String {
    let token = kubectl_ok(&["create", "token", account, "-n", namespace]);
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, kubectl_ok(&["config", "view", "--raw"])).unwrap();
    let file = format!("--kubeconfig={}", kubeconfig.display());
    let cluster = kubectl_ok(&[
        &file,
        "config",
        "view",
        "-o",
        "jsonpath={.clusters[0].name}",
    ]);
    kubectl_ok(&[
        &file,
        "config",
        "set-credentials",
        "reader",
        &format!("--token={}", token.trim()),
    ]);
    kubectl_ok(&[
        &file,
        "config",
        "set-context",
        "reader",
        &format!("--cluster={cluster}"),
        "--user=reader",
        &format!("--namespace={namespace}"),
    ]);
    kubeconfig.display().to_string()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_read_only_user_is_told_what_it_could_not_read() {
    let e = env("explain-reader").await;
    let ns = e.ns.clone();
    kubectl_ok(&["apply", "--server-side", "-f", "deploy/user-roles.yaml"]);
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
    )
    .await;
    let pp = PostParams::default();
    e.pods
        .create(&pp, &pod("mapped-now", &json!({}), &["nginx:1"]))
        .await
        .unwrap();
    e.pods
        .create(&pp, &pod("no-rule", &json!({}), &["redis:1"]))
        .await
        .unwrap();
    // Kubernetes' own `view` role in the namespace, which imagemap-view aggregates into.
    let account = "reader";
    kubectl_ok(&["create", "serviceaccount", account, "-n", &ns]);
    kubectl_ok(&[
        "create",
        "rolebinding",
        "reader-view",
        "--clusterrole=view",
        &format!("--serviceaccount={ns}:{account}"),
        "-n",
        &ns,
    ]);
    let dir = std::env::temp_dir().join(format!("explain-reader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = reader_kubeconfig(&dir, &ns, account);
    let as_reader =
        |target: &str| explain(&[target, "--kubeconfig", &kubeconfig, "--context", "reader"]);
    // Bound in the namespace alone: ClusterImageMappings cannot be listed, so no verdict
    // that needs the rules — and never "no rule matches".
    let out = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args([
            "explain",
            "pod/no-rule",
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "reader",
        ])
        .output()
        .unwrap();
    println!(
        "$ imagemap explain pod/no-rule -n NS\n{}",
        String::from_utf8_lossy(&out.stdout).replace(&ns, "NS")
    );
    let (code, doc, err) = as_reader("pod/no-rule");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        verdicts(&doc),
        [("app".into(), "unknown".into())],
        "{doc:#}"
    );
    let evidence = doc["slots"][0]["evidence"].as_str().unwrap();
    assert!(evidence.contains("clusterimagemappings"), "{evidence}");
    // With imagemap-view bound cluster-wide, as the install's docs say: the rules are read.
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("reader-{ns}"),
        "--clusterrole=imagemap-view",
        &format!("--serviceaccount={ns}:{account}"),
    ]);
    let (_, doc, err) = as_reader("pod/no-rule");
    assert_eq!(
        verdicts(&doc),
        [("app".into(), "no-rule-matches".into())],
        "{doc:#}\n{err}"
    );
    // The install's webhook configuration is not there: whether the pod was ever sent to the
    // webhook cannot be told.
    let (_, doc, _) = as_reader("pod/mapped-now");
    assert_eq!(
        verdicts(&doc),
        [("app".into(), "unknown".into())],
        "{doc:#}"
    );
    assert!(
        doc["slots"][0]["grant"]
            .as_str()
            .unwrap()
            .contains("mutatingwebhookconfigurations"),
        "{doc:#}"
    );
    // A pod it cannot get: exit 2, with the API's reason.
    let other = fresh_namespace(&e.client, "explain-hidden").await;
    Api::<Pod>::namespaced(e.client.clone(), &other)
        .create(&pp, &pod("hidden", &json!({}), &["nginx:1"]))
        .await
        .unwrap();
    let (code, _, err) = explain(&[
        "pod/hidden",
        "-n",
        &other,
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "reader",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("forbidden"), "{err}");
    kubectl(&["delete", "clusterrolebinding", &format!("reader-{ns}")]);
}
