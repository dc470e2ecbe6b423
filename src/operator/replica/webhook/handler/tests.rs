#![allow(clippy::unwrap_used)]

use base64::Engine;
use kube::runtime::reflector::store::Writer;

use super::*;
use crate::core::fixtures::repository_mapping;
use crate::core::rules::CompileOptions;
use serde_json::json;

fn admitter() -> Admitter {
    let rules = Arc::new(RulesInForce::default());
    rules.recompile(
        &[repository_mapping(
            "m",
            "busybox",
            "mirror.io/busybox",
            false,
        )],
        &CompileOptions::default(),
    );
    Admitter {
        sources: AdmissionSources {
            rules,
            namespaces: Writer::<Namespace>::default().as_reader(),
            digests: Arc::default(),
            neonvm: Arc::default(),
        },
        excluded: Excluded::new(Some("imagemap-system"), &[]),
        acts_in: ActsIn::default(),
        own_user: None,
        asks: Arc::default(),
    }
}

fn review(namespace: &str, operation: &str, subresource: Option<&str>) -> Vec<u8> {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}]},
    });
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0c9a6f2e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": subresource,
            "name": "p",
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "test"},
            "object": pod,
            "oldObject": if operation == "UPDATE" { pod.clone() } else { Value::Null },
            "dryRun": false,
        },
    }))
    .unwrap()
}

fn response(answered: &Answered) -> Value {
    let review: Value = serde_json::from_slice(&answered.body).unwrap();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let response = review["response"].clone();
    assert_eq!(response["uid"], "0c9a6f2e-0000-4000-8000-000000000001");
    assert_eq!(response["allowed"], true, "always admitted");
    response
}

#[test]
fn a_created_pod_is_answered_with_its_patch() {
    let answered = admitter().answer(&review("dev", "CREATE", None)).unwrap();
    assert_eq!(answered.result, "mutated");
    let response = response(&answered);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let ops: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(ops[0]["path"], "/spec/containers/0/image");
    assert_eq!(ops[0]["value"], "mirror.io/busybox:1.36");
}

#[test]
fn excluded_namespaces_and_other_requests_are_answered_unchanged() {
    let a = admitter();
    for (body, why) in [
        (review("kube-system", "CREATE", None), "kube-system"),
        (
            review("imagemap-system", "CREATE", None),
            "its own namespace",
        ),
        (review("dev", "UPDATE", None), "an update"),
        (review("dev", "UPDATE", Some("status")), "a status update"),
    ] {
        let answered = a.answer(&body).unwrap();
        assert_eq!(answered.result, "skipped", "{why}");
        assert!(response(&answered).get("patch").is_none(), "{why}");
    }
    let mut scoped = admitter();
    scoped.acts_in = ActsIn::new(vec!["prod".into()]);
    assert_eq!(
        scoped
            .answer(&review("dev", "CREATE", None))
            .unwrap()
            .result,
        "skipped"
    );
}

#[test]
fn what_is_not_an_admission_review_is_refused() {
    let a = admitter();
    for body in [
        &b"{}"[..],
        b"not json",
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
    ] {
        assert!(a.answer(body).is_err(), "{}", String::from_utf8_lossy(body));
    }
}
#[test]
fn an_admitter_from_mappings_answers_from_their_rules_and_the_namespaces_labels() {
    let mut admin = repository_mapping("admin", "busybox", "mirror.io/busybox", false);
    admin.scope = crate::core::rules::MappingScope::Cluster;
    admin.namespace = None;
    admin.namespace_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"team": "a"}})).unwrap());
    let namespace = |name: &str, team: &str| -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}}))
            .unwrap()
    };
    let a = Admitter::from_mappings(
        &[admin],
        &CompileOptions::default(),
        [namespace("dev", "a"), namespace("prod", "b")],
        Excluded::new(None, &[]),
        Vec::new(),
    );
    assert_eq!(
        a.answer(&review("dev", "CREATE", None)).unwrap().result,
        "mutated"
    );
    assert_eq!(
        a.answer(&review("prod", "CREATE", None)).unwrap().result,
        "unchanged"
    );
}
