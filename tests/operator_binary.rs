//! `imagemap run` as a process: probes, metrics, JSON logs and a clean stop on SIGTERM.
//! Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn run_serves_probes_and_metrics_and_stops_on_sigterm() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "binary").await;
    let port = free_port();
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_imagemap"))
            .args([
                "run",
                "--namespace",
                &ns,
                "--log-format",
                "json",
                &format!("--health-addr=127.0.0.1:{port}"),
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Ready once the caches have listed; polled, as a kubelet probe would.
    let deadline = Instant::now() + WAIT;
    let ready = loop {
        match http_get(port, "/readyz") {
            Some((200, body)) => break body,
            _ if Instant::now() > deadline => panic!("never ready"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert_eq!(ready.trim(), "ok");
    assert_eq!(http_get(port, "/livez").unwrap().0, 200);
    let (code, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains(
            "imagemap_api_requests_total{verb=\"list\",resource=\"virtualmachines\",code=\"200\"}"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("imagemap_reconciles_total"));
    assert_eq!(http_get(port, "/nope").unwrap().0, 404);

    Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    let stopped = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(stopped.elapsed() < WAIT, "still running after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    let mut logs = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    for line in logs.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string());
    }
    assert!(logs.contains("letting running reconciles finish"), "{logs}");
}

/// Peak resident memory of a process, in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn one_tenants_colliding_rules_cost_little_and_hold_up_no_one() {
    use imagemap::core::api::{ImageMapping, VirtualMachine};
    use imagemap::core::runner_pod::{VM_LABEL, pod_images};
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};
    use serde_json::json;

    let client = client().await;
    install_crds(&client).await;
    let (tenant, other) = (
        fresh_namespace(&client, "tenant").await,
        fresh_namespace(&client, "neighbour").await,
    );
    // 2,048 rules in one namespace, all for the same image (`exact`: busybox:latest), each
    // to its own target.
    let mappings: Api<ImageMapping> = Api::namespaced(client.clone(), &tenant);
    for m in 0..8 {
        let rules: Vec<_> = (0..256)
            .map(|r| json!({"match": {"exact": "busybox"}, "to": format!("t.io/m{m}/r{r}")}))
            .collect();
        let mapping: ImageMapping = serde_json::from_value(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": format!("m{m}")}, "spec": {"rules": rules}
        }))
        .unwrap();
        mappings
            .create(&PostParams::default(), &mapping)
            .await
            .unwrap();
    }
    let vm = |name: &str| -> VirtualMachine {
        serde_json::from_value(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
            "metadata": {"name": name},
            "spec": {"liveReload": true, "guest": {"rootDisk": {"image": "busybox"}}}
        }))
        .unwrap()
    };
    Api::<VirtualMachine>::namespaced(client.clone(), &tenant)
        .create(&PostParams::default(), &vm("tied"))
        .await
        .unwrap();
    let port = free_port();
    let child = Killed(
        Command::new(env!("CARGO_BIN_EXE_imagemap"))
            .args([
                "run",
                "--namespace",
                &tenant,
                "--namespace",
                &other,
                &format!("--health-addr=127.0.0.1:{port}"),
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + WAIT;
    while http_get(port, "/readyz").map(|r| r.0) != Some(200) {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The tenant's mapping says what is wrong, in a bounded message.
    let m0 = wait_for(mappings.clone(), "m0", |m: Option<&ImageMapping>| {
        m.and_then(|m| m.status.as_ref())
            .is_some_and(|s| s.conditions.iter().any(|c| c.reason == "Conflict"))
    })
    .await;
    assert_eq!(kstatus(&[&m0]), ["Failed"]);
    let message = &m0.status.as_ref().unwrap().conditions[0].message;
    assert!(message.len() < 4096, "{} bytes", message.len());
    assert!(message.contains("and 2046 more: same match"), "{message}");

    // A neighbour's VM gets its mapping at once.
    let started = Instant::now();
    Api::<ImageMapping>::namespaced(client.clone(), &other)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
                "metadata": {"name": "mirror"},
                "spec": {"rules": [{"match": {"exact": "busybox"}, "to": "mirror.io/busybox"}]}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // The VM comes once the operator has compiled the mapping (its status says so): a VM
    // seen first would get a pod with the unmapped image, replaced once the mapping is in.
    wait_for(
        Api::<ImageMapping>::namespaced(client.clone(), &other),
        "mirror",
        |m: Option<&ImageMapping>| {
            m.and_then(|m| m.status.as_ref())
                .is_some_and(|s| s.observed_generation.is_some())
        },
    )
    .await;
    Api::<VirtualMachine>::namespaced(client.clone(), &other)
        .create(&PostParams::default(), &vm("neighbour"))
        .await
        .unwrap();
    wait_list(
        Api::<Pod>::namespaced(client.clone(), &other),
        kube::runtime::watcher::Config::default().labels(&format!("{VM_LABEL}=neighbour")),
        "the neighbour's pod with its mapped image",
        |pods| {
            pods.iter().any(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && pod_images(p)
                        .values()
                        .any(|i| i.starts_with("mirror.io/busybox"))
            })
        },
    )
    .await;
    let took = started.elapsed();
    let peak = peak_rss_mib(child.0.id());
    drop(child);
    println!("neighbour's pod after {took:?}; operator peak RSS {peak:.0} MiB");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(peak < 128.0, "peak RSS {peak:.0} MiB");
}
