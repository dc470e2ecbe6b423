//! The leader's passes over the pods, on the test control plane (the release binary, as a
//! process: `imagemap run --namespace NS --webhook-addr … --webhook-url …`); pods have one
//! container each, an image a rule rewrites, and a scheduler nobody runs (creating them is
//! all the cluster does).
//!
//! - Pods admission did not map: `N` pods created while no webhook answers, then the
//!   operator; how long until the mapping's status counts every pod in `unmappedPods`.
//! - `--mapped`: the operator first, then `N / 10` pods its webhook maps, counted in
//!   `affectedPods`, then the rest, counted; the leader's RSS at each count; then a rule
//!   change that moves every pod to another mapping, and how long until the counts
//!   converge.
//!
//! Each prints the operator's requests by verb and resource (every LIST page among them),
//! the LISTs sent without a limit of at most 500, and its RSS, peak included.
//!
//!   scripts/bench-pod-scan [N]              # default: 10000
//!   scripts/bench-pod-scan --mapped [N]     # default: 100000

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

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use imagemap::core::api::{ImageMapping, ImageMappingSpec};
use operator_process::OperatorProcess;

/// Creates the pods `p{i}` for each `i` of `range`, asking for an image a rule rewrites,
/// that no scheduler takes.
async fn create_pods(pods: &Api<Pod>, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    stream::iter(range)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}")},
                    "spec": {"schedulerName": "bench-nobody",
                             "containers": [{"name": "app", "image": "nginx:1.27"}]},
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(cluster::CONCURRENCY)
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// Pods admission did not map: `n` created while no webhook answers, then the operator.
async fn unmapped(client: &Client, n: usize) -> anyhow::Result<()> {
    let ns = format!("bench-pod-scan-{}", std::process::id());
    cluster::fresh_namespace(client, &ns).await?;
    let mappings: Api<ImageMapping> = Api::namespaced(client.clone(), &ns);
    apply_mapping(&mappings, "mirror", 0, "mirror.io/nginx").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = Instant::now();
    create_pods(&pods, 0..n).await?;
    println!(
        "pod scan benchmark: {n} pods created unmapped in {:.1} s",
        created.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let op = OperatorProcess::start_with_webhook(&ns, &[])?;
    let ready = started.elapsed();
    let deadline = Instant::now() + Duration::from_mins(10);
    loop {
        let status = mappings.get("mirror").await?.status.unwrap_or_default();
        if status.unmapped_pods == Some(i32::try_from(n)?) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "unmappedPods not {n} within 10 minutes: {:?}",
            status.unmapped_pods
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counted = started.elapsed();
    println!(
        "operator ready {:.1} s after its start; unmappedPods = {n} {:.1} s after its start",
        ready.as_secs_f64(),
        counted.as_secs_f64()
    );
    println!(
        "operator RSS: {:.1} MiB now, {:.1} MiB peak",
        op.rss_mib(),
        op.peak_mib()
    );
    report_requests(&op)?;
    op.stop()?;
    Ok(())
}

/// Applies the ImageMapping `name` rewriting `nginx` to `to`, at `priority`.
async fn apply_mapping(
    mappings: &Api<ImageMapping>,
    name: &str,
    priority: i32,
    to: &str,
) -> anyhow::Result<()> {
    let mut mapping = ImageMapping::new(
        name,
        ImageMappingSpec {
            priority,
            rules: serde_json::from_value(json!([{"match": {"repository": "nginx"}, "to": to}]))?,
            ..ImageMappingSpec::default()
        },
    );
    mapping.metadata.namespace = mappings.namespace().map(str::to_string);
    mappings
        .patch(
            name,
            &PatchParams::apply("imagemap-bench").force(),
            &Patch::Apply(&mapping),
        )
        .await?;
    Ok(())
}

/// Prints the operator's requests by verb and resource, and its LISTs without a bounded
/// limit.
fn report_requests(op: &OperatorProcess) -> anyhow::Result<()> {
    println!(
        "operator requests, by verb and resource: {:?}",
        op.requests()?
    );
    let unbounded: f64 = op
        .series("imagemap_api_unbounded_lists_total")
        .iter()
        .fold(0.0, |sum, (_, n)| sum + n);
    println!("LISTs without a limit of at most 500: {unbounded}");
    anyhow::ensure!(unbounded == 0.0, "a LIST without a bounded limit");
    Ok(())
}

/// Waits (at most `within`) until the status of mapping `name` satisfies `holds`.
async fn wait_status(
    mappings: &Api<ImageMapping>,
    name: &str,
    within: Duration,
    holds: impl Fn(&imagemap::core::api::ImageMappingStatus) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let status = mappings
            .get_opt(name)
            .await?
            .and_then(|m| m.status)
            .unwrap_or_default();
        if holds(&status) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the status of {name} not as awaited within {within:?}: affectedPods {:?}, podsCountedAt {:?}",
            status.affected_pods,
            status.pods_counted_at
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the API server sends the operator's webhook `ns`'s pods.
async fn wait_sent(pods: &Api<Pod>) -> anyhow::Result<()> {
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"schedulerName": "bench-nobody",
                 "containers": [{"name": "app", "image": "nginx:1.27"}]},
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let made = pods.create(&dry_run, &probe).await?;
        let image = made
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image);
        if image.is_some_and(|i| i.starts_with("mirror.io/")) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the webhook was never called");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Mapped pods: the operator first, then `total / 10` pods its webhook maps, counted, then
/// the rest, counted; then a rule change that moves them all to another mapping.
async fn mapped(client: &Client, total: usize, bench: bool) -> anyhow::Result<()> {
    let first = total / 10;
    let ns = format!("bench-pod-count-{}", std::process::id());
    cluster::fresh_namespace(client, &ns).await?;
    let mappings: Api<ImageMapping> = Api::namespaced(client.clone(), &ns);
    apply_mapping(&mappings, "mirror", 0, "mirror.io/nginx").await?;
    // Every namespace is counted every 30 s here (5 minutes by default); a rule change
    // counts the namespace again within a minute (the default). A check under `cargo test`
    // counts every 2 s.
    let (every, per_namespace) = if bench { ("30", "60") } else { ("2", "2") };
    let started = Instant::now();
    let mut op = OperatorProcess::start_with_webhook(
        &ns,
        &[
            "--pod-count-seconds",
            every,
            "--pod-scan-namespace-seconds",
            per_namespace,
        ],
    )?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_sent(&pods).await?;
    let idle = op.rss_mib();
    println!(
        "pod count benchmark: operator ready and mapping pods {:.1} s after its start, RSS {idle:.1} MiB",
        started.elapsed().as_secs_f64()
    );
    let mut rss_at = Vec::new();
    for (from, to) in [(0, first), (first, total)] {
        op.sample_peak();
        let created = Instant::now();
        create_pods(&pods, from..to).await?;
        let took = created.elapsed();
        let n = i32::try_from(to)?;
        wait_status(&mappings, "mirror", Duration::from_mins(10), |s| {
            s.affected_pods == Some(n) && s.rules.first().is_some_and(|r| r.affected_pods == n)
        })
        .await?;
        let (rss, peak) = (op.rss_mib(), op.peak_mib());
        println!(
            "{to} pods mapped at admission (created in {:.1} s, {:.0}/s), affectedPods = {to} {:.1} s after the first was created; operator RSS {rss:.1} MiB, peak {peak:.1} MiB",
            took.as_secs_f64(),
            (to - from) as f64 / took.as_secs_f64(),
            created.elapsed().as_secs_f64()
        );
        rss_at.push((to, rss));
    }
    if let [(few, at_few), (many, at_many)] = rss_at[..] {
        println!(
            "operator RSS at {many} pods {at_many:.1} MiB, at {few} pods {at_few:.1} MiB: {:+.1} MiB (target: at most +16 MiB)",
            at_many - at_few
        );
    }
    // A rule change: a mapping of higher priority takes every pod.
    let changed = Instant::now();
    apply_mapping(&mappings, "other", 10, "mirror2.io/nginx").await?;
    let n = i32::try_from(total)?;
    wait_status(&mappings, "other", Duration::from_mins(10), |s| {
        s.affected_pods == Some(n)
    })
    .await?;
    wait_status(&mappings, "mirror", Duration::from_mins(10), |s| {
        s.affected_pods.is_none()
    })
    .await?;
    println!(
        "after a rule change moving all {total} pods to another mapping, the counts converged in {:.1} s (target: at most 120 s)",
        changed.elapsed().as_secs_f64()
    );
    report_requests(&op)?;
    op.stop()?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; under `cargo test` (scripts/test) a small run of each
    // checks that the benchmark works.
    let bench = args.iter().any(|a| a == "--bench");
    let n = args.iter().find_map(|a| a.parse::<usize>().ok());
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no cluster ({e}): run the benchmark with scripts/bench-pod-scan")
    })?;
    cluster::install_crds(&client).await?;
    if !bench {
        unmapped(&client, 20).await?;
        return mapped(&client, 40, false).await;
    }
    if args.iter().any(|a| a == "--mapped") {
        mapped(&client, n.unwrap_or(100_000), true).await
    } else {
        unmapped(&client, n.unwrap_or(10_000)).await
    }
}
