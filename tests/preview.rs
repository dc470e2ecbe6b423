//! `imagemap resolve --cluster` against the real control plane: the preview of a change
//! lists exactly the VMs, images and pod actions the operator then performs when the change
//! is applied — read with nothing but the `imagemap-view` role, and as the kubectl plugin
//! `kubectl imagemap` — in the namespaces the change names as well as the context's, and
//! refuses a `-n` that disagrees with a file, as kubectl does. Run with `scripts/test`.

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
    // Once per test binary: the tests run side by side, and two `kubectl apply`s creating
    // the same ClusterRole at once would fail one of them.
    static ROLES: std::sync::Once = std::sync::Once::new();
    ROLES.call_once(|| {
        kubectl_ok(&["apply", "-f", "deploy/user-roles.yaml"]);
    });
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

/// Moves the context `imagemap-view` of `kubeconfig` to `namespace`.
fn set_context_namespace(kubeconfig: &Path, namespace: &str) {
    kubectl_ok(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        "config",
        "set-context",
        "imagemap-view",
        &format!("--namespace={namespace}"),
    ]);
}

/// Runs `imagemap resolve --cluster ARGS` with `kubeconfig` and its context `imagemap-view`.
fn resolve_cluster(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args(["resolve", "--cluster", "--context", "imagemap-view"])
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `imagemap resolve --cluster ARGS -o json` with `kubeconfig` and its context
/// `imagemap-view`: (exit status, output, stderr).
fn preview(kubeconfig: &Path, args: &[&str]) -> (i32, Value, String) {
    let json = [&["-o", "json"], args].concat();
    parsed(&resolve_cluster(kubeconfig, &json))
}

/// Runs `imagemap resolve --cluster ARGS` (a table) as [`preview`] does: (exit status,
/// stdout, stderr).
fn preview_table(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let out = resolve_cluster(kubeconfig, args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `path`: the ImageMapping `tilt` of `namespace`, its compute rule now pointing to
/// `to`. Returns the path as an argument.
fn tilt_file(path: &Path, namespace: &str, to: &str) -> String {
    std::fs::write(
        path,
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: tilt, namespace: {namespace}}}\n\
             spec:\n  rules:\n  - match: {{repository: neondatabase/vm-compute-node-v17}}\n    to: {to}\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// A scratch folder for a test's files.
fn scratch(namespace: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("imagemap-{namespace}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    kube::Api::<imagemap::core::api::VirtualMachine>::namespaced(e.client.clone(), &elsewhere)
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
                    .get(imagemap::core::runner_pod::VM_LABEL)
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

/// `(namespace, name, pod action)` of each VM listed.
fn listed(preview: &Value) -> Vec<(String, String, String)> {
    preview["virtualMachines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap().to_string();
            (s("namespace"), s("name"), s("pod"))
        })
        .collect()
}

/// The namespaces a JSON preview says it looked at.
fn looked_at(preview: &Value) -> Vec<&str> {
    assert_eq!(preview["allNamespaces"], false, "{preview}");
    preview["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// Issue #29, as reported: the kubeconfig's context is in `default`, the change file names
/// the namespace of its ImageMapping; the preview must look there, list the VMs the change
/// recreates, and fail `--exit-code`.
#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_change_to_another_namespace_than_the_contexts_is_previewed_in_its_own() {
    let e = env("preview-own").await;
    let dir = scratch(&e.ns);
    let kubeconfig = viewer_kubeconfig(&dir, &e.ns);
    set_context_namespace(&kubeconfig, "default");
    let _op = Operator::start(&[&e.ns], Options::default()).await;
    e.add_mapping("tilt", tilt_rule("mirror.io/compute:build-1"))
        .await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    e.add_vm("steady", false, "Always", COMPUTE).await;
    e.add_vm("other", true, "Always", "busybox:1.36").await;
    wait_single_pod(&e, "live", "mirror.io/compute:build-1").await;
    wait_single_pod(&e, "steady", "mirror.io/compute:build-1").await;
    wait_single_pod(&e, "other", "docker.io/library/busybox:1.36").await;

    // Without a change, the context's namespace alone, where nothing changes.
    let (code, nothing, stderr) = preview(&kubeconfig, &["--exit-code"]);
    assert_eq!(code, 0, "{nothing}\n{stderr}");
    assert_eq!(looked_at(&nothing), ["default"]);

    // The change names its namespace: previewed there, beside the context's.
    let change = tilt_file(&dir.join("change.yaml"), &e.ns, "mirror.io/compute:build-2");
    let (code, shown, stderr) = preview(&kubeconfig, &["-f", &change, "--exit-code"]);
    assert_eq!(code, 1, "the change recreates a pod: {shown}\n{stderr}");
    let ns = e.ns.clone();
    let vm = |name: &str, pod: &str| (ns.clone(), name.to_string(), pod.to_string());
    assert_eq!(
        listed(&shown),
        [vm("live", "recreate"), vm("steady", "restartRequired")]
    );
    assert_eq!(shown["unchanged"], 1);
    let mut expected = vec!["default", e.ns.as_str()];
    expected.sort_unstable();
    assert_eq!(looked_at(&shown), expected);

    // The command, as typed: the table lists the VM and names both namespaces.
    let (code, table, stderr) = preview_table(&kubeconfig, &["-f", &change, "--exit-code"]);
    assert_eq!(code, 1, "{table}\n{stderr}");
    let live_row = table
        .lines()
        .find(|l| l.starts_with(&format!("{}/live ", e.ns)))
        .unwrap_or_else(|| panic!("no row of {}/live:\n{table}", e.ns));
    assert!(
        live_row.contains("recreated (liveReload)")
            && live_row.contains("mirror.io/compute:build-2"),
        "{table}"
    );
    assert_eq!(
        table.lines().last(),
        Some(format!("namespaces: {}", expected.join(", ")).as_str()),
        "{table}"
    );
}

/// `-n` that disagrees with a file's object is an error naming both namespaces (exit 2), as
/// `kubectl apply -n` and `kubectl delete -n` give; agreeing, or without `-n`, it previews.
#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_namespace_flag_that_disagrees_with_a_files_object_is_an_error() {
    let e = env("preview-flag").await;
    let theirs = fresh_namespace(&e.client, "preview-theirs").await;
    let dir = scratch(&e.ns);
    let kubeconfig = viewer_kubeconfig(&dir, &e.ns);
    let change = tilt_file(&dir.join("theirs.yaml"), &theirs, "mirror.io/compute:x");

    let mismatch = format!(
        "ImageMapping {theirs}/tilt: the namespace from the provided object \"{theirs}\" does \
         not match the namespace \"{}\". You must pass '--namespace={theirs}' to perform this \
         operation.",
        e.ns
    );
    for args in [["-f", &change], ["--delete", &change]] {
        let (code, stdout, stderr) =
            preview_table(&kubeconfig, &[&["-n", &e.ns], &args[..]].concat());
        assert_eq!(code, 2, "{args:?}: {stdout}\n{stderr}");
        assert_eq!(stderr.trim(), format!("error: {mismatch}"), "{args:?}");
        assert!(stdout.is_empty(), "{args:?}: nothing previewed: {stdout}");
    }

    // -n naming the file's namespace: that namespace alone.
    let (code, agreed, stderr) = preview(&kubeconfig, &["-n", &theirs, "-f", &change]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(looked_at(&agreed), [theirs.as_str()]);
    // Without -n: the context's namespace and the file's.
    let (code, both, stderr) = preview(&kubeconfig, &["-f", &change]);
    assert_eq!(code, 0, "{stderr}");
    let mut expected = vec![e.ns.as_str(), theirs.as_str()];
    expected.sort_unstable();
    assert_eq!(looked_at(&both), expected);
}

/// Files naming two namespaces preview both, and say so.
#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn files_naming_two_namespaces_preview_both() {
    let first = env("preview-first").await;
    let second = env("preview-second").await;
    let dir = scratch(&first.ns);
    let kubeconfig = viewer_kubeconfig(&dir, &first.ns);
    set_context_namespace(&kubeconfig, "default");
    let _op = Operator::start(&[&first.ns, &second.ns], Options::default()).await;
    for e in [&first, &second] {
        e.add_mapping("tilt", tilt_rule("mirror.io/compute:build-1"))
            .await;
        e.add_vm("live", true, "Always", COMPUTE).await;
    }
    for e in [&first, &second] {
        wait_single_pod(e, "live", "mirror.io/compute:build-1").await;
    }

    // One file for each namespace, and one file holding both.
    let a = tilt_file(
        &dir.join("first.yaml"),
        &first.ns,
        "mirror.io/compute:build-2",
    );
    let b = tilt_file(
        &dir.join("second.yaml"),
        &second.ns,
        "mirror.io/compute:build-2",
    );
    let both = dir.join("both.yaml");
    std::fs::write(
        &both,
        format!(
            "{}---\n{}",
            std::fs::read_to_string(&a).unwrap(),
            std::fs::read_to_string(&b).unwrap()
        ),
    )
    .unwrap();
    let both = both.display().to_string();
    let mut expected = vec!["default", first.ns.as_str(), second.ns.as_str()];
    expected.sort_unstable();
    let recreated = |e: &Env| (e.ns.clone(), "live".to_string(), "recreate".to_string());
    let mut vms = vec![recreated(&first), recreated(&second)];
    vms.sort();
    for args in [vec!["-f", &a, "-f", &b], vec!["-f", &both]] {
        let (code, shown, stderr) = preview(&kubeconfig, &args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert_eq!(listed(&shown), vms, "{args:?}");
        assert_eq!(looked_at(&shown), expected, "{args:?}");
        let (_, table, _) = preview_table(&kubeconfig, &args);
        assert_eq!(
            table.lines().last(),
            Some(format!("namespaces: {}", expected.join(", ")).as_str()),
            "{table}"
        );
    }
    // One of the two files: that namespace's VM only.
    let (_, one, _) = preview(&kubeconfig, &["-f", &b]);
    assert_eq!(listed(&one), [recreated(&second)]);
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn workloads_and_pods_are_previewed_with_what_happens_to_their_pods() {
    let e = env("preview-workloads").await;
    let dir = scratch(&e.ns);
    let kubeconfig = viewer_kubeconfig(&dir, &e.ns);
    // Workloads are read with the built-in `view` role (`imagemap-view` reads none).
    kubectl_ok(&[
        "create",
        "rolebinding",
        "viewer-view",
        "--clusterrole=view",
        &format!("--serviceaccount={0}:viewer-{0}", e.ns),
        "-n",
        &e.ns,
    ]);
    e.add_mapping(
        "mirror",
        serde_json::json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
    )
    .await;
    let objects = dir.join("objects.yaml");
    let template = |labels: &str, image: &str| {
        format!(
            "    metadata: {{labels: {{{labels}}}}}\n    spec: {{containers: [{{name: app, image: \"{image}\"}}], restartPolicy: Always}}\n"
        )
    };
    std::fs::write(
        &objects,
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n{}\
             ---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db}}\nspec:\n  serviceName: db\n  selector: {{matchLabels: {{app: db}}}}\n  template:\n{}\
             ---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: other}}\nspec:\n  selector: {{matchLabels: {{app: other}}}}\n  template:\n{}\
             ---\napiVersion: batch/v1\nkind: Job\nmetadata: {{name: once}}\nspec:\n  template:\n    metadata: {{labels: {{imagemap.dev/live-reload: \"true\"}}}}\n    spec: {{containers: [{{name: app, image: nginx}}], restartPolicy: Never}}\n\
             ---\napiVersion: v1\nkind: Pod\nmetadata: {{name: bare}}\nspec: {{schedulerName: nobody, containers: [{{name: app, image: nginx}}]}}\n",
            template("app: web, imagemap.dev/live-reload: \"true\"", "nginx:1.27"),
            template("app: db", "nginx:1.27"),
            template("app: other", "redis:7"),
        ),
    )
    .unwrap();
    kubectl_ok(&["apply", "-n", &e.ns, "-f", objects.to_str().unwrap()]);
    let change = dir.join("change.yaml");
    std::fs::write(
        &change,
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: mirror, namespace: {}}}\n\
             spec:\n  rules:\n  - match: {{repository: nginx}}\n    to: mirror2.io/nginx\n",
            e.ns
        ),
    )
    .unwrap();
    let change = change.display().to_string();
    let (code, shown, stderr) = preview(&kubeconfig, &["-f", &change, "--exit-code"]);
    assert_eq!(code, 1, "the change alters workloads: {shown}\n{stderr}");
    let mut fates: Vec<(String, String, String)> = shown["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["kind"].as_str().unwrap().to_string(),
                w["name"].as_str().unwrap().to_string(),
                w["pods"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    fates.sort();
    let fate =
        |kind: &str, name: &str, pods: &str| (kind.to_string(), name.to_string(), pods.to_string());
    assert_eq!(
        fates,
        [
            fate("Deployment", "web", "rolled"),
            fate("Job", "once", "restartRequired"),
            fate("Pod", "bare", "restartRequired"),
            fate("StatefulSet", "db", "newPodsOnly"),
        ],
        "{shown}"
    );
    assert_eq!(shown["unchangedWorkloads"], 1, "{shown}");
    let web = shown["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "web")
        .unwrap();
    assert_eq!(web["images"][0]["now"], "mirror.io/nginx:1.27");
    assert_eq!(web["images"][0]["after"], "mirror2.io/nginx:1.27");
    let (_, table, _) = preview_table(&kubeconfig, &["-f", &change]);
    assert!(table.contains("Deployment"), "{table}");
    assert!(table.contains("rolled (live reload)"), "{table}");
    println!("{table}");
}
