//! The admission handler's latency: one AdmissionReview of a pod answered from memory
//! (`Admitter::answer`: the review parsed, the pod's images resolved, the patch and its
//! records built, the answer serialized), with 1,000 rules in scope for the pod's namespace,
//! against the same reviews answered with no rules in scope, in the same run.
//!
//! Its own harness (criterion reports no percentiles): every answer is timed on its own
//! (`Instant` around one call), after a warm-up of a tenth of the iterations; the cases and
//! both rule sets take turns in blocks of a twentieth of their iterations, so that what else
//! runs on the machine falls on all of them alike. It prints p50, p90, p99 and the maximum
//! of each case, and the ratio of p50 and p99 to the no-rules baseline. The allocator is the
//! operator's (mimalloc, freed memory returned at once: the benchmark runs itself again with
//! `MIMALLOC_PURGE_DELAY=0`, as `imagemap run` sets it).
//!
//! Rule mix (benches/support/rule_mix.rs, as benches/resolve.rs): 1,000 rules — 40% exact,
//! 30% repository, 25% prefix (a fifth of them `*.` wildcards), 5% regex — in 10 ImageMappings
//! of the pod's namespace and one ClusterImageMapping selecting it by
//! `kubernetes.io/metadata.name`. The reviews are what the API server sends for a pod a
//! ReplicaSet creates: defaulted, with the service account's volume, tolerations and
//! managedFields. Cases:
//!
//! - a small pod of one container, its image mapped: what benches/admission_pods creates;
//! - a pod of 2 init containers and 3 containers (8 env vars each, labels, annotations,
//!   probes, resources), 4 of its 5 images matching a rule (exact, repository, prefix,
//!   regex), the 5th none;
//! - the same pod, none of its images matching a rule (every table probed, the regex set run);
//! - a large pod: 2 init containers and 20 containers of 40 env vars, every image matching;
//! - the 1.4 MiB pod of tests/admission.rs (one container, 1,400 env vars of 1,000 bytes).
//!
//!   cargo bench --locked --bench admission

#![allow(clippy::unwrap_used)] // benchmark code
// Figures for a report: counts and durations far below 2^52.
#![allow(clippy::cast_precision_loss)]

use std::hint::black_box;
use std::time::Instant;

use base64::Engine;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};

use imagemap::core::admission::scope::Excluded;
use imagemap::core::rules::{CompileOptions, MappingInput};
use imagemap::operator::Admitter;

#[path = "support/rule_mix.rs"]
mod rule_mix;

const NAMESPACE: &str = "bench";
const RULES: usize = 1_000;
/// Turns each case and rule set takes.
const ROUNDS: usize = 20;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Images that match no rule of the mix.
fn miss(k: usize) -> String {
    format!("ghcr.io/nobody/tool{k}:2.1")
}

/// A container as the API server holds it after defaulting.
fn container(name: &str, image: &str, env: usize, extra_env: &Value) -> Value {
    let mut vars: Vec<Value> = (0..env)
        .map(|k| json!({"name": format!("APP_SETTING_{k}"), "value": format!("value-{k}-{name}")}))
        .collect();
    vars.push(json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}));
    if let Value::Array(more) = extra_env {
        vars.extend(more.iter().cloned());
    }
    json!({
        "name": name,
        "image": image,
        "command": ["/bin/app"],
        "args": ["--config=/etc/app/config.yaml", "--listen=:8080"],
        "env": vars,
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app"},
            {"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
            "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true},
    })
}

/// The managedFields entry of the ReplicaSet controller's create, for `names`.
fn managed_fields(names: &[String]) -> Value {
    let containers: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| {
            (
                format!("k:{{\"name\":\"{n}\"}}"),
                json!({".": {}, "f:args": {}, "f:command": {}, "f:env": {}, "f:image": {},
                       "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {}, "f:readinessProbe": {},
                       "f:resources": {}, "f:securityContext": {}, "f:terminationMessagePath": {},
                       "f:terminationMessagePolicy": {}, "f:volumeMounts": {}}),
            )
        })
        .collect();
    json!([{
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:annotations": {".": {}, "f:prometheus.io/port": {}, "f:prometheus.io/scrape": {}},
                           "f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                           "f:ownerReferences": {".": {}, "k:{\"uid\":\"5d2c1f7e-8a3b-4c6d-9e0f-1a2b3c4d5e6f\"}": {}}},
            "f:spec": {"f:containers": containers, "f:dnsPolicy": {}, "f:restartPolicy": {},
                       "f:schedulerName": {}, "f:securityContext": {}, "f:volumes": {}},
        },
    }])
}

/// A pod of `init` init containers and the containers of `images` after them, `env` vars
/// each (and `extra_env` in the first container), as a ReplicaSet creates it.
fn pod(images: &[String], init: usize, env: usize, extra_env: &Value) -> Value {
    let names: Vec<String> = (0..images.len())
        .map(|k| {
            if k < init {
                format!("setup-{k}")
            } else {
                format!("app-{}", k - init)
            }
        })
        .collect();
    let mut init_containers = Vec::new();
    let mut containers = Vec::new();
    for (k, (name, image)) in names.iter().zip(images).enumerate() {
        let extra = if k == init { extra_env } else { &Value::Null };
        let c = container(name, image, env, extra);
        if k < init {
            init_containers.push(c);
        } else {
            containers.push(c);
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c8f6-x2kqz",
            "generateName": "web-7d4b9c8f6-",
            "namespace": NAMESPACE,
            "labels": {"app": "web", "app.kubernetes.io/name": "web", "app.kubernetes.io/part-of": "shop",
                       "app.kubernetes.io/version": "1.4.2", "pod-template-hash": "7d4b9c8f6"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6",
                                 "uid": "5d2c1f7e-8a3b-4c6d-9e0f-1a2b3c4d5e6f", "controller": true,
                                 "blockOwnerDeletion": true}],
            "managedFields": managed_fields(&names),
        },
        "spec": {
            "initContainers": init_containers,
            "containers": containers,
            "volumes": [
                {"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {"fsGroup": 2000},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    })
}

/// A pod of one container running `image`, defaulted, as benches/admission_pods creates it.
fn small_pod(image: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "run0-pod-00508", "namespace": NAMESPACE, "labels": {"app": "bench"},
                     "managedFields": [{"manager": "admission_pods", "operation": "Update", "apiVersion": "v1",
                                        "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                                                     "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}},
                                                                "f:schedulerName": {}}}}]},
        "spec": {
            "containers": [{"name": "app", "image": image, "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "bench-nobody",
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    })
}

/// The AdmissionReview the API server sends for the creation of `pod`.
fn review(pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0c9a6f2e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"],
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": "8f3e2d1c-0000-4000-8000-000000000002",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }))
    .unwrap()
}

struct Case {
    name: &'static str,
    pod_bytes: usize,
    body: Vec<u8>,
    /// What the 1,000 rules make of it: `mutated` with these images, or `unchanged`.
    mapped: Vec<String>,
    iterations: usize,
}

fn cases(quick: bool) -> Vec<Case> {
    let scale = |n: usize| if quick { (n / 400).max(ROUNDS) } else { n };
    let mut out = Vec::new();
    let mut add = |name, pod: Value, mapped: Vec<String>, iterations| {
        out.push(Case {
            name,
            pod_bytes: serde_json::to_vec(&pod).unwrap().len(),
            body: review(&pod),
            mapped,
            iterations: scale(iterations),
        });
    };
    let (image, to) = rule_mix::hit(508, "");
    add(
        "small pod: 1 container, mapped (as benches/admission_pods creates)",
        small_pod(&image),
        vec![to],
        20_000,
    );
    // Rules 508 (repository), 614 (prefix), 400 (exact), 899 (regex): 4 hits and a miss.
    let hits: Vec<(String, String)> = [
        (508, ""),
        (614, "tools/migrate:3"),
        (400, ""),
        (899, "sidecar/envoy:1.30"),
    ]
    .iter()
    .map(|(i, path)| rule_mix::hit(*i, path))
    .collect();
    let mut images: Vec<String> = hits.iter().map(|h| h.0.clone()).collect();
    images.push(miss(0));
    let mut mapped: Vec<String> = hits.iter().map(|h| h.1.clone()).collect();
    mapped.push(miss(0));
    add(
        "pod: 2 init + 3 containers, 4 of 5 images mapped",
        pod(&images, 2, 8, &Value::Null),
        mapped,
        20_000,
    );
    let misses: Vec<String> = (0..5).map(miss).collect();
    add(
        "same pod, no image matching a rule",
        pod(&misses, 2, 8, &Value::Null),
        Vec::new(),
        20_000,
    );
    let many: Vec<(String, String)> = (0..22)
        .map(|k| rule_mix::hit(k * 47 + 3, &format!("c{k}/app:1")))
        .collect();
    add(
        "large pod: 2 init + 20 containers, 40 env each, all mapped",
        pod(
            &many.iter().map(|h| h.0.clone()).collect::<Vec<_>>(),
            2,
            40,
            &Value::Null,
        ),
        many.iter().map(|h| h.1.clone()).collect(),
        4_000,
    );
    // 64 KiB: 2 init + 10 containers, all mapped, with as many env vars each as make it so.
    let twelve: Vec<(String, String)> = (0..12)
        .map(|k| rule_mix::hit(k * 83 + 5, &format!("s{k}/app:2")))
        .collect();
    let images: Vec<String> = twelve.iter().map(|h| h.0.clone()).collect();
    let env = (1..1000)
        .find(|&env| {
            serde_json::to_vec(&pod(&images, 2, env, &Value::Null))
                .unwrap()
                .len()
                >= 64 * 1024
        })
        .unwrap();
    add(
        "64 KiB pod: 2 init + 10 containers, all mapped",
        pod(&images, 2, env, &Value::Null),
        twelve.iter().map(|h| h.1.clone()).collect(),
        4_000,
    );
    let big_env: Vec<Value> = (0..1400)
        .map(|i| json!({"name": format!("VAR_{i}"), "value": "x".repeat(1000)}))
        .collect();
    let (image, to) = rule_mix::hit(508, "");
    add(
        "1.4 MiB pod: 1 container, 1,400 env vars of 1,000 bytes",
        pod(std::slice::from_ref(&image), 0, 0, &Value::Array(big_env)),
        vec![to],
        400,
    );
    out
}

/// The images the answer's patch writes, in the pod's order (init containers first).
fn images_after(case: &Case, answer: &[u8]) -> Vec<String> {
    let review: Value = serde_json::from_slice(answer).unwrap();
    let patch = base64::engine::general_purpose::STANDARD
        .decode(review["response"]["patch"].as_str().unwrap())
        .unwrap();
    let mut pod: Value =
        serde_json::from_slice::<Value>(&case.body).unwrap()["request"]["object"].clone();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    json_patch::patch(&mut pod, &patch).unwrap();
    let spec = &pod["spec"];
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default())
        .map(|c| c["image"].as_str().unwrap().to_string())
        .collect()
}

fn admitter(mappings: &[MappingInput]) -> Admitter {
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE, "team": "shop"}}
    }))
    .unwrap();
    Admitter::from_mappings(
        mappings,
        &CompileOptions::default(),
        [namespace],
        Excluded::new(Some("imagemap-system"), &[]),
        vec![NAMESPACE.to_string()],
    )
}

/// Nanoseconds per answer, sorted.
struct Samples(Vec<u64>);

impl Samples {
    fn quantile(&self, q: f64) -> f64 {
        let n = self.0.len();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.0[rank - 1] as f64 / 1000.0
    }

    fn summary(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} / {:.0} µs",
            self.quantile(0.5),
            self.quantile(0.9),
            self.quantile(0.99),
            self.quantile(1.0)
        )
    }
}

fn time(admitter: &Admitter, body: &[u8], n: usize, into: &mut Vec<u64>) {
    for _ in 0..n {
        let started = Instant::now();
        let answered = admitter.answer(black_box(body));
        let took = started.elapsed();
        drop(black_box(answered));
        into.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }
}

fn main() {
    // The operator's allocator setting, read by mimalloc as the process starts.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(std::env::args_os().skip(1))
            .env("MIMALLOC_PURGE_DELAY", "0")
            .status()
            .unwrap();
        std::process::exit(status.code().unwrap_or(1));
    }
    // `cargo bench` passes --bench; under `cargo test` a short run checks that it works.
    let quick = !std::env::args().any(|a| a == "--bench");
    let selector =
        serde_json::from_value(json!({"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}))
            .unwrap();
    let mappings = rule_mix::mappings(RULES, NAMESPACE, Some(&selector));
    let with_rules = admitter(&mappings);
    assert_eq!(with_rules.sources.rules.current().len(), RULES);
    assert!(with_rules.sources.rules.current().problems().is_empty());
    let no_rules = admitter(&[]);
    let cases = cases(quick);
    for case in &cases {
        let answered = with_rules.answer(&case.body).unwrap();
        if case.mapped.is_empty() {
            assert_eq!(answered.result, "unchanged", "{}", case.name);
        } else {
            assert_eq!(answered.result, "mutated", "{}", case.name);
            assert_eq!(
                images_after(case, &answered.body),
                case.mapped,
                "{}",
                case.name
            );
        }
        assert_eq!(no_rules.answer(&case.body).unwrap().result, "unchanged");
    }

    let mut samples: Vec<[Vec<u64>; 2]> = cases
        .iter()
        .map(|c| {
            [
                Vec::with_capacity(c.iterations),
                Vec::with_capacity(c.iterations),
            ]
        })
        .collect();
    for case in &cases {
        let mut warm = Vec::new();
        time(&with_rules, &case.body, case.iterations / 10, &mut warm);
        time(&no_rules, &case.body, case.iterations / 10, &mut warm);
    }
    for _ in 0..ROUNDS {
        for (case, [rules, none]) in cases.iter().zip(&mut samples) {
            time(&with_rules, &case.body, case.iterations / ROUNDS, rules);
            time(&no_rules, &case.body, case.iterations / ROUNDS, none);
        }
    }

    println!(
        "admission handler: Admitter::answer on one AdmissionReview (parse, resolve, patch, serialize); own harness, each answer timed, a tenth of the iterations as warm-up; {RULES} rules in scope ({} mappings: exact/repository/prefix/regex 40/30/25/5 %) against none, taking turns",
        mappings.len()
    );
    println!();
    println!(
        "| case | pod | review | answers | 1,000 rules p50 / p90 / p99 / max | no rules p50 / p90 / p99 / max | ratio p50, p99 |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (case, [rules, none]) in cases.iter().zip(samples) {
        let (mut rules, mut none) = (rules, none);
        rules.sort_unstable();
        none.sort_unstable();
        let (rules, none) = (Samples(rules), Samples(none));
        println!(
            "| {} | {} B | {} B | {} | {} | {} | {:.2}×, {:.2}× |",
            case.name,
            case.pod_bytes,
            case.body.len(),
            rules.0.len(),
            rules.summary(),
            none.summary(),
            rules.quantile(0.5) / none.quantile(0.5),
            rules.quantile(0.99) / none.quantile(0.99),
        );
    }
}
