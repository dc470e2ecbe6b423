//! `imagemap run` as a process: probes, metrics, JSON logs and a clean stop on SIGTERM.
//! Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn run_serves_probes_and_metrics_and_stops_on_sigterm() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "binary").await;
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_imagemap"))
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
        .unwrap();
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
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let stopped = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(stopped.elapsed() < WAIT, "still running after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    let mut logs = String::new();
    child
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
