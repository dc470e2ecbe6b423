//! Pods created per second through the API server with imagemap's admission webhook, against
//! without it, on the test control plane: one namespace with 1,000 rules in scope (the mix
//! of benches/support/rule_mix.rs: 10 ImageMappings of the namespace and a ClusterImageMapping
//! selecting it), `imagemap run --namespace NS --webhook-addr … --webhook-url …` (the release
//! binary, as a process) serving and registering its webhook for that namespace. Six runs
//! alternate with the webhook registered (B) and its configuration deleted (A): B A B A B A.
//! Before each run the configuration is created again or deleted, and a pod created as a dry
//! run shows that the API server has started or stopped calling the webhook. A run creates
//! 1,000 pods (one container each, an image of the mix, a scheduler nobody runs: creating
//! them is all the cluster does) with 32 creates in flight, and checks every created pod's
//! image: mapped in B, as asked in A. Pods are deleted between runs. It prints each run's
//! pods per second, the ratio of each pair (B over the A after it) and of the means, the
//! webhook's own answer times from its `/metrics` (body read included), the CPU seconds the
//! API server, etcd, the operator and the benchmark's client spent in each run (from
//! `/proc`; per pod, what the webhook costs each whatever else shares the machine), and the
//! operator's RSS.
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
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
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
const MANAGER: &str = "imagemap-bench";
const HISTOGRAM: &str = "imagemap_admission_duration_seconds";

/// The pod `name` asking for the image of rule `i` of the mix; what the rules make of it.
fn pod(name: &str, i: usize) -> anyhow::Result<(Pod, String, String)> {
    let (image, mapped) = rule_mix::hit(i % RULES, &format!("app{i}:1"));
    let pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        // No scheduler takes it: creating it is the only work.
        "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "app", "image": image}]},
    }))?;
    Ok((pod, image, mapped))
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

/// Creates pods as dry runs in `ns` until the API server shows the webhook called
/// (`called`) or not: the image comes back mapped, or as asked.
async fn wait_webhook(client: &Client, ns: &str, called: bool) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let (probe, asked, mapped) = pod("probe", 0)?;
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let created = pods.create(&dry_run, &probe).await?;
        let image = created
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default();
        let expected = if called { &mapped } else { &asked };
        if &image == expected {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the API server still {} the webhook after 60 s (the probe came back with {image})",
            if called { "does not call" } else { "calls" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `n` pods in `ns`, `concurrency` at once; returns how many came back with their
/// image mapped and how many as asked.
async fn create_pods(
    client: &Client,
    ns: &str,
    run: usize,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<(usize, usize)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let images: Vec<(bool, bool)> = stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("run{run}-pod-{i:05}");
                let (pod, asked, mapped) = pod(&name, i)?;
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
                anyhow::Ok((image == mapped, image == asked))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    Ok((
        images.iter().filter(|i| i.0).count(),
        images.iter().filter(|i| i.1).count(),
    ))
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

/// The webhook's configuration, as the operator registered it.
struct Webhook {
    api: Api<MutatingWebhookConfiguration>,
    registered: MutatingWebhookConfiguration,
}

impl Webhook {
    /// Creates the configuration again (`on`) or deletes it.
    async fn set(&self, on: bool) -> anyhow::Result<()> {
        let name = self.registered.metadata.name.clone().unwrap_or_default();
        let present = self.api.get_opt(&name).await?.is_some();
        if on && !present {
            self.api
                .create(&PostParams::default(), &self.registered)
                .await?;
        } else if !on && present {
            self.api.delete(&name, &DeleteParams::default()).await?;
        }
        Ok(())
    }
}

/// Run `run` (0-based; with the webhook when even): `n` pods created once the API server
/// calls the webhook, or no longer does; prints its row.
async fn timed_run(
    client: &Client,
    ns: &str,
    op: &mut OperatorProcess,
    webhook: &Webhook,
    run: usize,
    (n, concurrency): (usize, usize),
) -> anyhow::Result<Run> {
    let with = run.is_multiple_of(2);
    webhook.set(with).await?;
    wait_webhook(client, ns, with).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    op.sample_peak();
    let before = Answers::read(op);
    let cpu_before = cpu();
    let started = Instant::now();
    let (mapped, asked) = create_pods(client, ns, run, n, concurrency).await?;
    let took = started.elapsed().as_secs_f64();
    let cpu_after = cpu();
    let after = Answers::read(op);
    let used: [f64; 4] = std::array::from_fn(|k| cpu_after[k] - cpu_before[k]);
    let peak = op.peak_mib();
    if with {
        anyhow::ensure!(mapped == n, "run {run}: {mapped} of {n} pods mapped");
    } else {
        anyhow::ensure!(asked == n, "run {run}: {} of {n} pods mapped", n - asked);
    }
    let rate = n as f64 / took;
    println!(
        "| {} | {} | {rate:.0} | {took:.2} | {mapped} of {n} | {} | {} | {peak:.0} MiB |",
        run + 1,
        if with { "B (with)" } else { "A (without)" },
        after.since(&before),
        used.map(|c| format!("{c:.2}")).join(" / "),
    );
    delete_pods(client, ns).await?;
    Ok(Run {
        with,
        rate,
        cpu: used,
    })
}

/// What one run measured.
struct Run {
    /// With the webhook.
    with: bool,
    /// Pods per second.
    rate: f64,
    /// CPU seconds of the API server, etcd, the operator and the client.
    cpu: [f64; 4],
}

/// The ratios of pods per second, per pair and overall, and the CPU each process spent per
/// pod with the webhook and without: `n` pods per run.
fn summary(runs: &[Run], n: usize) {
    let pairs: Vec<String> = runs
        .chunks(2)
        .map(|p| format!("{:.2}×", p[0].rate / p[1].rate))
        .collect();
    let mean = |with: bool, of: &dyn Fn(&Run) -> f64| {
        let r: Vec<f64> = runs.iter().filter(|r| r.with == with).map(of).collect();
        r.iter().sum::<f64>() / r.len() as f64
    };
    let (with, without) = (mean(true, &|r| r.rate), mean(false, &|r| r.rate));
    println!(
        "with / without, per pair (B over the A after it): {}; overall (mean pods/s): {with:.0} / {without:.0} = {:.2}×",
        pairs.join(", "),
        with / without
    );
    // In ms per pod: what the webhook costs each process, whatever else ran meanwhile.
    let per_pod = |with: bool, k: usize| mean(with, &|r| r.cpu[k] * 1e3 / n as f64);
    let names = ["API server", "etcd", "operator", "client"];
    let each: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(k, name)| format!("{name} {:.2} / {:.2}", per_pod(true, k), per_pod(false, k)))
        .collect();
    let all = |with: bool| (0..names.len()).map(|k| per_pod(with, k)).sum::<f64>();
    println!(
        "CPU ms per pod, with / without: {}; all {:.2} / {:.2} ({:.2}× as many pods per CPU second)",
        each.join(", "),
        all(true),
        all(false),
        all(false) / all(true)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; under `cargo test` (scripts/test) a small run checks that
    // the benchmark works.
    // Pods per run and creates in flight may be given (other arguments are cargo's filters).
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let n = match (numbers.first(), args.iter().any(|a| a == "--bench")) {
        (Some(n), _) => *n,
        (None, true) => 1000,
        (None, false) => 20,
    };
    let concurrency = numbers.get(1).copied().unwrap_or(CONCURRENCY);
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no cluster ({e}): run the benchmark with scripts/bench-admission")
    })?;
    cluster::install_crds(&client).await?;
    // A namespace of its own (the test control plane runs no namespace controller: a
    // deleted namespace never goes).
    let ns = format!("bench-admission-{}", std::process::id());
    cluster::fresh_namespace(&client, &ns).await?;
    apply_rules(&client, &ns).await?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let configuration = format!("imagemap-{ns}");
    let (addr, url) = (
        format!("127.0.0.1:{port}"),
        format!("https://127.0.0.1:{port}"),
    );
    let mut op = OperatorProcess::start_with(
        &ns,
        &[
            "--webhook-addr",
            &addr,
            "--webhook-url",
            &url,
            "--webhook-configuration",
            &configuration,
        ],
    )?;
    // Registered once the rules are loaded: the probe comes back mapped.
    wait_webhook(&client, &ns, true).await?;
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut registered = configurations.get(&configuration).await?;
    registered.metadata = kube::api::ObjectMeta {
        name: Some(configuration.clone()),
        ..kube::api::ObjectMeta::default()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = op.rss_mib();

    println!(
        "admission benchmark: {n} pods per run created with {concurrency} in flight, {RULES} rules in scope; runs alternate with the webhook (B) and without (A)"
    );
    println!();
    println!(
        "| run | webhook | pods/s | seconds | pods mapped | webhook answers (its /metrics) | CPU s: API server / etcd / operator / client | operator RSS peak |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let webhook = Webhook {
        api: configurations.clone(),
        registered,
    };
    let mut runs: Vec<Run> = Vec::new();
    for run in 0..6_usize {
        runs.push(timed_run(&client, &ns, &mut op, &webhook, run, (n, concurrency)).await?);
    }
    println!();
    summary(&runs, n);
    println!(
        "operator RSS: {steady:.0} MiB before the runs, {:.0} MiB after them",
        op.rss_mib()
    );

    // Stopped, it deletes the configuration it registered (gone already after an A run).
    op.stop()?;
    webhook.set(false).await?;
    for m in rule_mix::mappings(RULES, &ns, None) {
        if matches!(m.scope, MappingScope::Cluster) {
            let _ = Api::<ClusterImageMapping>::all(client.clone())
                .delete(&format!("{ns}-{}", m.name), &DeleteParams::default())
                .await;
        }
    }
    Ok(())
}
