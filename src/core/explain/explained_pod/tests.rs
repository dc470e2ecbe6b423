#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::core::admission::scope::Skip;
use crate::core::explain::pod_facts::PodFacts;
use crate::core::fixtures::repository_mapping;
use crate::core::pod::records::{ANNOTATIONS_LIMIT, ORIGINAL_IMAGES};
use crate::core::rules::{CompileOptions, RuleSet};

fn rules() -> RuleSet {
    let mut follow = repository_mapping("follow", "app", "mirror.io/app:dev", false);
    follow.rules[0].follow_tag = true;
    RuleSet::compile(
        &[
            repository_mapping("m", "nginx", "mirror.io/nginx", false),
            repository_mapping("dry", "redis", "mirror.io/redis", true),
            repository_mapping("evil", "acme/evil", "evil.io/evil", false),
            follow,
        ],
        &CompileOptions {
            allowed_registries: crate::core::allowed_registries::AllowedRegistries::only(vec![
                "mirror.io".into(),
            ]),
            ..CompileOptions::default()
        },
    )
}

fn pod(value: &serde_json::Value) -> PodFacts {
    let mut pod =
        json!({"metadata": {"name": "p", "namespace": "dev"}, "spec": {"containers": []}});
    json_patch::merge(&mut pod, value);
    PodFacts::of_pod(&serde_json::from_value(pod).unwrap())
}

fn containers(images: &[&str]) -> serde_json::Value {
    let list: Vec<serde_json::Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({"spec": {"containers": list}})
}

/// The verdicts of `pod`'s slots, by name.
fn verdicts(pod: &PodFacts) -> Vec<&'static str> {
    let set = rules();
    let labels = |ns: &str| crate::core::slot_resolution::namespace_labels(ns, &BTreeMap::new());
    let admission = Admission::without_digests(&set, &labels);
    let scope = SentNamespaces::of(&[None], Some("imagemap-system"));
    let ctx = Explaining {
        admission: &admission,
        sent: Some(&scope),
        rules_unread: None,
        scope_unread: None,
        status_problem: &|_| None,
        mapping_created: &|_| None,
    };
    explain(&ctx, pod)
        .into_iter()
        .map(|s| s.verdict.name())
        .collect()
}

#[test]
fn every_way_admission_leaves_a_pod_as_it_is_has_a_verdict() {
    // Every skip of admission::scope.
    for skip in Skip::ALL {
        let (facts, verdict) = match skip {
            Skip::ExcludedNamespace => (
                pod(
                    &json!({"metadata": {"namespace": "kube-system"}, "spec": {"containers": [{"name": "a", "image": "nginx"}]}}),
                ),
                "namespace-never-sent",
            ),
            // A running pod's images are what its creation's admission made of them.
            Skip::OtherRequest => (
                pod(&json!({
                    "metadata": {"annotations": {ORIGINAL_IMAGES: r#"{"a":"nginx"}"#}},
                    "spec": {"containers": [{"name": "a", "image": "mirror.io/nginx"}]},
                })),
                "mapped-current",
            ),
            Skip::MirrorPod => (
                pod(&json!({
                    "metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}},
                    "spec": {"containers": [{"name": "a", "image": "nginx"}]},
                })),
                "left-alone-by-design",
            ),
            Skip::OwnVirtualMachine => (
                pod(&json!({
                    "metadata": {"ownerReferences": [{"apiVersion": "imagemap.dev/v1alpha1",
                        "kind": "VirtualMachine", "name": "vm", "uid": "u", "controller": true}]},
                    "spec": {"containers": [{"name": "a", "image": "nginx"}]},
                })),
                "left-alone-by-design",
            ),
        };
        assert_eq!(verdicts(&facts), [verdict], "{skip:?}");
    }
    // Every way pod_mutation leaves a pod or a container unchanged.
    let many: Vec<String> = (0..=MAX_SLOTS).map(|_| "busybox".to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(
        verdicts(&pod(&containers(&many)))
            .iter()
            .all(|v| *v == "not-mapped-whole")
    );
    let shared = pod(&json!({"spec": {"containers": [
        {"name": "a", "image": "nginx"}, {"name": "a", "image": "busybox"}]}}));
    assert_eq!(verdicts(&shared), ["not-mapped-whole", "not-mapped-whole"]);
    // Records over 8 KiB: 300 containers a rule maps.
    let mapped: Vec<String> = (0..300).map(|i| format!("nginx:{i}")).collect();
    let mapped: Vec<&str> = mapped.iter().map(String::as_str).collect();
    assert!(
        verdicts(&pod(&containers(&mapped)))
            .iter()
            .all(|v| *v == "not-mapped-whole")
    );
    // Annotations full.
    let full = pod(&json!({
        "metadata": {"annotations": {"big": "x".repeat(ANNOTATIONS_LIMIT - 10)}},
        "spec": {"containers": [{"name": "a", "image": "nginx"}]},
    }));
    assert_eq!(verdicts(&full), ["not-mapped-whole"]);
    // A container a refused rule matches; none matches; a dry-run mapping would.
    assert_eq!(
        verdicts(&pod(&containers(&["acme/evil:1"]))),
        ["rule-refused"]
    );
    assert_eq!(verdicts(&pod(&containers(&["ngnix"]))), ["no-rule-matches"]);
    assert_eq!(verdicts(&pod(&containers(&["redis"]))), ["dry-run"]);
    // A pod opted out of its namespace's rules.
    let opted_out = pod(&json!({
        "metadata": {"labels": {"imagemap.dev/skip": "true"}},
        "spec": {"containers": [{"name": "a", "image": "nginx"}]},
    }));
    assert_eq!(verdicts(&opted_out), ["opted-out"]);
    // Mapped to a followed tag no digest was held for.
    let unpinned = pod(&json!({
        "metadata": {"annotations": {ORIGINAL_IMAGES: r#"{"a":"app:1"}"#}},
        "spec": {"containers": [{"name": "a", "image": "mirror.io/app:dev"}]},
    }));
    assert_eq!(verdicts(&unpinned), ["followed-tag-not-pinned"]);
    // And a pod a rule would map that records nothing.
    assert_eq!(
        verdicts(&pod(&containers(&["nginx"]))),
        ["not-mapped-at-admission"]
    );
}

#[test]
fn a_stale_pod_says_what_happens_to_it_by_its_owner_and_label() {
    let stale = |labels: serde_json::Value, owner: serde_json::Value| {
        pod(&json!({
            "metadata": {"labels": labels, "ownerReferences": owner,
                         "annotations": {ORIGINAL_IMAGES: r#"{"a":"nginx"}"#}},
            "spec": {"containers": [{"name": "a", "image": "old.io/nginx"}]},
        }))
    };
    let rs = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": true}]);
    let live = json!({"imagemap.dev/live-reload": "true"});
    assert_eq!(verdicts(&stale(live.clone(), rs.clone())), ["mapped-stale"]);
    assert_eq!(verdicts(&stale(json!({}), rs)), ["stale-new-pods-only"]);
    assert_eq!(verdicts(&stale(live, json!([]))), ["mapped-stale"]);
}

#[test]
fn what_cannot_be_read_is_unknown_never_no_rule() {
    let set = rules();
    let labels = |ns: &str| crate::core::slot_resolution::namespace_labels(ns, &BTreeMap::new());
    let admission = Admission::without_digests(&set, &labels);
    let unread = Unread {
        what: "the ClusterImageMappings".into(),
        grant: "list clusterimagemappings.imagemap.dev".into(),
    };
    let ctx = Explaining {
        admission: &admission,
        sent: None,
        rules_unread: Some(&unread),
        scope_unread: None,
        status_problem: &|_| None,
        mapping_created: &|_| None,
    };
    let explained = explain(&ctx, &pod(&containers(&["ngnix"])));
    assert_eq!(explained[0].verdict.name(), "unknown");
    assert!(
        explained[0]
            .verdict
            .evidence()
            .contains("list clusterimagemappings")
    );
}

#[test]
fn every_verdict_is_named_in_json_as_the_schema_pins_it() {
    let one_of_each = [
        SlotVerdict::MappedCurrent,
        SlotVerdict::MappedStale {
            next: String::new(),
        },
        SlotVerdict::StaleNewPodsOnly,
        SlotVerdict::NoRuleMatches {
            nearest: Vec::new(),
        },
        SlotVerdict::RuleRefused {
            rule: String::new(),
            problem: String::new(),
        },
        SlotVerdict::NamespaceNeverSent { why: String::new() },
        SlotVerdict::OptedOut {
            escaped: Vec::new(),
        },
        SlotVerdict::NotMappedAtAdmission {
            because: String::new(),
        },
        SlotVerdict::LeftAloneByDesign { why: String::new() },
        SlotVerdict::NotMappedWhole { why: String::new() },
        SlotVerdict::DryRun {
            rule: String::new(),
            would_run: String::new(),
        },
        SlotVerdict::FollowedTagNotPinned { tag: String::new() },
        SlotVerdict::Unknown {
            unread: String::new(),
            grant: String::new(),
        },
    ];
    let names: Vec<&str> = one_of_each.iter().map(SlotVerdict::name).collect();
    // imagemap.dev/explain/v1: scripts rely on these.
    assert_eq!(
        names,
        [
            "mapped-current",
            "mapped-stale",
            "stale-new-pods-only",
            "no-rule-matches",
            "rule-refused",
            "namespace-never-sent",
            "opted-out",
            "not-mapped-at-admission",
            "left-alone-by-design",
            "not-mapped-whole",
            "dry-run",
            "followed-tag-not-pinned",
            "unknown",
        ]
    );
    for v in &one_of_each {
        assert_eq!(serde_json::to_value(v).unwrap()["verdict"], v.name());
    }
}

#[test]
fn the_verdict_names_are_the_json_schemas() {
    let v = serde_json::to_value(SlotVerdict::DryRun {
        rule: "r".into(),
        would_run: "x".into(),
    })
    .unwrap();
    assert_eq!(
        v,
        json!({"verdict": "dry-run", "rule": "r", "wouldRun": "x"})
    );
    assert_eq!(
        serde_json::to_value(SlotVerdict::MappedCurrent).unwrap(),
        json!({"verdict": "mapped-current"})
    );
}
