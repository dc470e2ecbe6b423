//! Live reload for workloads against the Deployment controller's own rollout, on the test
//! control plane (kube-controller-manager's Deployment, ReplicaSet and disruption
//! controllers, the scheduler, kwok nodes): `D` Deployments of `P` pods labelled
//! `imagemap.dev/live-reload: "true"` (strategy `maxSurge: 0`, `maxUnavailable: 1`) in one
//! namespace, and `imagemap run --namespace NS --webhook-addr … --webhook-url …
//! --max-recreates-per-minute 0` (the release binary, as a process).
//!
//! Runs alternate, each timed from its first write until every pod of every Deployment is
//! Ready, not going, and runs what the run asked for:
//! - **A** — what `kubectl rollout restart` does to each Deployment (its template annotated
//!   `kubectl.kubernetes.io/restartedAt`), all at once: the Deployment controller's roll.
//! - **B** — one mapping change: imagemap evicts the pods and the ReplicaSet controller
//!   replaces them, mapped by the webhook.
//!
//! It prints each run's seconds, the ratio of each B over the A before it and of the means,
//! evictions per pod (the operator's `imagemap_pods_evicted_total` over the pods), the
//! operator's RSS, and its requests by verb during the B runs.
//!
//!   scripts/bench-live-reload [DEPLOYMENTS [PODS [PAIRS]]]    # default: 100 10 1

// Figures for a report: counts far below 2^52.
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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use imagemap::core::api::{ImageMapping, ImageMappingSpec};
use operator_process::{OperatorProcess, Requests, delta};

const MANAGER: &str = "imagemap-bench";
const IMAGE: &str = "nginx:1.27";

fn mapping(ns: &str, to: &str) -> anyhow::Result<ImageMapping> {
    let mut m = ImageMapping::new(
        "live",
        ImageMappingSpec {
            rules: serde_json::from_value(json!([{"match": {"repository": "nginx"}, "to": to}]))?,
            ..ImageMappingSpec::default()
        },
    );
    m.metadata.namespace = Some(ns.to_string());
    Ok(m)
}

async fn apply_mapping(client: &Client, ns: &str, to: &str) -> anyhow::Result<()> {
    let api: Api<ImageMapping> = Api::namespaced(client.clone(), ns);
    api.patch(
        "live",
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&mapping(ns, to)?),
    )
    .await?;
    Ok(())
}

fn deployment(name: &str, pods: usize) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": pods,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "bench": "live-reload", "imagemap.dev/live-reload": "true"}},
                "spec": {"containers": [{"name": "app", "image": IMAGE}]},
            },
        },
    }))?)
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until `total` pods are Ready, none going, each one `done` says is done.
async fn settled(
    pods: &Api<Pod>,
    total: usize,
    done: impl Fn(&Pod) -> bool,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    let list = ListParams::default().labels("bench=live-reload");
    loop {
        let now = pods.list(&list).await?.items;
        let finished = now.len() == total && now.iter().all(|p| ready(p) && done(p));
        if finished {
            return Ok(());
        }
        if Instant::now() > deadline {
            let left = now.iter().filter(|p| !(ready(p) && done(p))).count();
            anyhow::bail!(
                "not settled within {limit:?}: {} pods, {left} not done",
                now.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn image(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default()
}

fn restarted_at(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get("kubectl.kubernetes.io/restartedAt")
        .map(String::as_str)
}

/// Run A: what `kubectl rollout restart` patches, to every Deployment at once; the seconds
/// until every pod is replaced.
async fn rollout_restart(
    api: &Api<Deployment>,
    pods: &Api<Pod>,
    (deployments, total): (usize, usize),
    at: &str,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    for d in 0..deployments {
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": at}}}}});
        api.patch(
            &format!("web-{d}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    settled(
        pods,
        total,
        |p| restarted_at(p) == Some(at),
        Duration::from_mins(20),
    )
    .await?;
    Ok(started.elapsed().as_secs_f64())
}

/// Run B: one mapping change (to `mirrorN.io`); the seconds until every pod runs it, and the
/// operator's requests meanwhile.
async fn mapping_change(
    client: &Client,
    ns: &str,
    pods: &Api<Pod>,
    total: usize,
    op: &OperatorProcess,
    n: usize,
) -> anyhow::Result<(f64, Requests)> {
    let to = format!("mirror{n}.io/nginx");
    let want = format!("{to}:1.27");
    let before = op.requests()?;
    let started = Instant::now();
    apply_mapping(client, ns, &to).await?;
    settled(pods, total, |p| image(p) == want, Duration::from_mins(20)).await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok((seconds, delta(&before, &op.requests()?)))
}

/// By verb, summed over resources.
fn by_verb(requests: &Requests) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (key, n) in requests {
        let verb = key.split(' ').next().unwrap_or_default().to_string();
        *out.entry(verb).or_default() += n;
    }
    out
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; under `cargo test` (scripts/test) a small run checks that
    // the benchmark works.
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let deployments = numbers
        .first()
        .copied()
        .unwrap_or(if bench { 100 } else { 2 });
    let per = numbers
        .get(1)
        .copied()
        .unwrap_or(if bench { 10 } else { 2 });
    let pairs = numbers.get(2).copied().unwrap_or(1);
    let total = deployments * per;
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no cluster ({e}): run the benchmark with scripts/bench-live-reload")
    })?;
    cluster::install_crds(&client).await?;
    let ns = format!("bench-live-reload-{}", std::process::id());
    cluster::fresh_namespace(&client, &ns).await?;
    apply_mapping(&client, &ns, "mirror0.io/nginx").await?;
    let mut op = OperatorProcess::start_with_webhook(&ns, &[])?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // A pod created before the API server calls the webhook is admitted unmapped, and live
    // reload rolls it: the evictions are counted from once every pod is mapped.
    for d in 0..deployments {
        api.create(
            &PostParams::default(),
            &deployment(&format!("web-{d}"), per)?,
        )
        .await?;
    }
    settled(
        &pods,
        total,
        |p| image(p) == "mirror0.io/nginx:1.27",
        Duration::from_mins(20),
    )
    .await?;
    println!(
        "live reload benchmark: {deployments} Deployments × {per} pods ({total} pods, maxSurge 0, maxUnavailable 1), --max-recreates-per-minute 0; runs alternate: A = kubectl rollout restart (the Deployment controller), B = one mapping change (imagemap's evictions)"
    );
    println!("| run | what | seconds |");
    println!("|---|---|---|");
    let evictions = |op: &OperatorProcess| -> f64 {
        op.series("imagemap_pods_evicted_total")
            .iter()
            .map(|(_, v)| v)
            .sum()
    };
    let evicted_before = evictions(&op);
    let (mut a_runs, mut b_runs) = (Vec::new(), Vec::new());
    let mut b_requests = Requests::new();
    op.sample_peak();
    for pair in 0..pairs {
        let a =
            rollout_restart(&api, &pods, (deployments, total), &format!("bench-{pair}")).await?;
        println!("| {} | A: rollout restart | {a:.1} |", 2 * pair + 1);
        a_runs.push(a);
        let (b, requests) = mapping_change(&client, &ns, &pods, total, &op, pair + 1).await?;
        for (k, n) in requests {
            *b_requests.entry(k).or_default() += n;
        }
        println!("| {} | B: mapping change | {b:.1} |", 2 * pair + 2);
        b_runs.push(b);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    for (i, (a, b)) in a_runs.iter().zip(&b_runs).enumerate() {
        println!("pair {}: B / A = {:.2}", i + 1, b / a);
    }
    println!(
        "means: A {:.1} s, B {:.1} s, B / A = {:.2} (target ≤ 1.20)",
        mean(&a_runs),
        mean(&b_runs),
        mean(&b_runs) / mean(&a_runs)
    );
    let evicted = evictions(&op) - evicted_before;
    println!(
        "evictions: {evicted} for {} pod replacements: {:.2} per pod (target 1.00)",
        total * pairs,
        evicted / (total * pairs) as f64
    );
    println!(
        "operator RSS: {:.1} MiB now, {:.1} MiB peak during the runs",
        op.rss_mib(),
        op.peak_mib()
    );
    println!(
        "operator requests during the B runs, by verb: {:?}",
        by_verb(&b_requests)
    );
    println!("operator requests during the B runs: {b_requests:?}");
    op.stop()?;
    Ok(())
}
