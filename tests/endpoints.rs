//! The operator's own HTTP endpoints (probes and metrics, registry notifications), tried
//! as any pod in the cluster could: connections that never finish their headers, a process
//! out of file descriptors, a rotated notification token. `imagemap run` as a process,
//! against the real control plane. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens `n` connections to `port` that send the start of a request and never finish its
/// headers; returns how many the server has closed so far.
async fn half_sent(port: u16, n: usize) -> Arc<AtomicUsize> {
    let closed = Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
            closed.fetch_add(1, Ordering::SeqCst);
            continue;
        };
        let _ = stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: imagemap\r\nX-Slow: ")
            .await;
        let closed = Arc::clone(&closed);
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            // Whatever the server sends (a 408, say), it ends with the connection closed.
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            closed.fetch_add(1, Ordering::SeqCst);
        });
    }
    closed
}

/// A token file for the notification endpoint, replaced as a Secret volume replaces it.
fn write_token(path: &std::path::Path, token: &str) {
    let next = path.with_extension("new");
    std::fs::write(&next, token).unwrap();
    std::fs::rename(&next, path).unwrap();
}

async fn notify(port: u16, token: &str) -> u16 {
    http_post(
        port,
        "/events",
        &format!("Bearer {token}"),
        r#"{"events": []}"#,
    )
    .await
    .0
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_thousand_half_sent_requests_hold_up_no_probe_and_are_all_closed() {
    const HELD: usize = 1000;
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "endpoints").await;
    let op = OperatorProcess::start(&["--namespace", &ns]).await;
    let (before, _) = op.rss_mib();

    let opened = Instant::now();
    let closed = half_sent(op.health_port, HELD).await;
    let fresh = Instant::now();
    let (code, _) = http_get(op.health_port, "/livez").expect("a fresh /livez answers");
    let answered = fresh.elapsed();
    let (during, _) = op.rss_mib();
    wait_until(
        Duration::from_mins(1),
        "every half-sent request closed",
        || closed.load(Ordering::SeqCst) == HELD,
    )
    .await;
    let all_closed = opened.elapsed();
    let (after, peak) = op.rss_mib();
    println!(
        "{HELD} half-sent requests: a fresh /livez answered in {answered:?}; RSS {before:.0} → {during:.0} MiB (peak {peak:.0}, {after:.0} after); all closed {all_closed:?} after they were opened"
    );
    assert_eq!(code, 200);
    assert!(answered < Duration::from_secs(1), "{answered:?}");
    assert!(
        during - before < 32.0,
        "RSS grew {:.0} MiB",
        during - before
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn out_of_file_descriptors_the_operator_keeps_running_and_recovers() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "endpoints-fd").await;
    let dir = std::env::temp_dir().join(format!("endpoints-fd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    write_token(&token_file, "first-token");
    let notify_port = free_port();
    let mut op = OperatorProcess::start_with_file_limit(
        96,
        &[
            "--namespace",
            &ns,
            "--registry-notifications-token-file",
            token_file.to_str().unwrap(),
            "--registry-notifications-addr",
            &format!("127.0.0.1:{notify_port}"),
        ],
    )
    .await;
    assert_eq!(notify(notify_port, "first-token").await, 200);

    // A rotated token takes effect without a restart.
    write_token(&token_file, "second-token");
    assert_eq!(notify(notify_port, "first-token").await, 401);
    assert_eq!(notify(notify_port, "second-token").await, 200);

    // More connections than the process may open files.
    let mut held = Vec::new();
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", notify_port)).await {
            held.push(s);
        }
    }
    wait_until(WAIT, "the operator out of file descriptors", || {
        op.logs().contains("cannot accept connections; retrying")
    })
    .await;
    assert!(op.running(), "still running:\n{}", op.logs());

    // The connections go: it serves again, and never restarted.
    drop(held);
    let recovered = Instant::now();
    wait_until(WAIT, "/livez answers again", || {
        http_get(op.health_port, "/livez").is_some_and(|r| r.0 == 200)
    })
    .await;
    println!(
        "out of file descriptors (limit 96, 200 connections): serving again {:?} after they went",
        recovered.elapsed()
    );
    assert_eq!(notify(notify_port, "second-token").await, 200);
    assert!(op.running(), "never restarted:\n{}", op.logs());
    std::fs::remove_dir_all(&dir).unwrap();
}
