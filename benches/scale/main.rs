//! The scale benchmark, against the control plane with kwok nodes: N liveReload VMs, a cold
//! start, then one mapping change that gives every VM a new pod. The operator (the release
//! binary, as a process) runs next to a baseline — a plain client doing only the minimum
//! writes for the same N at the same concurrency — in the same run.
//!
//!   scripts/bench-scale [N ...]      # default: 1000 10000

// Figures for a report: counts and sizes far below 2^52.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

mod baseline;
mod cluster;
mod operator_process;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::watcher;

use imagemap::core::api::{ImageMapping, VirtualMachine, VmPhase};
use imagemap::core::runner_pod::pod_images;

use cluster::{CONCURRENCY, Settling, apply_mapping, converge, create_vms, retry, target};
use operator_process::{OperatorProcess, Requests, delta};

const LIMIT: Duration = Duration::from_mins(30);

/// A VM whose status shows its pod running the image of `tag`.
fn vm_settled(vm: &VirtualMachine, tag: u32) -> bool {
    let Some(status) = &vm.status else {
        return false;
    };
    status.phase == Some(VmPhase::Running)
        && status
            .resolved_images
            .iter()
            .any(|i| i.slot == "rootDisk" && i.resolved.as_deref() == Some(target(tag).as_str()))
}

/// A live pod running the image of `tag`.
fn pod_running(pod: &Pod, tag: u32) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod_images(pod).get("rootDisk").map(String::as_str) == Some(target(tag).as_str())
}

async fn cleanup(client: &Client, ns: &str) -> anyhow::Result<()> {
    let now = DeleteParams::default().grace_period(0);
    let all = ListParams::default();
    let vms = Api::<VirtualMachine>::namespaced(client.clone(), ns);
    retry("deleting the VMs", || async {
        vms.delete_collection(&now, &all).await?;
        Ok(())
    })
    .await?;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    retry("deleting the pods", || async {
        pods.delete_collection(&now, &all).await?;
        Ok(())
    })
    .await
}

/// Live pods in `ns`, to check that no VM has two.
async fn live_pods(client: &Client, ns: &str) -> anyhow::Result<usize> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let pods = retry("listing pods", || async {
        Ok(api.list(&ListParams::default()).await?)
    })
    .await?;
    Ok(pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count())
}

struct OperatorFigures {
    cold: Duration,
    cold_settling: Settling,
    fan_out_settling: Settling,
    cold_requests: Requests,
    cold_peak: f64,
    steady: f64,
    fan_out: Duration,
    fan_out_requests: Requests,
    fan_out_peak: f64,
    after: f64,
}

async fn operator(client: &Client, n: usize, ns: &str) -> anyhow::Result<OperatorFigures> {
    cluster::fresh_namespace(client, ns).await?;
    apply_mapping(client, ns, 1).await?;
    create_vms(client, ns, n).await?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let all = watcher::Config::default;

    let started = Instant::now();
    let op = OperatorProcess::start(ns)?;
    let cold_settling = converge(vms.clone(), all(), n, LIMIT, |vm| vm_settled(vm, 1)).await?;
    let cold = started.elapsed();
    let cold_requests = op.requests()?;
    let cold_peak = op.peak_mib();
    op.stop()?;

    // Steady: a fresh start over the converged VMs, once every VM was reconciled.
    let mut op = OperatorProcess::start(ns)?;
    while op.reconciles() < n as u64 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = op.rss_mib();

    op.sample_peak();
    let before = op.requests()?;
    let started = Instant::now();
    retry("changing the mapping", || apply_mapping(client, ns, 2)).await?;
    let fan_out_settling = converge(vms, all(), n, LIMIT, |vm| vm_settled(vm, 2)).await?;
    let fan_out = started.elapsed();
    let fan_out_requests = delta(&before, &op.requests()?);
    let fan_out_peak = op.peak_mib();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = op.rss_mib();
    op.stop()?;
    let live = live_pods(client, ns).await?;
    anyhow::ensure!(live == n, "{live} live pods for {n} VMs");
    cleanup(client, ns).await?;
    Ok(OperatorFigures {
        cold,
        cold_settling,
        fan_out_settling,
        cold_requests,
        cold_peak,
        steady,
        fan_out,
        fan_out_requests,
        fan_out_peak,
        after,
    })
}

/// The baseline's cold start and fan-out: times, and how they settled.
struct BaselineFigures {
    cold: Duration,
    cold_settling: Settling,
    fan_out: Duration,
    fan_out_settling: Settling,
}

async fn baseline(client: &Client, n: usize, ns: &str) -> anyhow::Result<BaselineFigures> {
    cluster::fresh_namespace(client, ns).await?;
    apply_mapping(client, ns, 1).await?;
    let mappings: Api<ImageMapping> = Api::namespaced(client.clone(), ns);
    let rules_1 = baseline::rules(&mappings.get("tilt").await?);
    apply_mapping(client, ns, 2).await?;
    let rules_2 = baseline::rules(&mappings.get("tilt").await?);
    let vms = create_vms(client, ns, n).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let all = watcher::Config::default;

    let started = Instant::now();
    baseline::cold_start(client, &vms, &rules_1).await?;
    let cold_settling = converge(pods.clone(), all(), n, LIMIT, |p| pod_running(p, 1)).await?;
    let cold = started.elapsed();

    let started = Instant::now();
    baseline::fan_out(client, &vms, &rules_1, &rules_2).await?;
    let fan_out_settling = converge(pods, all(), n, LIMIT, |p| pod_running(p, 2)).await?;
    let fan_out = started.elapsed();
    cleanup(client, ns).await?;
    Ok(BaselineFigures {
        cold,
        cold_settling,
        fan_out,
        fan_out_settling,
    })
}

fn per_vm(requests: &Requests, n: usize) -> String {
    requests
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / n as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // (Other arguments are cargo test's filters.)
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    // `cargo bench` passes --bench; under `cargo test` (scripts/test) a small run checks that
    // the benchmark works.
    let sizes = match (sizes.is_empty(), args.iter().any(|a| a == "--bench")) {
        (false, _) => sizes,
        (true, true) => vec![1000, 10000],
        (true, false) => vec![10],
    };
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no cluster ({e}): run the benchmark with scripts/bench-scale")
    })?;
    cluster::install_crds(&client).await?;
    let run = std::process::id();
    println!(
        "scale benchmark: {CONCURRENCY} requests in flight for the baseline; times from the first write to every VM (or pod) settled"
    );
    // Each size in a namespace of its own, also when a size repeats (the test control
    // plane runs no namespace controller: a deleted namespace never goes).
    for (i, n) in sizes.into_iter().enumerate() {
        let op = operator(&client, n, &format!("bench-{run}-{i}-operator-{n}")).await?;
        let base = baseline(&client, n, &format!("bench-{run}-{i}-baseline-{n}")).await?;
        let (base_cold, base_fan) = (base.cold, base.fan_out);
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!("\n## {n} liveReload VMs");
        println!("| | operator | baseline | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| cold start | {:.1} s | {:.1} s | {:.2}× |",
            op.cold.as_secs_f64(),
            base_cold.as_secs_f64(),
            ratio(op.cold, base_cold)
        );
        println!(
            "| fan-out | {:.1} s | {:.1} s | {:.2}× |",
            op.fan_out.as_secs_f64(),
            base_fan.as_secs_f64(),
            ratio(op.fan_out, base_fan)
        );
        println!(
            "settled, cold start: operator {}; baseline {}",
            op.cold_settling, base.cold_settling
        );
        println!(
            "settled, fan-out: operator {}; baseline {}",
            op.fan_out_settling, base.fan_out_settling
        );
        println!(
            "requests per VM, cold start: {}",
            per_vm(&op.cold_requests, n)
        );
        println!(
            "requests per VM, fan-out: {}",
            per_vm(&op.fan_out_requests, n)
        );
        println!(
            "operator RSS: steady {:.0} MiB after a fresh start; peak {:.0} MiB in the cold start, {:.0} MiB in the fan-out; {:.0} MiB after it",
            op.steady, op.cold_peak, op.fan_out_peak, op.after
        );
    }
    Ok(())
}
