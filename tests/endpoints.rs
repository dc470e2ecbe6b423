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

/// Opens `n` connections to `port` that each send `size` bytes of a header and never end it.
async fn oversized(port: u16, n: usize, size: usize) -> Arc<AtomicUsize> {
    let closed = Arc::new(AtomicUsize::new(0));
    let line = format!("X-Big: {}", "x".repeat(size));
    for _ in 0..n {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
            closed.fetch_add(1, Ordering::SeqCst);
            continue;
        };
        let (closed, line) = (Arc::clone(&closed), line.clone());
        tokio::spawn(async move {
            let _ = stream
                .write_all(b"GET /livez HTTP/1.1\r\nHost: imagemap\r\n")
                .await;
            let _ = stream.write_all(line.as_bytes()).await;
            let mut buf = [0u8; 512];
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

    // Headers larger than the endpoint reads: each connection is refused, none holds more.
    let big = 300;
    let (before, _) = op.rss_mib();
    let closed = oversized(op.health_port, big, 64 << 10).await;
    wait_until(
        Duration::from_mins(1),
        "every oversized request closed",
        || closed.load(Ordering::SeqCst) == big,
    )
    .await;
    let (after, _) = op.rss_mib();
    println!("{big} requests with 64 KiB headers: RSS {before:.0} → {after:.0} MiB");
    assert!(after - before < 32.0, "RSS grew {:.0} MiB", after - before);

    // A kept-alive connection that goes quiet after a request is closed too.
    let mut idle = TcpStream::connect(("127.0.0.1", op.health_port))
        .await
        .unwrap();
    idle.write_all(b"GET /livez HTTP/1.1\r\nHost: imagemap\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0u8; 512];
    let n = idle.read(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
    let quiet = Instant::now();
    let mut rest = [0u8; 64];
    let ended = tokio::time::timeout(Duration::from_secs(30), idle.read(&mut rest)).await;
    assert!(
        matches!(ended, Ok(Ok(0) | Err(_))),
        "the idle connection is closed"
    );
    println!(
        "an idle kept-alive connection closed after {:?}",
        quiet.elapsed()
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

/// A POST of an empty notification envelope: the whole answer, status line and headers.
async fn notify_raw(port: u16, token: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let body = r#"{"events": []}"#;
    let request = format!(
        "POST /events HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn two_replicas_are_both_ready_and_notifications_reach_the_leader() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "endpoints-pair").await;
    let dir = std::env::temp_dir().join(format!("endpoints-pair-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    write_token(&token_file, "pair-token");
    let ports = [free_port(), free_port()];
    let start = |port: u16| {
        let (ns, token_file) = (ns.clone(), token_file.clone());
        async move {
            OperatorProcess::start(&[
                "--namespace",
                &ns,
                "--leader-elect",
                "--lease-namespace",
                &ns,
                "--lease-duration-seconds",
                "4",
                "--registry-notifications-token-file",
                token_file.to_str().unwrap(),
                "--registry-notifications-addr",
                &format!("127.0.0.1:{port}"),
            ])
            .await
        }
    };
    // Both become ready: the leader once its caches synced, the other standing by.
    let (a, b) = tokio::join!(start(ports[0]), start(ports[1]));
    let mut replicas = [a, b];
    for r in &replicas {
        assert_eq!(http_get(r.health_port, "/readyz").unwrap().0, 200);
        assert_eq!(http_get(r.health_port, "/livez").unwrap().0, 200);
    }
    // One takes notifications (once it leads: a first Lease is created after a lease
    // duration); the other asks the registry to retry.
    let deadline = Instant::now() + WAIT;
    let (answers, lead) = loop {
        let answers = [
            notify_raw(ports[0], "pair-token").await,
            notify_raw(ports[1], "pair-token").await,
        ];
        let taken: Vec<bool> = answers
            .iter()
            .map(|a| a.starts_with("HTTP/1.1 200"))
            .collect();
        assert!(
            !(taken[0] && taken[1]),
            "two replicas took notifications: {answers:?}"
        );
        if let Some(lead) = taken.iter().position(|t| *t) {
            break (answers, lead);
        }
        assert!(
            Instant::now() < deadline,
            "no replica ever led: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let other = 1 - lead;
    let refused = answers[other].to_ascii_lowercase();
    assert!(
        refused.starts_with("http/1.1 503") && refused.contains("retry-after: 5"),
        "{refused}"
    );
    // The leader is ready again once its caches have listed; the other stays ready.
    wait_until(WAIT, "both replicas ready", || {
        replicas
            .iter()
            .all(|r| http_get(r.health_port, "/readyz").is_some_and(|a| a.0 == 200))
    })
    .await;

    // The leader stops (a rollout): it releases the Lease, and the other takes over.
    std::process::Command::new("kill")
        .args(["-TERM", &replicas[lead].child.0.id().to_string()])
        .status()
        .unwrap();
    let stopped = Instant::now();
    let port = ports[other];
    let mut taken_over = false;
    let deadline = Instant::now() + WAIT;
    while !taken_over {
        taken_over = notify_raw(port, "pair-token")
            .await
            .starts_with("HTTP/1.1 200");
        assert!(
            Instant::now() < deadline,
            "the other replica never took over"
        );
        if !taken_over {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let handover = stopped.elapsed();
    println!("leader stopped (SIGTERM): the other replica took notifications {handover:?} later");
    assert!(replicas[other].running());
    let port = replicas[other].health_port;
    wait_until(WAIT, "the new leader ready", || {
        http_get(port, "/readyz").is_some_and(|a| a.0 == 200)
    })
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}
