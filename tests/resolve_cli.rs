//! `imagemap resolve` as scripts use it: arguments, JSON contract, exit status.

#![allow(clippy::unwrap_used)] // test code

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn imagemap(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run imagemap");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> (i32, Value, String) {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (code, out, err) = imagemap(&all);
    let value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"));
    (code, value, err)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("imagemap-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn examples_resolve_cleanly_as_the_dev_loop_chapter_shows() {
    let (code, out, err) = imagemap(&["resolve", "-f", "examples/"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("k3d-neon-local-registry:5000/vm-compute-node-v17:tilt-bce03df2bbb7ad9d"),
        "{out}"
    );
    assert!(
        out.contains("registry.internal:5000/neon/vm-compute-node-v16:latest"),
        "{out}"
    );
}

#[test]
fn image_entries_follow_the_contract() {
    let (code, v, _) = json(&[
        "resolve",
        "-f",
        "examples/",
        "-n",
        "dev",
        "--image",
        "neondatabase/vm-compute-node-v17",
        "--image",
        "nginx:1.27",
    ]);
    assert_eq!(code, 0);
    let first = &v["images"][0];
    assert_eq!(first["input"], "neondatabase/vm-compute-node-v17");
    assert_eq!(
        first["normalized"],
        "docker.io/neondatabase/vm-compute-node-v17"
    );
    assert_eq!(first["familiar"], "neondatabase/vm-compute-node-v17");
    assert_eq!(first["registry"], "docker.io");
    assert_eq!(first["repository"], "neondatabase/vm-compute-node-v17");
    assert_eq!(first["tag"], Value::Null);
    assert_eq!(first["digest"], Value::Null);
    assert_eq!(
        first["resolved"],
        "k3d-neon-local-registry:5000/vm-compute-node-v17:tilt-bce03df2bbb7ad9d"
    );
    assert_eq!(first["rule"]["kind"], "ImageMapping");
    assert_eq!(first["rule"]["namespace"], "dev");
    assert_eq!(first["rule"]["name"], "tilt-dev");
    assert_eq!(first["rule"]["rule"], 0);
    assert_eq!(first["rule"]["match"], "repository");
    assert_eq!(first["error"], Value::Null);
    let second = &v["images"][1];
    assert_eq!(second["resolved"], "docker.io/library/nginx:1.27");
    assert_eq!(second["normalized"], second["resolved"]);
    assert_eq!(second["rule"], Value::Null);
    assert_eq!(second["tag"], "1.27");
    let vm = &v["virtualMachines"][0];
    assert_eq!(vm["namespace"], "dev");
    assert_eq!(vm["images"][0]["slot"], "rootDisk");
}

#[test]
fn invalid_input_nulls_every_field_and_exits_1() {
    let (code, v, _) = json(&["resolve", "--image=-bad", "--image", "UPPER:1"]);
    assert_eq!(code, 1);
    for entry in v["images"].as_array().unwrap() {
        let obj = entry.as_object().unwrap();
        for (k, val) in obj {
            match k.as_str() {
                "input" => assert!(val.is_string()),
                "error" => assert!(val.as_str().unwrap().contains("reference format")),
                _ => assert!(val.is_null(), "{k} = {val}"),
            }
        }
    }
    assert_eq!(v["images"][0]["input"], "-bad");
}

#[test]
fn failed_rewrite_keeps_parsed_fields_and_exits_1() {
    let dir = temp_dir("rewrite");
    std::fs::write(
        dir.join("m.yaml"),
        "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {name: m}\nspec:\n  rules:\n  - match: {regex: 'docker\\.io/library/(.*)'}\n    to: 'mirror.io/UPPER/$1'\n",
    )
    .unwrap();
    let (code, v, _) = json(&["resolve", "-f", dir.to_str().unwrap(), "--image", "nginx"]);
    assert_eq!(code, 1);
    let e = &v["images"][0];
    assert_eq!(e["normalized"], "docker.io/library/nginx");
    assert_eq!(e["resolved"], Value::Null);
    assert!(e["error"].as_str().unwrap().contains("must be lowercase"));
    assert_eq!(e["rule"]["name"], "m");
}

#[test]
fn conflicts_and_invalid_rules_exit_1_and_are_reported() {
    let dir = temp_dir("conflict");
    let mapping = |name: &str, to: &str| {
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: {name}}}\nspec:\n  rules:\n  - match: {{repository: app}}\n    to: {to}\n"
        )
    };
    std::fs::write(dir.join("a.yaml"), mapping("a", "a.io/app")).unwrap();
    std::fs::write(dir.join("b.yml"), mapping("b", "b.io/app")).unwrap();
    let (code, v, err) = json(&["resolve", "-f", dir.to_str().unwrap(), "--image", "app:1"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["images"][0]["resolved"], "a.io/app:1");
    assert_eq!(v["images"][0]["conflicts"][0]["name"], "b");
    assert!(err.contains("Conflict"), "{err}");
    assert_eq!(
        err.matches("Conflict").count(),
        1,
        "one conflict, printed once: {err}"
    );
    assert_eq!(v["problems"].as_array().unwrap().len(), 2);

    let bad = temp_dir("badrule");
    std::fs::write(
        bad.join("m.yaml"),
        "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {name: m}\nspec:\n  rules:\n  - match: {regex: '('}\n    to: x\n",
    )
    .unwrap();
    let (code, v, err) = json(&["resolve", "-f", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(v["problems"][0]["reason"], "InvalidRule");
    assert!(err.contains("not a valid RE2"), "{err}");
}

#[test]
fn file_and_yaml_errors_exit_2_naming_file_and_document() {
    let (code, _, err) = imagemap(&["resolve", "-f", "does/not/exist.yaml"]);
    assert_eq!(code, 2);
    assert!(err.contains("does/not/exist.yaml"), "{err}");

    let dir = temp_dir("yaml");
    let file = dir.join("broken.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nkind: [\n",
    )
    .unwrap();
    let (code, _, err) = imagemap(&["resolve", "-f", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("broken.yaml: document 2"), "{err}");

    let (code, _, _) = imagemap(&["resolve", "--output", "xml"]);
    assert_eq!(code, 2);
}

#[test]
fn other_kinds_are_skipped_with_a_note() {
    let dir = temp_dir("skip");
    std::fs::write(
        dir.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "not yaml: [").unwrap();
    let (code, _, err) = imagemap(&["resolve", "-f", dir.to_str().unwrap(), "--image", "nginx"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("note: skipping v1 ConfigMap \"settings\""),
        "{err}"
    );
}

#[test]
fn crds_command_prints_the_committed_crds() {
    let (code, out, _) = imagemap(&["crds"]);
    assert_eq!(code, 0);
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crds/imagemap.dev.yaml"
    ))
    .unwrap();
    assert_eq!(out, committed);
}

#[test]
fn followed_tags_are_shown_offline() {
    let dir = temp_dir("follow");
    std::fs::write(
        dir.join("mapping.yaml"),
        r"apiVersion: imagemap.dev/v1alpha1
kind: ImageMapping
metadata: {name: constant-tag, namespace: dev}
spec:
  rules:
  - match: {repository: neondatabase/vm-compute-node-v17}
    to: k3d-neon-local-registry:5000/vm-compute-node-v17:dev
    followTag: true
",
    )
    .unwrap();
    let file = dir.join("mapping.yaml");
    let file = file.to_str().unwrap();
    let args = [
        "resolve",
        "-f",
        file,
        "-n",
        "dev",
        "--image",
        "neondatabase/vm-compute-node-v17:latest",
        "--image",
        "busybox",
    ];
    let (code, out, err) = imagemap(&args);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("k3d-neon-local-registry:5000/vm-compute-node-v17:dev (follows tag)"),
        "{out}"
    );
    let (_, v, _) = json(&args);
    assert_eq!(v["images"][0]["followTag"], true);
    assert_eq!(v["images"][1]["followTag"], false);
}

#[test]
fn a_registry_config_is_read_only_with_follow_tags_and_a_bad_one_stops_it() {
    let (code, _, err) = imagemap(&[
        "resolve",
        "--image",
        "busybox",
        "--registry-config",
        "config.json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--follow-tags"), "{err}");

    let dir = temp_dir("registry-config");
    let config = dir.join("config.json");
    std::fs::write(&config, r#"{"auths": {"r.example": {"password": 5}}}"#).unwrap();
    let config = config.to_str().unwrap();
    let follow = || {
        imagemap(&[
            "resolve",
            "--image",
            "busybox",
            "--follow-tags",
            "--registry-config",
            config,
        ])
    };
    let (code, _, err) = follow();
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "note: --registry-config {config}: entry \"r.example\": password is not a string"
        )),
        "{err}"
    );
    // A config that keeps its credentials in a credsStore has none to offer: a note.
    std::fs::write(dir.join("config.json"), r#"{"credsStore": "desktop"}"#).unwrap();
    let (code, _, err) = follow();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no \"auths\" object"), "{err}");
    std::fs::write(dir.join("config.json"), "{not json").unwrap();
    let (code, _, err) = follow();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "error: --registry-config {config}: not JSON (line 1, column 2)"
        )),
        "{err}"
    );
}

#[test]
fn the_local_registry_configmap_in_the_files_names_one_registry_three_ways() {
    let dir = temp_dir("local-registry");
    std::fs::write(
        dir.join("hosting.yaml"),
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: local-registry-hosting, namespace: kube-public}
data:
  localRegistryHosting.v1: |
    host: "localhost:5000"
    hostFromContainerRuntime: "k3d-neon-local-registry:5000"
    hostFromClusterNetwork: "k3d-neon-local-registry:5000"
    help: "https://k3d.io/stable/usage/registries/"
---
apiVersion: imagemap.dev/v1alpha1
kind: ImageMapping
metadata: {name: laptop, namespace: dev}
spec:
  rules:
  - match: {repository: neondatabase/vm-compute-node-v17}
    to: localhost:5000/vm-compute-node-v17:dev
    followTag: true
"#,
    )
    .unwrap();
    let dir = dir.to_str().unwrap();
    // A rule written with `host`, an image named by `host`: pods get the runtime's name;
    // with --allowed-registries naming none, the local registry is still followed.
    let (code, v, err) = json(&[
        "resolve",
        "-f",
        dir,
        "-n",
        "dev",
        "--allowed-registries",
        "ghcr.io",
        "--image",
        "neondatabase/vm-compute-node-v17",
        "--image",
        "localhost:5000/other:1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        v["images"][0]["resolved"],
        "k3d-neon-local-registry:5000/vm-compute-node-v17:dev"
    );
    assert_eq!(v["images"][0]["followTag"], true);
    assert_eq!(
        v["images"][1]["resolved"],
        "k3d-neon-local-registry:5000/other:1"
    );
    assert!(!err.contains("skipping"), "the ConfigMap is read: {err}");
    // A hosting document that names no host[:port] is an error in that file.
    std::fs::write(
        format!("{dir}/hosting.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local-registry-hosting, namespace: kube-public}\ndata:\n  localRegistryHosting.v1: 'host: not a host'\n",
    )
    .unwrap();
    let (code, _, err) = imagemap(&["resolve", "-f", dir]);
    assert_eq!(code, 2);
    assert!(err.contains("host[:port]"), "{err}");
}

#[test]
fn pods_and_workloads_pod_templates_are_resolved_container_by_container() {
    let dir = temp_dir("workloads");
    std::fs::write(
        dir.join("all.yaml"),
        r#"
apiVersion: imagemap.dev/v1alpha1
kind: ImageMapping
metadata: {name: mirror, namespace: dev}
spec:
  rules:
  - match: {repository: nginx}
    to: mirror.io/nginx
  - match: {repository: busybox}
    to: mirror.io/busybox
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: dev}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      initContainers: [{name: setup, image: busybox}]
      containers: [{name: app, image: "nginx:1.27"}, {name: cache, image: memcached}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: dev}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        spec: {containers: [{name: job, image: busybox}], restartPolicy: Never}
---
apiVersion: v1
kind: Pod
metadata: {name: opted-out, namespace: dev, labels: {imagemap.dev/skip: "true"}}
spec: {containers: [{name: app, image: nginx}]}
"#,
    )
    .unwrap();
    let path = dir.join("all.yaml");
    let file = path.to_str().unwrap();
    let (code, value, err) = json(&["resolve", "-f", file]);
    assert_eq!(code, 0, "{value}\n{err}");
    let workloads = value["workloads"].as_array().unwrap();
    let find = |kind: &str, name: &str| {
        workloads
            .iter()
            .find(|w| w["kind"] == kind && w["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} in {value}"))
    };
    let web = &find("Deployment", "web")["images"];
    assert_eq!(web[0]["slot"], "init:setup");
    assert_eq!(web[0]["resolved"], "mirror.io/busybox");
    assert_eq!(web[1]["resolved"], "mirror.io/nginx:1.27");
    assert_eq!(web[1]["source"]["name"], "mirror");
    assert_eq!(web[2]["source"], Value::Null);
    assert_eq!(
        find("CronJob", "nightly")["images"][0]["resolved"],
        "mirror.io/busybox"
    );
    // A pod that opts out of its namespace's rules keeps its image.
    assert_eq!(find("Pod", "opted-out")["images"][0]["source"], Value::Null);
    // The table names each workload by kind.
    let (code, out, _) = imagemap(&["resolve", "-f", file]);
    assert_eq!(code, 0);
    assert!(out.contains("Deployment dev/web"), "{out}");
    assert!(out.contains("CONTAINER"), "{out}");
}

#[test]
fn neonvm_virtual_machines_resolve_slot_by_slot_as_admission_maps_their_runner_pods() {
    let (code, v, err) = json(&["resolve", "-f", "examples/"]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert!(!err.contains("vm.neon.tech"), "not skipped: {err}");
    let vms = v["neonvmVirtualMachines"].as_array().unwrap();
    let compute = vms
        .iter()
        .find(|vm| vm["namespace"] == "dev-neonvm" && vm["name"] == "compute")
        .unwrap_or_else(|| panic!("{vms:?}"));
    let disk = &compute["images"][0];
    assert_eq!(disk["slot"], "rootDisk");
    assert_eq!(disk["requested"], "neondatabase/vm-compute-node-v17:latest");
    // The constant-tag mapping (priority 1) wins over the unique-tag one.
    assert_eq!(
        disk["resolved"],
        "k3d-neon-local-registry:5000/vm-compute-node-v17:dev"
    );
    assert_eq!(disk["source"]["kind"], "ImageMapping");
    assert_eq!(disk["source"]["namespace"], "dev-neonvm");
    assert_eq!(disk["source"]["name"], "neonvm-compute-constant");
    assert_eq!(disk["source"]["rule"], 0);
    // No runner image named, and no default given: the runner slot is not shown; with
    // the operator's default, it is.
    assert_eq!(compute["images"].as_array().unwrap().len(), 1);
    let (_, v, _) = json(&[
        "resolve",
        "-f",
        "examples/neonvm",
        "--neonvm-default-runner-image",
        "neondatabase/neonvm-runner:v1",
    ]);
    let slots: Vec<&str> = v["neonvmVirtualMachines"][0]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slot"].as_str().unwrap())
        .collect();
    assert_eq!(slots, ["rootDisk", "runner"]);
    // And the table.
    let (_, out, _) = imagemap(&["resolve", "-f", "examples/neonvm"]);
    assert!(
        out.contains("NEONVM VIRTUALMACHINE")
            && out.contains("dev-neonvm/compute")
            && out.contains("ImageMapping dev-neonvm/neonvm-compute-constant rule 0"),
        "{out}"
    );
}
