//! The scan for pods admission did not map, on the test control plane: `N` pods created in
//! one namespace while no webhook answers (one container each, an image a rule rewrites, a
//! scheduler nobody runs: creating them is all the cluster does), then `imagemap run
//! --namespace NS --webhook-addr … --webhook-url …` (the release binary, as a process). It
//! prints how long until the mapping's status counts every pod in `unmappedPods`, the
//! operator's requests by verb and resource meanwhile (the scan's LIST pages among them),
//! and its RSS, peak included.
//!
//!   scripts/bench-pod-scan [N]    # default: 10000

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

/// Creates `n` pods asking for an image a rule rewrites, that no scheduler takes.
async fn create_pods(pods: &Api<Pod>, n: usize) -> anyhow::Result<()> {
    stream::iter(0..n)
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; under `cargo test` (scripts/test) a small run checks that
    // the benchmark works.
    let bench = args.iter().any(|a| a == "--bench");
    let n = args
        .iter()
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(if bench { 10_000 } else { 20 });
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no cluster ({e}): run the benchmark with scripts/bench-pod-scan")
    })?;
    cluster::install_crds(&client).await?;
    let ns = format!("bench-pod-scan-{}", std::process::id());
    cluster::fresh_namespace(&client, &ns).await?;
    let mut mapping = ImageMapping::new(
        "mirror",
        ImageMappingSpec {
            rules: serde_json::from_value(
                json!([{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]),
            )?,
            ..ImageMappingSpec::default()
        },
    );
    mapping.metadata.namespace = Some(ns.clone());
    let mappings: Api<ImageMapping> = Api::namespaced(client.clone(), &ns);
    mappings
        .patch(
            "mirror",
            &PatchParams::apply("imagemap-bench").force(),
            &Patch::Apply(&mapping),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = Instant::now();
    create_pods(&pods, n).await?;
    println!(
        "pod scan benchmark: {n} pods created unmapped in {:.1} s",
        created.elapsed().as_secs_f64()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let configuration = format!("imagemap-{ns}");
    let (addr, url) = (
        format!("127.0.0.1:{port}"),
        format!("https://127.0.0.1:{port}"),
    );
    let started = Instant::now();
    let op = OperatorProcess::start_with(
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
    println!(
        "operator requests, by verb and resource: {:?}",
        op.requests()?
    );
    op.stop()?;
    Ok(())
}
