//! The operator under test: the release binary as a process, its `/metrics`, and its RSS.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Request counts by `verb resource` (codes summed), from `imagemap_api_requests_total`.
pub type Requests = BTreeMap<String, u64>;

pub struct OperatorProcess {
    child: Child,
    port: u16,
    sampler: Option<Sampler>,
}

/// Samples a process's RSS every 50 ms, keeping the peak.
struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// The resident set size of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

impl OperatorProcess {
    /// Starts `imagemap run` acting in `namespace`, and waits until it is ready.
    pub fn start(namespace: &str) -> anyhow::Result<OperatorProcess> {
        Self::start_with(namespace, &[])
    }

    /// Starts `imagemap run` acting in `namespace` with `extra` arguments, and waits until it
    /// is ready.
    pub fn start_with(namespace: &str, extra: &[&str]) -> anyhow::Result<OperatorProcess> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(env!("CARGO_BIN_EXE_imagemap"))
            .args([
                "run",
                "--namespace",
                namespace,
                "--max-recreates-per-minute=0",
                &format!("--health-addr=127.0.0.1:{port}"),
            ])
            .args(extra)
            .env("RUST_LOG", "warn")
            .spawn()?;
        let mut op = OperatorProcess {
            child,
            port,
            sampler: None,
        };
        op.sample_peak();
        for _ in 0..600 {
            if http_get(port, "/readyz").is_some() {
                return Ok(op);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        anyhow::bail!("the operator was not ready within 60 s")
    }

    /// [`Self::start_with`], serving its webhook and registering it (`--webhook-url`, the
    /// configuration `imagemap-NAMESPACE`).
    #[allow(dead_code)] // started so by benches/pod_scan.rs, live_reload.rs and admission_pods.rs
    pub fn start_with_webhook(namespace: &str, extra: &[&str]) -> anyhow::Result<OperatorProcess> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let configuration = format!("imagemap-{namespace}");
        let (addr, url) = (
            format!("127.0.0.1:{port}"),
            format!("https://127.0.0.1:{port}"),
        );
        let mut args = vec![
            "--webhook-addr",
            &addr,
            "--webhook-url",
            &url,
            "--webhook-configuration",
            &configuration,
        ];
        args.extend_from_slice(extra);
        Self::start_with(namespace, &args)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// RSS now, in MiB.
    pub fn rss_mib(&self) -> f64 {
        rss_kib(self.pid()).map_or(0.0, |k| k as f64 / 1024.0)
    }

    /// Starts keeping the peak RSS from now.
    pub fn sample_peak(&mut self) {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, pid) = (Arc::clone(&peak), Arc::clone(&stop), self.pid());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    p.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        if let Some(old) = self.sampler.replace(Sampler { peak, stop, thread }) {
            old.stop.store(true, Ordering::Relaxed);
            let _ = old.thread.join();
        }
    }

    /// The peak RSS since [`Self::sample_peak`], in MiB.
    pub fn peak_mib(&self) -> f64 {
        self.sampler
            .as_ref()
            .map_or(0.0, |s| s.peak.load(Ordering::Relaxed) as f64 / 1024.0)
    }

    /// The operator's own count of its API requests.
    pub fn requests(&self) -> anyhow::Result<Requests> {
        let text =
            http_get(self.port, "/metrics").ok_or_else(|| anyhow::anyhow!("no /metrics answer"))?;
        let mut out = Requests::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("imagemap_api_requests_total{") else {
                continue;
            };
            let (labels, value) = rest.split_once("} ").unwrap_or_default();
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let n: f64 = value.trim().parse().unwrap_or(0.0);
            *out.entry(format!("{} {}", label("verb"), label("resource")))
                .or_default() += n as u64;
        }
        Ok(out)
    }

    /// The `/metrics` series that start with `prefix`: each one's name and labels, and value.
    #[allow(dead_code)] // read by benches/admission_pods.rs
    pub fn series(&self, prefix: &str) -> Vec<(String, f64)> {
        http_get(self.port, "/metrics").map_or_else(Vec::new, |text| {
            text.lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| {
                    let (name, value) = l.rsplit_once(' ')?;
                    Some((name.to_string(), value.parse().ok()?))
                })
                .collect()
        })
    }

    /// The count of finished reconciles.
    pub fn reconciles(&self) -> u64 {
        http_get(self.port, "/metrics")
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("imagemap_reconciles_total "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .map_or(0, |n| n as u64)
    }

    /// Stops the operator with SIGTERM and waits for it.
    pub fn stop(mut self) -> anyhow::Result<()> {
        if let Some(s) = self.sampler.take() {
            s.stop.store(true, Ordering::Relaxed);
            let _ = s.thread.join();
        }
        Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `after - before`, per key, without the zeros.
pub fn delta(before: &Requests, after: &Requests) -> Requests {
    after
        .iter()
        .map(|(k, n)| (k.clone(), n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}
