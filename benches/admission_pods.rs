//! Pods created per second through the API server, side by side: with no mutation, with
//! imagemap's admission webhook, and with the same rewrite done by the API server itself (a
//! `MutatingAdmissionPolicy`, v1), on the test control plane. Each variant is a run of its
//! own; five rounds take the variants in turn:
//!
//! - `none`: nothing mutates the pods;
//! - `webhook, no patch`: the webhook is called and answers without a patch (the pods ask
//!   for an image no rule matches);
//! - `webhook`: the webhook maps the pods by one repository rule;
//! - `policy (apply)` and `policy (JSON patch)`: the same rewrite, label and annotation as a
//!   `MutatingAdmissionPolicy` and its binding, written as an ApplyConfiguration or as a
//!   JSONPatch; the webhook's configuration is deleted meanwhile, and the policy's label is
//!   not the one the operator's watches select, so no cost of the operator's is charged to
//!   it;
//! - `webhook, 1,000 rules`: the webhook in a namespace with 1,000 rules in scope (the mix
//!   of benches/support/rule_mix.rs: 10 ImageMappings and a ClusterImageMapping).
//!
//! The operator is `imagemap run --namespace ONE --namespace MIX --webhook-addr …
//! --webhook-url …` (the release binary, as a process), running throughout. Before each run
//! the webhook's configuration and the policies' bindings are created or deleted, and pods
//! created as dry runs show that the API server now mutates as the variant says. A run creates
//! 1,000 pods (one container each, a scheduler nobody runs: creating them is all the cluster
//! does) with 32 creates in flight and checks every created pod's image; pods are deleted
//! between runs. It prints each run's pods per second, the CPU seconds the API server, etcd,
//! the operator and the benchmark's client spent (from `/proc`), and per variant: pods/s per
//! round and their mean, the API server's CPU per pod, and the webhook against the policies.
//! Then the webhook's own answer times from its `/metrics` and the operator's RSS.
//!
//!   scripts/bench-admission [PODS [IN_FLIGHT]]    # default: 1000 32

// Figures for a report: counts and sizes far below 2^52.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

#[allow(dead_code)] // the scale benchmark's helpers, in part
#[path = "scale/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "scale/operator_process.rs"]
mod operator_process;
#[path = "support/rule_mix.rs"]
mod rule_mix;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use imagemap::core::api::{
    ClusterImageMapping, ClusterImageMappingSpec, ImageMapping, ImageMappingSpec,
};
use imagemap::core::rules::MappingScope;

use cluster::{CONCURRENCY, is_status, retry};
use operator_process::OperatorProcess;

const RULES: usize = 1_000;
const ROUNDS: usize = 5;
const MANAGER: &str = "imagemap-bench";
const HISTOGRAM: &str = "imagemap_admission_duration_seconds";
/// The one rule's repository, and what it becomes.
const REPOSITORY: &str = "bench/app";
const MIRROR: &str = "mirror.bench.io/bench/app";
/// The label and annotation the policies write (imagemap's own are `imagemap.dev/…`).
const POLICY_LABEL: &str = "bench.imagemap.dev/mapped";
const POLICY_ANNOTATION: &str = "bench.imagemap.dev/original-image";

/// What mutates the pods of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    None,
    WebhookNoPatch,
    Webhook,
    PolicyApply,
    PolicyJsonPatch,
    Webhook1000,
}

const VARIANTS: [Variant; 6] = [
    Variant::None,
    Variant::WebhookNoPatch,
    Variant::Webhook,
    Variant::PolicyApply,
    Variant::PolicyJsonPatch,
    Variant::Webhook1000,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::WebhookNoPatch => "webhook, no patch",
            Variant::Webhook => "webhook",
            Variant::PolicyApply => "policy (apply)",
            Variant::PolicyJsonPatch => "policy (JSON patch)",
            Variant::Webhook1000 => "webhook, 1,000 rules",
        }
    }

    fn webhook(self) -> bool {
        matches!(
            self,
            Variant::WebhookNoPatch | Variant::Webhook | Variant::Webhook1000
        )
    }

    fn policy(self) -> Option<&'static str> {
        match self {
            Variant::PolicyApply => Some("imagemap-bench-apply"),
            Variant::PolicyJsonPatch => Some("imagemap-bench-jsonpatch"),
            _ => None,
        }
    }

    /// The pod `name` of this variant's runs, asking for image `i` of its kind: the pod,
    /// what it asks for, and the image it must come back with.
    fn pod(self, name: &str, i: usize) -> anyhow::Result<(Pod, String)> {
        let (image, expected) = match self {
            Variant::Webhook1000 => rule_mix::hit(i % RULES, &format!("app{i}:1")),
            Variant::WebhookNoPatch => (format!("other/app:{i}"), format!("other/app:{i}")),
            Variant::None => (format!("{REPOSITORY}:{i}"), format!("{REPOSITORY}:{i}")),
            Variant::Webhook | Variant::PolicyApply | Variant::PolicyJsonPatch => {
                (format!("{REPOSITORY}:{i}"), format!("{MIRROR}:{i}"))
            }
        };
        let pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench"}},
            // No scheduler takes it: creating it is the only work.
            "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "app", "image": image}]},
        }))?;
        Ok((pod, expected))
    }
}

/// Where the pods of each variant are created.
struct Namespaces {
    one: String,
    mix: String,
}

impl Namespaces {
    fn of(&self, variant: Variant) -> &str {
        if variant == Variant::Webhook1000 {
            &self.mix
        } else {
            &self.one
        }
    }
}

/// Creates the ImageMappings and the ClusterImageMapping of `RULES` rules for `ns`.
async fn apply_rules(client: &Client, ns: &str) -> anyhow::Result<()> {
    let selector =
        serde_json::from_value(json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}))?;
    let params = PatchParams::apply(MANAGER).force();
    for m in rule_mix::mappings(RULES, ns, Some(&selector)) {
        if matches!(m.scope, MappingScope::Cluster) {
            let name = format!("{ns}-{}", m.name);
            let object = ClusterImageMapping::new(
                &name,
                ClusterImageMappingSpec {
                    namespace_selector: m.namespace_selector,
                    rules: m.rules,
                    ..ClusterImageMappingSpec::default()
                },
            );
            Api::<ClusterImageMapping>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&object))
                .await?;
        } else {
            let object = ImageMapping::new(
                &m.name,
                ImageMappingSpec {
                    rules: m.rules,
                    ..ImageMappingSpec::default()
                },
            );
            Api::<ImageMapping>::namespaced(client.clone(), ns)
                .patch(&m.name, &params, &Patch::Apply(&object))
                .await?;
        }
    }
    Ok(())
}

/// Creates the one repository rule of `ns`.
async fn apply_one_rule(client: &Client, ns: &str) -> anyhow::Result<()> {
    let object: ImageMapping = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1",
        "kind": "ImageMapping",
        "metadata": {"name": "one"},
        "spec": {"rules": [{"match": {"repository": REPOSITORY}, "to": MIRROR}]},
    }))?;
    Api::<ImageMapping>::namespaced(client.clone(), ns)
        .patch(
            "one",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await?;
    Ok(())
}

/// The policies: the same rewrite as the one rule (for these pods' one container), with a
/// label and an annotation recording it, as an ApplyConfiguration and as a JSONPatch.
fn policies() -> anyhow::Result<Vec<MutatingAdmissionPolicy>> {
    let matches = format!("object.spec.containers[0].image.startsWith('{REPOSITORY}:')");
    let mapped = "'mirror.bench.io/' + object.spec.containers[0].image";
    let apply = format!(
        "Object{{metadata: Object.metadata{{labels: {{'{POLICY_LABEL}': 'true'}}, \
         annotations: {{'{POLICY_ANNOTATION}': object.spec.containers[0].image}}}}, \
         spec: Object.spec{{containers: [Object.spec.containers{{name: \
         object.spec.containers[0].name, image: {mapped}}}]}}}}"
    );
    let label_path = format!("/metadata/labels/{}", POLICY_LABEL.replace('/', "~1"));
    let json_patch = format!(
        "[JSONPatch{{op: 'add', path: '{label_path}', value: 'true'}}, \
         JSONPatch{{op: 'add', path: '/metadata/annotations', value: \
         {{'{POLICY_ANNOTATION}': object.spec.containers[0].image}}}}, \
         JSONPatch{{op: 'replace', path: '/spec/containers/0/image', value: {mapped}}}]"
    );
    let policy = |name: &str, mutation: serde_json::Value| {
        serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "Never",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"],
                }]},
                "matchConditions": [{"name": "repository", "expression": matches}],
                "mutations": [mutation],
            },
        }))
    };
    Ok(vec![
        policy(
            "imagemap-bench-apply",
            json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply}}),
        )?,
        policy(
            "imagemap-bench-jsonpatch",
            json!({"patchType": "JSONPatch", "jsonPatch": {"expression": json_patch}}),
        )?,
    ])
}

/// Creates pods as dry runs in the variant's namespace until the API server mutates them as
/// the variant says: mapped by the webhook (its label), by the policy (the policy's label),
/// or not at all.
async fn wait_for_variant(
    client: &Client,
    namespaces: &Namespaces,
    variant: Variant,
) -> anyhow::Result<()> {
    // A variant whose pods no rule matches is probed with a pod the rule maps.
    let probe_as = if variant == Variant::WebhookNoPatch {
        Variant::Webhook
    } else {
        variant
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespaces.of(variant));
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let (probe, expected) = probe_as.pod("probe", 0)?;
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let created = pods.create(&dry_run, &probe).await?;
        let labels = created.metadata.labels.clone().unwrap_or_default();
        let image = created
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default();
        let by_webhook = labels.contains_key("imagemap.dev/mapped");
        let by_policy = labels.contains_key(POLICY_LABEL);
        let as_said = image == expected
            && by_webhook == probe_as.webhook()
            && by_policy == probe_as.policy().is_some();
        if as_said {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "after 60 s the API server still does not mutate pods as `{}` says (the probe came back with {image}, labels {labels:?})",
            variant.name()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `n` pods of `variant`, `concurrency` at once; returns how many came back with
/// the image the variant gives them.
async fn create_pods(
    client: &Client,
    namespaces: &Namespaces,
    variant: Variant,
    run: usize,
    (n, concurrency): (usize, usize),
) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespaces.of(variant));
    let as_expected: Vec<bool> = stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("run{run}-pod-{i:05}");
                let (pod, expected) = variant.pod(&name, i)?;
                let created = retry(&format!("creating {name}"), || async {
                    match pods.create(&PostParams::default(), &pod).await {
                        Ok(p) => Ok(p),
                        Err(e) if is_status(&e, 409) => Ok(pods.get(&name).await?),
                        Err(e) => Err(e.into()),
                    }
                })
                .await?;
                let image = created
                    .spec
                    .and_then(|s| s.containers.into_iter().next())
                    .and_then(|c| c.image)
                    .unwrap_or_default();
                anyhow::Ok(image == expected)
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    Ok(as_expected.iter().filter(|ok| **ok).count())
}

/// Deletes every pod of `ns` and waits until none is left.
async fn delete_pods(client: &Client, ns: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = DeleteParams::default().grace_period(0);
    retry("deleting the pods", || async {
        pods.delete_collection(&now, &ListParams::default()).await?;
        Ok(())
    })
    .await?;
    let deadline = Instant::now() + Duration::from_mins(2);
    while !pods.list(&ListParams::default()).await?.items.is_empty() {
        anyhow::ensure!(Instant::now() < deadline, "pods left after 2 minutes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// CPU seconds (user and system) the processes named `comm` have used, summed.
fn cpu_seconds(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == comm)
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            // After the command's closing parenthesis: fields 3 on; utime and stime are 14, 15.
            let rest = stat.rsplit_once(") ")?.1;
            let fields: Vec<&str> = rest.split(' ').collect();
            let ticks =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .sum()
}

/// CPU seconds of the API server, etcd, the operator and this benchmark (its client).
fn cpu() -> [f64; 4] {
    let own = std::env::current_exe()
        .ok()
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().chars().take(15).collect::<String>())
        })
        .unwrap_or_default();
    [
        cpu_seconds("kube-apiserver"),
        cpu_seconds("etcd"),
        cpu_seconds("imagemap"),
        cpu_seconds(&own),
    ]
}

/// The webhook's answers so far: their count, total seconds, and count by bucket bound.
struct Answers {
    count: f64,
    sum: f64,
    buckets: Vec<(f64, f64)>,
}

impl Answers {
    fn read(op: &OperatorProcess) -> Answers {
        let mut answers = Answers {
            count: 0.0,
            sum: 0.0,
            buckets: Vec::new(),
        };
        for (name, value) in op.series(HISTOGRAM) {
            if name == format!("{HISTOGRAM}_count") {
                answers.count = value;
            } else if name == format!("{HISTOGRAM}_sum") {
                answers.sum = value;
            } else if let Some(le) = name
                .strip_prefix(&format!("{HISTOGRAM}_bucket{{le=\""))
                .and_then(|l| l.strip_suffix("\"}"))
                .and_then(|l| l.parse::<f64>().ok())
            {
                answers.buckets.push((le, value));
            }
        }
        answers
    }

    /// What `self` counted since `before`: the mean, and the bucket bound under which 99 %
    /// of the answers fell.
    fn since(&self, before: &Answers) -> String {
        let count = self.count - before.count;
        if count < 1.0 {
            return "no answers".into();
        }
        let mean = (self.sum - before.sum) / count;
        let p99 = self
            .buckets
            .iter()
            .zip(&before.buckets)
            .find(|((_, n), (_, m))| n - m >= 0.99 * count)
            .map_or(f64::INFINITY, |((le, _), _)| *le);
        format!(
            "{count:.0} answers, mean {:.2} ms, p99 ≤ {:.2} ms",
            mean * 1e3,
            p99 * 1e3
        )
    }
}

/// What mutates pods: the webhook's configuration, as the operator registered it, and the
/// policies' bindings.
struct Mutators {
    webhooks: Api<MutatingWebhookConfiguration>,
    registered: MutatingWebhookConfiguration,
    bindings: Api<MutatingAdmissionPolicyBinding>,
    /// The namespace the policies' bindings select.
    namespace: String,
}

impl Mutators {
    /// Registers the webhook and binds the policies as `variant` says, unregistering and
    /// unbinding the rest.
    async fn set(&self, variant: Variant) -> anyhow::Result<()> {
        let name = self.registered.metadata.name.clone().unwrap_or_default();
        let present = self.webhooks.get_opt(&name).await?.is_some();
        if variant.webhook() && !present {
            self.webhooks
                .create(&PostParams::default(), &self.registered)
                .await?;
        } else if !variant.webhook() && present {
            self.webhooks
                .delete(&name, &DeleteParams::default())
                .await?;
        }
        for policy in ["imagemap-bench-apply", "imagemap-bench-jsonpatch"] {
            let present = self.bindings.get_opt(policy).await?.is_some();
            if variant.policy() == Some(policy) && !present {
                let binding = serde_json::from_value(json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingAdmissionPolicyBinding",
                    "metadata": {"name": policy},
                    "spec": {
                        "policyName": policy,
                        "matchResources": {"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": self.namespace,
                        }}},
                    },
                }))?;
                self.bindings
                    .create(&PostParams::default(), &binding)
                    .await?;
            } else if variant.policy() != Some(policy) && present {
                self.bindings
                    .delete(policy, &DeleteParams::default())
                    .await?;
            }
        }
        Ok(())
    }

    /// Unregisters and unbinds everything.
    async fn clear(&self) -> anyhow::Result<()> {
        self.set(Variant::None).await
    }
}

/// What one run measured.
struct Run {
    variant: Variant,
    /// Pods per second.
    rate: f64,
    /// CPU seconds of the API server, etcd, the operator and the client.
    cpu: [f64; 4],
}

/// Run `run` of `variant`: `n` pods created once the API server mutates as it says; prints
/// its row.
async fn timed_run(
    client: &Client,
    namespaces: &Namespaces,
    op: &mut OperatorProcess,
    mutators: &Mutators,
    (run, variant): (usize, Variant),
    (n, concurrency): (usize, usize),
) -> anyhow::Result<Run> {
    mutators.set(variant).await?;
    wait_for_variant(client, namespaces, variant).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    op.sample_peak();
    let before = Answers::read(op);
    let cpu_before = cpu();
    let started = Instant::now();
    let as_expected = create_pods(client, namespaces, variant, run, (n, concurrency)).await?;
    let took = started.elapsed().as_secs_f64();
    let cpu_after = cpu();
    let after = Answers::read(op);
    let used: [f64; 4] = std::array::from_fn(|k| cpu_after[k] - cpu_before[k]);
    anyhow::ensure!(
        as_expected == n,
        "run {} ({}): {as_expected} of {n} pods came back as the variant says",
        run + 1,
        variant.name()
    );
    let rate = n as f64 / took;
    println!(
        "| {} | {} | {rate:.0} | {took:.2} | {} | {} | {:.0} MiB |",
        run + 1,
        variant.name(),
        if variant.webhook() {
            after.since(&before)
        } else {
            String::new()
        },
        used.map(|c| format!("{c:.2}")).join(" / "),
        op.peak_mib(),
    );
    delete_pods(client, namespaces.of(variant)).await?;
    Ok(Run {
        variant,
        rate,
        cpu: used,
    })
}

/// Per variant: pods/s per round, their mean and its ratio to no mutation, and the CPU each
/// process spent per pod; then the webhook against the cheaper policy.
fn summary(runs: &[Run], n: usize) {
    let of = |variant: Variant| runs.iter().filter(move |r| r.variant == variant);
    let mean = |variant: Variant, f: &dyn Fn(&Run) -> f64| {
        let values: Vec<f64> = of(variant).map(f).collect();
        values.iter().sum::<f64>() / values.len().max(1) as f64
    };
    let rate = |variant: Variant| mean(variant, &|r| r.rate);
    let api_ms = |variant: Variant| mean(variant, &|r| r.cpu[0] * 1e3 / n as f64);
    println!(
        "| variant | pods/s per round | mean pods/s | over none | CPU ms per pod: API server / etcd / operator / client |"
    );
    println!("|---|---|---|---|---|");
    for variant in VARIANTS {
        let per_round: Vec<String> = of(variant).map(|r| format!("{:.0}", r.rate)).collect();
        let each: Vec<String> = (0..4)
            .map(|k| format!("{:.2}", mean(variant, &|r| r.cpu[k] * 1e3 / n as f64)))
            .collect();
        println!(
            "| {} | {} | {:.0} | {:.2}× | {} |",
            variant.name(),
            per_round.join(", "),
            rate(variant),
            rate(variant) / rate(Variant::None),
            each.join(" / "),
        );
    }
    println!();
    let cheaper = if api_ms(Variant::PolicyApply) <= api_ms(Variant::PolicyJsonPatch) {
        Variant::PolicyApply
    } else {
        Variant::PolicyJsonPatch
    };
    println!(
        "webhook against the cheaper policy ({}): API-server CPU per pod {:.2} / {:.2} ms = {:.2}×",
        cheaper.name(),
        api_ms(Variant::Webhook),
        api_ms(cheaper),
        api_ms(Variant::Webhook) / api_ms(cheaper),
    );
    for policy in [Variant::PolicyApply, Variant::PolicyJsonPatch] {
        let pairs: Vec<String> = of(Variant::Webhook)
            .zip(of(policy))
            .map(|(w, p)| format!("{:.2}×", w.rate / p.rate))
            .collect();
        println!(
            "webhook against {}: mean pods/s {:.2}×; per round {}",
            policy.name(),
            rate(Variant::Webhook) / rate(policy),
            pairs.join(", "),
        );
    }
}

/// The namespaces with their rules, the policies (unbound), and the operator serving and
/// registering its webhook for both namespaces once their rules are loaded.
async fn set_up(
    client: &Client,
    namespaces: &Namespaces,
) -> anyhow::Result<(OperatorProcess, Mutators, Api<MutatingAdmissionPolicy>)> {
    cluster::fresh_namespace(client, &namespaces.one).await?;
    cluster::fresh_namespace(client, &namespaces.mix).await?;
    apply_one_rule(client, &namespaces.one).await?;
    apply_rules(client, &namespaces.mix).await?;
    let policy_api: Api<MutatingAdmissionPolicy> = Api::all(client.clone());
    for policy in policies()? {
        let name = policy.metadata.name.clone().unwrap_or_default();
        policy_api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&policy),
            )
            .await?;
    }

    // The configuration `imagemap-ONE`, sending both namespaces' pods.
    let configuration = format!("imagemap-{}", namespaces.one);
    let op =
        OperatorProcess::start_with_webhook(&namespaces.one, &["--namespace", &namespaces.mix])?;
    // Registered once the rules are loaded: the probes come back mapped.
    wait_for_variant(client, namespaces, Variant::Webhook).await?;
    wait_for_variant(client, namespaces, Variant::Webhook1000).await?;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut registered = webhooks.get(&configuration).await?;
    registered.metadata = kube::api::ObjectMeta {
        name: Some(configuration.clone()),
        ..kube::api::ObjectMeta::default()
    };
    let mutators = Mutators {
        webhooks,
        registered,
        bindings: Api::all(client.clone()),
        namespace: namespaces.one.clone(),
    };
    Ok((op, mutators, policy_api))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; under `cargo test` (scripts/test) a small run checks that
    // the benchmark works.
    // Pods per run and creates in flight may be given (other arguments are cargo's filters).
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let n = match (numbers.first(), bench) {
        (Some(n), _) => *n,
        (None, true) => 1000,
        (None, false) => 20,
    };
    let rounds = if bench { ROUNDS } else { 1 };
    let concurrency = numbers.get(1).copied().unwrap_or(CONCURRENCY);
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no cluster ({e}): run the benchmark with scripts/bench-admission")
    })?;
    cluster::install_crds(&client).await?;
    // Namespaces of its own (the test control plane runs no namespace controller: a deleted
    // namespace never goes).
    let namespaces = Namespaces {
        one: format!("bench-admission-{}", std::process::id()),
        mix: format!("bench-admission-{}-mix", std::process::id()),
    };
    let (mut op, mutators, policy_api) = set_up(&client, &namespaces).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = op.rss_mib();

    println!(
        "admission benchmark, side by side: {n} pods per run created with {concurrency} in flight; {rounds} rounds of {} variants in turn; one repository rule in scope (1,000 for the last variant)",
        VARIANTS.len()
    );
    println!();
    println!(
        "| run | variant | pods/s | seconds | webhook answers (its /metrics) | CPU s: API server / etcd / operator / client | operator RSS peak |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut runs: Vec<Run> = Vec::new();
    let measured = async {
        for round in 0..rounds {
            for (k, variant) in VARIANTS.into_iter().enumerate() {
                let run = round * VARIANTS.len() + k;
                runs.push(
                    timed_run(
                        &client,
                        &namespaces,
                        &mut op,
                        &mutators,
                        (run, variant),
                        (n, concurrency),
                    )
                    .await?,
                );
            }
        }
        anyhow::Ok(())
    }
    .await;
    // Whatever happened, nothing of the benchmark's keeps mutating pods.
    mutators.clear().await?;
    for policy in ["imagemap-bench-apply", "imagemap-bench-jsonpatch"] {
        let _ = policy_api.delete(policy, &DeleteParams::default()).await;
    }
    measured?;
    println!();
    summary(&runs, n);
    println!(
        "operator RSS: {steady:.0} MiB before the runs, {:.0} MiB after them",
        op.rss_mib()
    );

    op.stop()?;
    for m in rule_mix::mappings(RULES, &namespaces.mix, None) {
        if matches!(m.scope, MappingScope::Cluster) {
            let _ = Api::<ClusterImageMapping>::all(client.clone())
                .delete(
                    &format!("{}-{}", namespaces.mix, m.name),
                    &DeleteParams::default(),
                )
                .await;
        }
    }
    Ok(())
}
