//! The CRDs and examples on a real kube-apiserver + etcd: install with kubectl, schema and
//! CEL validation, status subresources and generations through a kube-rs client.
//!
//! Run with `scripts/test` (these tests are ignored by a plain `cargo test`).

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::fmt::Debug;

use imagemap::core::api::{
    ClusterImageMapping, ClusterImageMappingSpec, Guest, ImageMapping, ImageMappingSpec,
    MappingRule, RootDisk, RuleMatch, VirtualMachine, VirtualMachineSpec,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use support::*;

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn crds_and_examples_install_with_kubectl() {
    let client = client().await;
    install_crds(&client).await;
    kubectl_ok(&["apply", "-f", "examples/"]);

    let listed = kubectl_ok(&["get", "imagemap", "-A"]);
    for name in [
        "tilt-dev",
        "registry-mirror",
        "compute-dev",
        "compute-stable",
    ] {
        assert!(
            listed.contains(name),
            "`kubectl get imagemap -A` lacks {name}:\n{listed}"
        );
    }
    let mappings = kubectl_ok(&["get", "imagemappings", "-A"]);
    let header = mappings.lines().next().unwrap_or_default();
    for column in ["RULES", "AFFECTED-VMS", "READY", "AGE"] {
        assert!(
            header.contains(column),
            "ImageMapping columns lack {column}: {header}"
        );
    }
    let cluster = kubectl_ok(&["get", "cimgmap"]);
    assert!(
        cluster
            .lines()
            .next()
            .unwrap_or_default()
            .contains("AFFECTED-VMS"),
        "{cluster}"
    );
    let vms = kubectl_ok(&["get", "imvm", "-n", "dev"]);
    let header = vms.lines().next().unwrap_or_default();
    for column in ["PHASE", "POD", "LIVERELOAD", "READY", "AGE"] {
        assert!(
            header.contains(column),
            "VirtualMachine columns lack {column}: {header}"
        );
    }
    assert!(
        !header.contains("ROOTDISK"),
        "image columns belong to -o wide: {header}"
    );
    let wide = kubectl_ok(&["get", "imvm", "-n", "dev", "-o", "wide"]);
    let header = wide.lines().next().unwrap_or_default();
    assert!(
        header.contains("ROOTDISK") && header.contains("RUNNER"),
        "{header}"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn invalid_manifests_are_rejected_with_clear_messages() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "invalid").await;
    let dir = std::path::Path::new(REPO).join("tests/invalid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "the table holds {} manifests",
        files.len()
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} must start with `# expect: <fragment>`", file.display()))
            .to_string();
        let out = kubectl(&["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} was accepted", file.display());
        assert!(
            stderr.contains(&expect),
            "{}: the API server said\n{stderr}\nwhich lacks\n{expect}",
            file.display()
        );
    }
}

/// Create → status by server-side apply → spec change bumps generation → status change
/// does not.
async fn round_trip<K>(
    api: Api<K>,
    object: K,
    spec_patch: serde_json::Value,
    status: serde_json::Value,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = object.name_any();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    let generation = created.meta().generation.unwrap();

    let ssa = PatchParams::apply("imagemap-tests").force();
    let status_patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let after_status = api
        .patch_status(&name, &ssa, &Patch::Apply(&status_patch))
        .await
        .unwrap();
    assert_eq!(
        after_status.meta().generation,
        Some(generation),
        "a status write must not bump generation"
    );
    let stored = serde_json::to_value(&after_status).unwrap();
    for (k, v) in status.as_object().unwrap() {
        assert_eq!(&stored["status"][k], v, "status.{k} round-trips");
    }

    let after_spec = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": spec_patch })),
        )
        .await
        .unwrap();
    assert_eq!(
        after_spec.meta().generation,
        Some(generation + 1),
        "a spec change bumps generation"
    );
    let stored = serde_json::to_value(&after_spec).unwrap();
    for (k, v) in status.as_object().unwrap() {
        assert_eq!(&stored["status"][k], v, "a spec write keeps status.{k}");
    }

    // The original spec sent to the status subresource is ignored.
    let original_spec = serde_json::to_value(&object).unwrap()["spec"].clone();
    let sneaky =
        json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "spec": original_spec});
    let after = api
        .patch_status(&name, &ssa, &Patch::Apply(&sneaky))
        .await
        .unwrap();
    assert_eq!(after.meta().generation, Some(generation + 1));
    assert_eq!(
        serde_json::to_value(&after).unwrap()["spec"],
        stored["spec"]
    );
}

fn rule(repository: &str, to: &str) -> MappingRule {
    MappingRule {
        match_: RuleMatch {
            repository: Some(repository.into()),
            ..Default::default()
        },
        to: Some(to.into()),
        ..Default::default()
    }
}

fn namespaced<K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>>(
    client: &kube::Client,
    ns: &str,
) -> Api<K> {
    Api::namespaced(client.clone(), ns)
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn each_kind_round_trips_through_kube_rs() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "roundtrip").await;

    let mapping = ImageMapping::new(
        "m",
        ImageMappingSpec {
            rules: vec![rule("app", "mirror.io/app")],
            ..Default::default()
        },
    );
    round_trip(
        namespaced::<ImageMapping>(&client, &ns),
        mapping,
        json!({"priority": 3}),
        json!({"observedGeneration": 1, "ruleCount": 1, "affectedVMs": 0,
               "conditions": [{"type": "Ready", "status": "True", "reason": "RulesValid", "message": "",
                               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}),
    )
    .await;

    let cluster_name = format!("{ns}-cluster");
    let cluster = ClusterImageMapping::new(
        &cluster_name,
        ClusterImageMappingSpec {
            rules: vec![rule("app", "mirror.io/app")],
            ..Default::default()
        },
    );
    round_trip(
        Api::<ClusterImageMapping>::all(client.clone()),
        cluster,
        json!({"priority": 3}),
        json!({"observedGeneration": 1, "ruleCount": 1, "awaitingRestart": ["dev/vm"]}),
    )
    .await;

    let vm = VirtualMachine::new(
        "vm",
        VirtualMachineSpec {
            guest: Guest {
                root_disk: RootDisk {
                    image: "disk:1".into(),
                    image_pull_policy: None,
                },
                kernel_image: None,
            },
            ..Default::default()
        },
    );
    round_trip(
        namespaced::<VirtualMachine>(&client, &ns),
        vm,
        json!({"liveReload": true}),
        json!({"phase": "Pending", "podName": "vm-abcde", "restartCount": 0, "observedGeneration": 1,
               "resolvedImages": [{"slot": "rootDisk", "requested": "disk:1", "resolved": "docker.io/library/disk:1"}]}),
    )
    .await;

    // Defaults are applied by the API server from the schema.
    let stored = namespaced::<VirtualMachine>(&client, &ns)
        .get("vm")
        .await
        .unwrap();
    assert_eq!(
        stored.spec.restart_policy,
        imagemap::core::api::RestartPolicy::Always
    );
}
