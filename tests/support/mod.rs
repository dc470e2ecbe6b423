//! Shared helpers of the integration tests: a kube client for the control plane that
//! `scripts/test` starts (through `KUBECONFIG`), kubectl, CRD installation and fresh
//! namespaces.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code; not every test uses every helper

pub mod fault_proxy;
pub mod hostile_registry;
pub mod neonvm;
pub mod registry;
pub mod served_certificate;
pub mod tls_front;
pub mod vms;
pub mod webhooks;

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::OnceCell;

/// How long a test waits for a condition before failing.
pub const WAIT: Duration = Duration::from_mins(1);

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A client for the test control plane; fails with a hint when there is none.
pub async fn client() -> Client {
    Client::try_default()
        .await
        .expect("no cluster: run the integration tests through scripts/test, which starts the control plane")
}

/// Runs kubectl in the repository root, as a user would.
pub fn kubectl(args: &[&str]) -> Output {
    Command::new("kubectl")
        .args(args)
        .current_dir(REPO)
        .output()
        .expect("kubectl runs")
}

/// Runs kubectl and fails the test with its output when it fails.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

static CRDS: OnceCell<()> = OnceCell::const_new();

/// Applies `crds/` with kubectl once per test binary and waits until every CRD is Established.
pub async fn install_crds(client: &Client) {
    CRDS.get_or_init(|| async {
        kubectl_ok(&["apply", "-f", "crds/"]);
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in imagemap::core::crd_yaml::all() {
            let name = crd.metadata.name.clone().unwrap();
            wait_for(api.clone(), &name, conditions::is_crd_established()).await;
        }
    })
    .await;
}

/// Waits until `cond` holds for the named object, failing the test after [`WAIT`].
pub async fn wait_for<K>(api: Api<K>, name: &str, cond: impl Condition<K>) -> K
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + Resource + 'static,
{
    match tokio::time::timeout(WAIT, await_condition(api, name, cond)).await {
        Ok(Ok(Some(obj))) => obj,
        Ok(Ok(None)) => panic!("{name} was deleted while waiting"),
        Ok(Err(e)) => panic!("watching {name}: {e}"),
        Err(tokio::time::error::Elapsed { .. }) => {
            panic!("{name} did not reach the condition within {WAIT:?}")
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Creates a namespace no other test uses (deleted namespaces never finish terminating
/// without a controller manager, so each test gets a new one).
pub async fn fresh_namespace(client: &Client, prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let name = format!("{prefix}-{}-{n}-{:x}", std::process::id(), nanos % 0xfffff);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

// ---- the operator, in process, with a request counter

use std::sync::Arc;

use futures::StreamExt;
use imagemap::api_requests::ApiRequests;
use imagemap::operator::{self, Observers, Options, Progress};
use kube::runtime::{WatchStreamExt, reflector, watcher};

/// An operator running in this test process, stopped (as if it crashed) when dropped.
pub struct Operator {
    pub requests: ApiRequests,
    pub progress: Arc<Progress>,
    pub observers: Observers,
    handle: tokio::task::JoinHandle<()>,
}

impl Operator {
    fn new(
        requests: ApiRequests,
        observers: Observers,
        handle: tokio::task::JoinHandle<()>,
    ) -> Operator {
        Operator {
            requests,
            progress: Arc::clone(&observers.progress),
            observers,
            handle,
        }
    }

    /// Starts an operator acting in `namespaces`.
    pub async fn start(namespaces: &[&str], options: Options) -> Operator {
        let config = kube::Config::infer().await.expect("KUBECONFIG");
        Operator::start_with(config, namespaces, options)
    }

    /// Starts an operator acting in `namespaces` with `config`'s credentials.
    pub fn start_with(config: kube::Config, namespaces: &[&str], options: Options) -> Operator {
        let (clients, requests) = operator::OperatorClients::new(config).expect("client");
        let observers = Observers::new(requests.clone());
        let options = Options {
            namespaces: namespaces
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            ..options
        };
        let o = observers.clone();
        let handle = tokio::spawn(async move {
            if let Err(e) = operator::run_with(clients, options, o, std::future::pending()).await {
                panic!("operator stopped: {e:#}");
            }
        });
        Operator::new(requests, observers, handle)
    }
}

impl Operator {
    /// Starts an operator acting in all namespaces with `config`'s credentials, running
    /// while it holds the Lease of `election`.
    pub fn start_as(
        config: kube::Config,
        election: operator::LeaderElection,
        options: Options,
    ) -> Operator {
        let clients = operator::ElectedClients::new(config).expect("clients");
        let requests = clients.requests.clone();
        let observers = Observers::new(requests.clone());
        let o = observers.clone();
        let handle = tokio::spawn(async move {
            let _ =
                operator::run_elected(clients, options, o, election, std::future::pending()).await;
        });
        Operator::new(requests, observers, handle)
    }

    /// Starts an operator that runs only while it holds the Lease of `election`;
    /// `stop()` (through the returned sender) shuts it down gracefully, releasing the Lease.
    pub async fn start_elected(
        namespaces: &[&str],
        election: operator::LeaderElection,
    ) -> (Operator, tokio::sync::oneshot::Sender<()>) {
        let config = kube::Config::infer().await.expect("KUBECONFIG");
        let clients = operator::ElectedClients::new(config).expect("clients");
        let requests = clients.requests.clone();
        let observers = Observers::new(requests.clone());
        let options = Options {
            namespaces: namespaces
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            ..Options::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let o = observers.clone();
        let handle = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = operator::run_elected(clients, options, o, election, shutdown).await {
                panic!("operator stopped: {e:#}");
            }
        });
        (Operator::new(requests, observers, handle), stop)
    }

    /// Stops the operator as if it crashed.
    pub fn handle_abort(&self) {
        self.handle.abort();
    }

    /// Waits until the operator's task has ended.
    pub async fn finished(&mut self) {
        let _ = tokio::time::timeout(WAIT, &mut self.handle).await;
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Watches a list and waits until `pred` holds for its current state.
pub async fn wait_list<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    pred: impl Fn(&[Arc<K>]) -> bool,
) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + serde::Serialize
        + serde::de::DeserializeOwned
        + 'static,
{
    wait_list_for(WAIT, api, config, what, pred).await
}

/// [`wait_list`] with its own time limit.
pub async fn wait_list_for<K>(
    limit: Duration,
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    pred: impl Fn(&[Arc<K>]) -> bool,
) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + serde::Serialize
        + serde::de::DeserializeOwned
        + 'static,
{
    let (reader, writer) = reflector::store();
    let mut events = watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .boxed();
    let mut listed = false;
    let found = tokio::time::timeout(limit, async {
        while let Some(ev) = events.next().await {
            if matches!(ev, Ok(watcher::Event::InitDone)) {
                listed = true;
            }
            if listed && pred(&reader.state()) {
                return reader.state();
            }
        }
        panic!("watch ended while waiting for {what}");
    })
    .await;
    if let Ok(state) = found {
        state
    } else {
        let names: Vec<String> = reader
            .state()
            .iter()
            .map(|o| {
                format!(
                    "{}: {}",
                    o.name_any(),
                    serde_json::to_string(&**o).unwrap_or_default()
                )
            })
            .collect();
        panic!(
            "{what}: not reached within {limit:?}; last state:\n{}",
            names.join("\n")
        );
    }
}

/// Waits until a watch value satisfies `pred`.
pub async fn wait_value<T>(
    mut rx: tokio::sync::watch::Receiver<T>,
    what: &str,
    pred: impl FnMut(&T) -> bool,
) {
    match tokio::time::timeout(WAIT, rx.wait_for(pred)).await {
        Ok(Ok(_)) => {}
        _ => panic!("{what}: not reached within {WAIT:?}"),
    }
}

/// What kstatus (sigs.k8s.io/cli-utils' rules, as Flux and kpt read objects) says of each
/// object: `Current`, `InProgress`, `Failed`, ... (`scripts/control-plane build` builds it.)
pub fn kstatus<K: serde::Serialize>(objects: &[&K]) -> Vec<String> {
    use std::io::Write;
    let mut child = Command::new("kstatus")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kstatus (built by scripts/control-plane build, on PATH in scripts/test)");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for o in objects {
            let line = serde_json::to_string(o).expect("JSON");
            writeln!(stdin, "{line}").expect("write to kstatus");
        }
    }
    let out = child.wait_with_output().expect("kstatus output");
    assert!(out.status.success(), "kstatus failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A loopback port no one listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a loopback port")
        .local_addr()
        .expect("its address")
        .port()
}

/// A plain HTTP GET on loopback: `(status code, body)`, or `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    Some((code, body))
}

/// A child process killed when dropped, also when a test fails.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A plain HTTP POST of a JSON body on loopback with an `Authorization` header: `(status
/// code, body)`. Async: the server may run on the test's own runtime.
pub async fn http_post(port: u16, path: &str, authorization: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Authorization: {authorization}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("answer");
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (code, body)
}

/// `imagemap run` as a process, as a Deployment runs it: with `args`, probes on a port of
/// its own, stderr kept in a file for a failing test to show.
pub struct OperatorProcess {
    pub child: Killed,
    pub health_port: u16,
    pub log: std::path::PathBuf,
}

impl OperatorProcess {
    /// Starts it and waits until `/readyz` answers 200 (polled, as a kubelet probes).
    pub async fn start(args: &[&str]) -> OperatorProcess {
        Self::start_as(Command::new(env!("CARGO_BIN_EXE_imagemap")), args).await
    }

    /// Starts it as a pod of namespace `namespace` runs it (`POD_NAMESPACE`).
    pub async fn start_in(namespace: &str, args: &[&str]) -> OperatorProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_imagemap"));
        command.env("POD_NAMESPACE", namespace);
        Self::start_as(command, args).await
    }

    /// Starts it with at most `files` open file descriptors (`prlimit --nofile`).
    pub async fn start_with_file_limit(files: u32, args: &[&str]) -> OperatorProcess {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={files}:{files}"))
            .arg(env!("CARGO_BIN_EXE_imagemap"));
        Self::start_as(command, args).await
    }

    async fn start_as(mut command: Command, args: &[&str]) -> OperatorProcess {
        let health_port = free_port();
        let log =
            std::env::temp_dir().join(format!("imagemap-{}-{health_port}.log", std::process::id()));
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Killed(
            command
                .arg("run")
                .args(args)
                .arg(format!("--health-addr=127.0.0.1:{health_port}"))
                .stderr(stderr)
                .spawn()
                .unwrap(),
        );
        let mut process = OperatorProcess {
            child,
            health_port,
            log,
        };
        let deadline = std::time::Instant::now() + WAIT;
        while http_get(health_port, "/readyz").map(|r| r.0) != Some(200) {
            assert!(
                process.running(),
                "the operator exited:\n{}",
                process.logs()
            );
            assert!(std::time::Instant::now() < deadline, "never ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        process
    }

    /// Whether the process still runs (never restarted: it is the same process).
    pub fn running(&mut self) -> bool {
        self.child.0.try_wait().unwrap().is_none()
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of the `/metrics` samples whose line starts with `series`.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, body) = http_get(self.health_port, "/metrics").expect("/metrics answers");
        body.lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Resident memory (`VmRSS`) and its peak (`VmHWM`), in MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id())).unwrap();
        let read = |key: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap()
                / 1024.0
        };
        (read("VmRSS:"), read("VmHWM:"))
    }
}

/// Waits until `pred` holds, checking every 100 ms, failing after `limit` with `what`: for
/// what only a process's own endpoints show (its metrics, its connections).
pub async fn wait_until(limit: Duration, what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !pred() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
