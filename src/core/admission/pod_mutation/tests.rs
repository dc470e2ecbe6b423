#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;
use crate::core::admission::pod_view::Admission;
use crate::core::fixtures::repository_mapping;
use crate::core::pod::records::SKIP_LABEL;
use crate::core::rules::{CompileOptions, MappingInput, MappingScope, RuleRef, RuleSet};

fn rules(inputs: &[MappingInput]) -> RuleSet {
    RuleSet::compile(inputs, &CompileOptions::default())
}

fn cluster_mapping(name: &str, repo: &str, to: &str) -> MappingInput {
    MappingInput {
        scope: MappingScope::Cluster,
        namespace: None,
        ..repository_mapping(name, repo, to, false)
    }
}

fn regex_mapping(name: &str, regex: &str, to: &str) -> MappingInput {
    let mut m = repository_mapping(name, "unused", to, false);
    m.rules[0].match_ = crate::core::api::RuleMatch {
        regex: Some(regex.into()),
        ..Default::default()
    };
    m
}

/// Rules that rewrite every Docker Hub library image to a registry outside the only one
/// allowed: each such container cannot be mapped.
fn outside_the_allowed_registries() -> RuleSet {
    RuleSet::compile(
        &[regex_mapping(
            "out",
            r"^docker\.io/library/(.*)$",
            "elsewhere.io/$1",
        )],
        &CompileOptions {
            allowed_registries: crate::core::allowed_registries::AllowedRegistries::only(vec![
                "mirror.io".into(),
            ]),
            ..CompileOptions::default()
        },
    )
}

fn no_digest(_: &str, _: Option<&RuleRef>, _: &str) -> Option<String> {
    None
}

fn no_runner(_: &str, _: &str) -> Option<BTreeMap<String, String>> {
    None
}

fn pod(spec: &Value) -> Value {
    json!({"metadata": {"name": "p", "namespace": "dev"}, "spec": spec})
}

fn decide_create(set: &RuleSet, pod: &Value) -> Decision {
    let labels = BTreeMap::from([("kubernetes.io/metadata.name".into(), "dev".into())]);
    decide(
        &Admission {
            rules: set,
            namespace_labels: &|_: &str| labels.clone(),
            digest_of: &no_digest,
            runner_images: &no_runner,
        },
        &PodRequest {
            namespace: "dev",
            pod,
            change: PodChange::Create,
        },
    )
}

/// The pod after `decision`'s patch.
fn patched(pod: &Value, decision: &Decision) -> Value {
    let mut out = pod.clone();
    json_patch::patch(&mut out, &decision.patch).unwrap();
    out
}

#[test]
fn init_containers_and_containers_are_rewritten_and_recorded() {
    let set = rules(&[
        repository_mapping("m", "busybox", "mirror.io/busybox", false),
        repository_mapping("n", "nginx", "mirror.io/nginx", false),
    ]);
    let p = pod(&json!({
        "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
        "containers": [{"name": "web", "image": "nginx:1.27"}, {"name": "other", "image": "redis"}],
    }));
    let d = decide_create(&set, &p);
    assert_eq!(d.outcome, Outcome::Mutated);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let after = patched(&p, &d);
    assert_eq!(
        after["spec"]["initContainers"][0]["image"],
        "mirror.io/busybox:1.36"
    );
    assert_eq!(
        after["spec"]["containers"][0]["image"],
        "mirror.io/nginx:1.27"
    );
    assert_eq!(
        after["spec"]["containers"][1]["image"], "redis",
        "spelled as asked"
    );
    let annotations = &after["metadata"]["annotations"];
    let originals: BTreeMap<String, String> =
        serde_json::from_str(annotations[ORIGINAL_IMAGES].as_str().unwrap()).unwrap();
    assert_eq!(
        originals,
        BTreeMap::from([
            ("init:setup".into(), "busybox:1.36".into()),
            ("web".into(), "nginx:1.27".into()),
        ])
    );
    let rules_of: BTreeMap<String, String> =
        serde_json::from_str(annotations[IMAGE_RULES].as_str().unwrap()).unwrap();
    assert_eq!(rules_of["web"], "ImageMapping dev/n rule 0");
    assert_eq!(after["metadata"]["labels"][MAPPED_LABEL], MAPPED);
}

#[test]
fn a_pod_no_rule_matches_is_not_patched() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        false,
    )]);
    let p = pod(&json!({"containers": [{"name": "web", "image": "nginx"}]}));
    let d = decide_create(&set, &p);
    assert_eq!(d.outcome, Outcome::Unchanged);
    assert!(d.patch.0.is_empty(), "{:?}", d.patch);
}

#[test]
fn reinvocation_resolves_from_the_recorded_original_so_mapping_stays_single_pass() {
    // a → b and b → a: a second invocation must not map b back to a.
    let set = rules(&[
        repository_mapping("ab", "a.io/app", "b.io/app", false),
        repository_mapping("ba", "b.io/app", "a.io/app", false),
    ]);
    let p = pod(&json!({"containers": [{"name": "app", "image": "a.io/app:1"}]}));
    let first = decide_create(&set, &p);
    let once = patched(&p, &first);
    assert_eq!(once["spec"]["containers"][0]["image"], "b.io/app:1");
    // Another webhook adds a container; the API server calls again.
    let mut again = once.clone();
    again["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "b.io/app:2"}));
    let second = decide_create(&set, &again);
    let twice = patched(&again, &second);
    assert_eq!(
        twice["spec"]["containers"][0]["image"], "b.io/app:1",
        "not mapped back"
    );
    assert_eq!(
        twice["spec"]["containers"][1]["image"], "a.io/app:2",
        "the new one mapped"
    );
    let originals: BTreeMap<String, String> = serde_json::from_str(
        twice["metadata"]["annotations"][ORIGINAL_IMAGES]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(originals["app"], "a.io/app:1");
    assert_eq!(originals["sidecar"], "b.io/app:2");
    // Called once more with nothing new: nothing to do.
    let third = decide_create(&set, &twice);
    assert_eq!(patched(&twice, &third), twice);
}

#[test]
fn a_container_that_cannot_be_mapped_is_admitted_unchanged_with_a_warning() {
    let set = outside_the_allowed_registries();
    let p = pod(
        &json!({"containers": [{"name": "app", "image": "busybox"}, {"name": "x", "image": "::not a ref"}]}),
    );
    let d = decide_create(&set, &p);
    assert_eq!(d.outcome, Outcome::Unchanged, "{d:?}");
    assert_eq!(patched(&p, &d), p, "nothing recorded, nothing changed");
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(
        d.warnings[0].contains("container app (busybox) is not mapped"),
        "{:?}",
        d.warnings
    );
    assert!(d.warnings[1].contains("container x"), "{:?}", d.warnings);
}

#[test]
fn duplicate_container_names_leave_the_pod_alone() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        false,
    )]);
    let p = pod(
        &json!({"containers": [{"name": "a", "image": "busybox"}, {"name": "a", "image": "busybox"}]}),
    );
    let d = decide_create(&set, &p);
    assert!(d.patch.0.is_empty());
    assert!(
        d.warnings[0].contains("share names (a)"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn the_skip_label_opts_out_of_the_namespaces_rules_never_the_clusters() {
    let set = rules(&[
        repository_mapping("ns", "busybox", "tenant.io/busybox", false),
        cluster_mapping("admin", "nginx", "mirror.io/nginx"),
    ]);
    let p = json!({
        "metadata": {"labels": {SKIP_LABEL: "true"}},
        "spec": {"containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "nginx"}]},
    });
    let after = patched(&p, &decide_create(&set, &p));
    assert_eq!(after["spec"]["containers"][0]["image"], "busybox");
    assert_eq!(after["spec"]["containers"][1]["image"], "mirror.io/nginx");
}

#[test]
fn dry_run_mappings_change_no_image_but_label_and_count_the_pod() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        true,
    )]);
    let p = pod(&json!({"containers": [{"name": "a", "image": "busybox"}]}));
    let d = decide_create(&set, &p);
    assert_eq!(d.outcome, Outcome::Unchanged);
    assert_eq!(d.dry_run, 1);
    let after = patched(&p, &d);
    assert_eq!(after["spec"], p["spec"]);
    assert_eq!(after["metadata"]["labels"][MAPPED_LABEL], DRY_RUN);
    assert!(after["metadata"].get("annotations").is_none());
}

#[test]
fn a_followed_tag_is_pinned_from_memory_or_admitted_as_written_and_counted() {
    let mut follow = repository_mapping("m", "app", "mirror.io/app:dev", false);
    follow.rules[0].follow_tag = true;
    let set = RuleSet::compile(
        &[follow],
        &CompileOptions {
            allowed_registries: crate::core::allowed_registries::AllowedRegistries::only(vec![
                "mirror.io".into(),
            ]),
            follow_needs_list: true,
            local_registry: None,
        },
    );
    let p = pod(&json!({"containers": [{"name": "a", "image": "app"}]}));
    let unknown = decide_create(&set, &p);
    assert_eq!(
        unknown
            .unpinned
            .iter()
            .map(|f| f.reference.as_str())
            .collect::<Vec<_>>(),
        ["mirror.io/app:dev"]
    );
    assert_eq!(
        patched(&p, &unknown)["spec"]["containers"][0]["image"],
        "mirror.io/app:dev"
    );
    let digest = format!("sha256:{}", "a".repeat(64));
    let known = |_: &str, _: Option<&RuleRef>, _: &str| Some(digest.clone());
    let labels = BTreeMap::new();
    let d = decide(
        &Admission {
            rules: &set,
            namespace_labels: &|_: &str| labels.clone(),
            digest_of: &known,
            runner_images: &no_runner,
        },
        &PodRequest {
            namespace: "dev",
            pod: &p,
            change: PodChange::Create,
        },
    );
    assert!(d.unpinned.is_empty());
    assert_eq!(
        patched(&p, &d)["spec"]["containers"][0]["image"],
        format!("mirror.io/app:dev@{digest}")
    );
}

#[test]
fn only_the_ephemeral_containers_a_request_adds_are_mapped_and_told_in_warnings() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        false,
    )]);
    let old = pod(&json!({
        "containers": [{"name": "web", "image": "busybox"}],
        "ephemeralContainers": [{"name": "debug1", "image": "busybox"}],
    }));
    let mut new = old.clone();
    new["spec"]["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "debug2", "image": "busybox:1.36"}));
    let labels = BTreeMap::new();
    let d = decide(
        &Admission {
            rules: &set,
            namespace_labels: &|_: &str| labels.clone(),
            digest_of: &no_digest,
            runner_images: &no_runner,
        },
        &PodRequest {
            namespace: "dev",
            pod: &new,
            change: PodChange::EphemeralContainers { old: &old },
        },
    );
    assert_eq!(d.outcome, Outcome::Mutated);
    let after = patched(&new, &d);
    assert_eq!(
        after["spec"]["ephemeralContainers"][0]["image"], "busybox",
        "not added now"
    );
    assert_eq!(
        after["spec"]["ephemeralContainers"][1]["image"],
        "mirror.io/busybox:1.36"
    );
    assert_eq!(
        after["spec"]["containers"][0]["image"], "busybox",
        "running: never"
    );
    assert!(after["metadata"].get("annotations").is_none());
    assert!(
        d.warnings[0].contains("ephemeral container ephemeral:debug2 runs mirror.io/busybox:1.36"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn records_that_would_not_fit_leave_the_pod_unchanged_with_a_warning() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        false,
    )]);
    let containers: Vec<Value> = (0..200)
        .map(|i| json!({"name": format!("container-with-a-long-name-{i}"), "image": "busybox"}))
        .collect();
    let p = pod(&json!({"containers": containers}));
    let d = decide_create(&set, &p);
    assert_eq!(d.outcome, Outcome::Unchanged);
    assert!(d.patch.0.is_empty());
    assert!(
        d.warnings[0].contains("over the 8192-byte bound"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_record_stands_only_while_the_container_runs_what_the_rules_make_of_it() {
    let set = rules(&[
        repository_mapping("n", "nginx", "mirror.io/nginx", false),
        cluster_mapping("admin", "busybox", "mirror.io/busybox"),
    ]);
    // A copy of a mapped pod whose image the user set since (`kubectl debug --copy-to
    // --set-image`): the image set is what is asked for.
    let copied = json!({
        "metadata": {"annotations": {ORIGINAL_IMAGES: r#"{"app":"nginx:1.27"}"#}},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
    });
    let after = patched(&copied, &decide_create(&set, &copied));
    assert_eq!(
        after["spec"]["containers"][0]["image"],
        "mirror.io/busybox:1.36"
    );
    assert_eq!(
        after["metadata"]["annotations"][ORIGINAL_IMAGES],
        r#"{"app":"busybox:1.36"}"#
    );
    // A record that maps to nothing escapes no rule.
    let forged = json!({
        "metadata": {"annotations": {ORIGINAL_IMAGES: r#"{"app":"::not a reference"}"#}},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    });
    let d = decide_create(&set, &forged);
    assert_eq!(
        patched(&forged, &d)["spec"]["containers"][0]["image"],
        "mirror.io/busybox"
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn warnings_and_containers_are_bounded() {
    let set = outside_the_allowed_registries();
    let containers: Vec<Value> = (0..20)
        .map(|i| json!({"name": format!("c{i}"), "image": "busybox"}))
        .collect();
    let d = decide_create(&set, &pod(&json!({"containers": containers})));
    assert_eq!(d.warnings.len(), MAX_WARNINGS + 1);
    assert_eq!(d.warnings[MAX_WARNINGS], "imagemap: and 12 more warnings");

    let many: Vec<Value> = (0..=MAX_SLOTS)
        .map(|i| json!({"name": format!("c{i}"), "image": "busybox"}))
        .collect();
    let d = decide_create(&set, &pod(&json!({"containers": many})));
    assert!(d.patch.0.is_empty());
    assert!(d.warnings[0].contains("over the 512"), "{:?}", d.warnings);
}

/// A NeonVM runner pod of VM `compute` (or a migration's target pod), with a root disk, a
/// kernel and the runner.
fn runner_pod(controller: &str) -> Value {
    json!({
        "metadata": {"name": "compute-x", "namespace": "dev", "ownerReferences": [
            {"apiVersion": "vm.neon.tech/v1", "kind": controller, "name": "move-or-compute",
             "uid": "u", "controller": true},
            {"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine", "name": "compute", "uid": "v"}]},
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox:1"},
                               {"name": "init-kernel", "image": "kernel:1"}],
            "containers": [{"name": "neonvm-runner", "image": "runner:1"}],
        },
    })
}

#[test]
fn a_neonvm_runner_pod_is_mapped_by_the_vms_slots() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        false,
    )]);
    let p = runner_pod("VirtualMachine");
    let d = decide_create(&set, &p);
    let after = patched(&p, &d);
    assert_eq!(
        after["spec"]["initContainers"][0]["image"],
        "mirror.io/busybox:1"
    );
    let originals: BTreeMap<String, String> = serde_json::from_str(
        after["metadata"]["annotations"][ORIGINAL_IMAGES]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        originals,
        BTreeMap::from([("rootDisk".to_string(), "busybox:1".to_string())])
    );
}

#[test]
fn a_migrations_target_pod_runs_what_its_source_runs_not_what_the_rules_say() {
    let set = rules(&[repository_mapping(
        "m",
        "busybox",
        "mirror.io/busybox",
        false,
    )]);
    let p = runner_pod("VirtualMachineMigration");
    let labels = BTreeMap::new();
    let source = |ns: &str, vm: &str| {
        assert_eq!((ns, vm), ("dev", "compute"));
        Some(BTreeMap::from([
            ("rootDisk".to_string(), "old.io/disk:7".to_string()),
            ("runner".to_string(), "runner:1".to_string()),
        ]))
    };
    let d = decide(
        &Admission {
            rules: &set,
            namespace_labels: &|_: &str| labels.clone(),
            digest_of: &no_digest,
            runner_images: &source,
        },
        &PodRequest {
            namespace: "dev",
            pod: &p,
            change: PodChange::Create,
        },
    );
    let after = patched(&p, &d);
    assert_eq!(after["spec"]["initContainers"][0]["image"], "old.io/disk:7");
    assert_eq!(
        after["spec"]["initContainers"][1]["image"], "kernel:1",
        "not in the source: left"
    );
    assert_eq!(d.patch.0.len(), 1, "{:?}", d.patch);
    // A container the source has no slot for goes through the rules: an owner reference
    // anyone can write escapes no rule.
    let mut forged = p.clone();
    forged["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "extra", "image": "busybox:2"}));
    let d = decide(
        &Admission {
            rules: &set,
            namespace_labels: &|_: &str| labels.clone(),
            digest_of: &no_digest,
            runner_images: &source,
        },
        &PodRequest {
            namespace: "dev",
            pod: &forged,
            change: PodChange::Create,
        },
    );
    let after = patched(&forged, &d);
    assert_eq!(
        after["spec"]["containers"][1]["image"],
        "mirror.io/busybox:2"
    );
    assert_eq!(after["spec"]["initContainers"][0]["image"], "old.io/disk:7");
    // Its source unknown: the rules map it.
    let d = decide_create(&set, &p);
    assert_eq!(
        patched(&p, &d)["spec"]["initContainers"][0]["image"],
        "mirror.io/busybox:1"
    );
}

#[test]
fn a_refused_rule_that_would_have_decided_a_container_is_told_and_counted() {
    let set = RuleSet::compile(
        &[repository_mapping(
            "evil",
            "acme/evil",
            "evil.io/evil",
            false,
        )],
        &CompileOptions {
            allowed_registries: crate::core::allowed_registries::AllowedRegistries::only(vec![
                "mirror.io".into(),
            ]),
            ..CompileOptions::default()
        },
    );
    let p = pod(&json!({"containers": [
        {"name": "app", "image": "acme/evil:1"},
        {"name": "other", "image": "nginx"},
    ]}));
    let d = decide_create(&set, &p);
    assert_eq!(d.outcome, Outcome::Unchanged);
    assert_eq!(
        d.warnings,
        [
            "imagemap: container app (acme/evil:1): ImageMapping dev/evil rule 0 matches but is refused: rewrites to registry evil.io, which is not in the operator's allowed registries"
        ]
    );
    assert_eq!(d.warned, BTreeMap::from([(REFUSED_RULE, 1)]));
}
