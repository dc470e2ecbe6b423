//! `imagemap resolve --cluster` against the real control plane: the preview of a change
//! lists exactly the VMs, images and pod actions the operator then performs when the change
//! is applied — read with nothing but the `imagemap-view` role, and as the kubectl plugin
//! `kubectl imagemap`. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use imagemap::operator::Options;
use kube::ResourceExt;
use serde_json::Value;
use support::vms::*;
use support::*;

/// A kubeconfig with two contexts on the test cluster: the admin's (current) and
/// `imagemap-view`, a ServiceAccount bound to nothing but the `imagemap-view` ClusterRole,
/// defaulting to `namespace`.
fn viewer_kubeconfig(dir: &Path, namespace: &str) -> PathBuf {
    kubectl_ok(&["apply", "-f", "deploy/user-roles.yaml"]);
    let account = format!("viewer-{namespace}");
    kubectl_ok(&["create", "serviceaccount", &account, "-n", namespace]);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &account,
        "--clusterrole=imagemap-view",
        &format!("--serviceaccount={namespace}:{account}"),
    ]);
    let token = kubectl_ok(&["create", "token", &account, "-n", namespace]);
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
        "viewer",
        &format!("--token={}", token.trim()),
    ]);
    kubectl_ok(&[
        &file,
        "config",
        "set-context",
        "imagemap-view",
        &format!("--cluster={cluster}"),
        "--user=viewer",
        &format!("--namespace={namespace}"),
    ]);
    kubeconfig
}

/// Runs `imagemap resolve --cluster ARGS -o json` with `kubeconfig` and its context
/// `imagemap-view`: (exit status, output, stderr).
fn preview(kubeconfig: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args([
            "resolve",
            "--cluster",
            "--context",
            "imagemap-view",
            "-o",
            "json",
        ])
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .unwrap();
    parsed(&out)
}

fn parsed(out: &std::process::Output) -> (i32, Value, String) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), value, stderr)
}

/// `(slot, now, after)` of a slot that changes.
type Change = (String, String, String);

/// `(name, pod action, the slots that change)` of each VM listed.
fn actions(preview: &Value) -> Vec<(String, String, Vec<Change>)> {
    preview["virtualMachines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let images = v["images"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i["changes"] == true)
                .map(|i| {
                    let s = |k: &str| i[k].as_str().unwrap_or_default().to_string();
                    (s("slot"), s("now"), s("after"))
                })
                .collect();
            (
                v["name"].as_str().unwrap().to_string(),
                v["pod"].as_str().unwrap().to_string(),
                images,
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_preview_lists_what_the_operator_then_does() {
    let e = env("preview").await;
    let dir = std::env::temp_dir().join(format!("imagemap-{}", e.ns));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = viewer_kubeconfig(&dir, &e.ns);
    // A VM of another namespace, which this operator does not act in: only -A shows it.
    let elsewhere = fresh_namespace(&e.client, "preview-other").await;
    kube::Api::<imagemap::api::VirtualMachine>::namespaced(e.client.clone(), &elsewhere)
        .create(
            &kube::api::PostParams::default(),
            &vm("elsewhere", true, "Always", COMPUTE),
        )
        .await
        .unwrap();
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule("mirror.io/compute:build-1"))
        .await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    e.add_vm("steady", false, "Always", COMPUTE).await;
    e.add_vm("other", true, "Always", "busybox:1.36").await;
    let live = wait_single_pod(&e, "live", "mirror.io/compute:build-1").await;
    let steady = wait_single_pod(&e, "steady", "mirror.io/compute:build-1").await;
    let other = wait_single_pod(&e, "other", "docker.io/library/busybox:1.36").await;

    // Nothing changed yet: nothing to show, exit 0 even with --exit-code.
    let (code, nothing, _) = preview(&kubeconfig, &["--exit-code"]);
    assert_eq!(code, 0, "{nothing}");
    assert_eq!(nothing["unchanged"], 3);

    // Tilt's next build, as a file: preview it.
    let change = dir.join("tilt.yaml");
    std::fs::write(
        &change,
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: tilt, namespace: {}}}\n\
             spec:\n  rules:\n  - match: {{repository: neondatabase/vm-compute-node-v17}}\n    to: mirror.io/compute:build-2\n",
            e.ns
        ),
    )
    .unwrap();
    let file = change.display().to_string();
    let (code, shown, stderr) = preview(&kubeconfig, &["-f", &file]);
    assert_eq!(code, 0, "{stderr}");
    let disk =
        |now: &str, after: &str| vec![("rootDisk".to_string(), now.to_string(), after.to_string())];
    assert_eq!(
        actions(&shown),
        [
            (
                "live".to_string(),
                "recreate".to_string(),
                disk("mirror.io/compute:build-1", "mirror.io/compute:build-2")
            ),
            (
                "steady".to_string(),
                "restartRequired".to_string(),
                disk("mirror.io/compute:build-1", "mirror.io/compute:build-2")
            ),
        ]
    );
    assert_eq!(shown["unchanged"], 1);
    // As `kubectl diff`: --exit-code says something would change.
    assert_eq!(preview(&kubeconfig, &["-f", &file, "--exit-code"]).0, 1);
    // Read-only: the preview changed nothing.
    assert_eq!(
        e.pods.get(&live.name_any()).await.unwrap().uid(),
        live.uid()
    );

    // Applied, the operator does exactly that.
    kubectl_ok(&["apply", "-f", &file]);
    wait_single_pod(&e, "live", "mirror.io/compute:build-2").await;
    wait_condition(&e, "steady", "ImagesCurrent", "RestartRequired", "").await;
    for (name, before) in [("steady", &steady), ("other", &other)] {
        let pods = e
            .pods
            .list(&kube::api::ListParams::default())
            .await
            .unwrap();
        let now: Vec<_> = pods
            .items
            .iter()
            .filter(|p| {
                p.labels()
                    .get(imagemap::runner_pod::VM_LABEL)
                    .map(String::as_str)
                    == Some(name)
            })
            .collect();
        assert_eq!(now.len(), 1, "{name}");
        assert_eq!(now[0].uid(), before.uid(), "{name}: its pod untouched");
    }
    // Applied, the same preview shows nothing more to do.
    let (code, applied, _) = preview(&kubeconfig, &["-f", &file, "--exit-code"]);
    assert_eq!(code, 0, "{applied}");

    // Removing the mapping, as --delete: every compute VM goes back to the image it asks
    // for; a new problem (a tie) is listed and exits 1.
    let (code, removed, _) = preview(&kubeconfig, &["--delete", "imagemapping/tilt"]);
    assert_eq!(code, 0);
    assert_eq!(
        actions(&removed)
            .iter()
            .map(|(n, a, i)| (n.as_str(), a.as_str(), i[0].2.as_str()))
            .collect::<Vec<_>>(),
        [
            ("live", "recreate", COMPUTE_NORMALIZED),
            ("steady", "restartRequired", COMPUTE_NORMALIZED)
        ]
    );
    // Every namespace (-A): the same two VMs of this one among them.
    let (_, everywhere, _) = preview(
        &kubeconfig,
        &["-A", "--delete", &format!("imagemapping/{}/tilt", e.ns)],
    );
    let ours: Vec<_> = everywhere["virtualMachines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["namespace"] == e.ns.as_str())
        .map(|v| (v["name"].as_str().unwrap(), v["pod"].as_str().unwrap()))
        .collect();
    assert_eq!(ours, [("live", "recreate"), ("steady", "restartRequired")]);
    assert!(
        everywhere["virtualMachines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["namespace"] == elsewhere.as_str() && v["pod"] == "create"),
        "{everywhere}"
    );
    let tie = dir.join("tie.yaml");
    std::fs::write(
        &tie,
        "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {name: tie}\n\
         spec:\n  rules:\n  - match: {repository: busybox}\n    to: a.io/busybox\n  - match: {repository: busybox}\n    to: b.io/busybox\n",
    )
    .unwrap();
    let (code, tied, stderr) = preview(&kubeconfig, &["-f", &tie.display().to_string()]);
    assert_eq!(code, 1, "a new conflict: {stderr}");
    assert!(
        stderr.contains("problem:") && stderr.contains("tie"),
        "{stderr}"
    );
    let other_after = &actions(&tied)[0];
    assert_eq!(
        (other_after.0.as_str(), other_after.1.as_str()),
        ("other", "recreate")
    );
    assert!(!tied["problems"].as_array().unwrap().is_empty());

    // The kubectl plugin: the same binary as `kubectl-imagemap` on PATH, with kubectl's
    // --context and -n (the context's namespace is the viewer's; -n names it again).
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let plugin = bin.join("kubectl-imagemap");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_imagemap"), &plugin).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new("kubectl")
        .args([
            "imagemap",
            "resolve",
            "--cluster",
            "--context",
            "imagemap-view",
            "-n",
            &e.ns,
        ])
        .args(["--delete", "imagemapping/tilt", "-o", "json"])
        .env("PATH", &path)
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let (code, through_kubectl, stderr) = parsed(&out);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(through_kubectl, removed);
    let help = Command::new("kubectl")
        .args(["imagemap", "--help"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("kubectl imagemap"),
        "the plugin names itself as kubectl does"
    );
}
