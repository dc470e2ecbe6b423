//! A loopback proxy between an operator and the API server that injects network faults.
//!
//! The operator speaks plain HTTP to the proxy; the proxy forwards each request over the
//! test's own authenticated client. Seeing requests (TLS would hide them) lets it act on
//! one watch alone — stall the pod watch while everything else flows — and record when
//! each write left the operator, for ordering checks across replicas.
//!
//! Faults:
//! - **stall** the watches whose path contains a pattern: their events are held (not lost)
//!   until released, as a lagging watch would deliver them;
//! - **cut** everything: open connections are dropped and new ones closed at once, until
//!   healed;
//! - **expire** the next watch of a path: it is answered "410 Gone", as the API server
//!   answers a watch whose resource version is too old, so the watcher lists again.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Instant;

use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use kube::Client;
use tokio::sync::watch;

/// Headers of one hop, set again by each side.
const HOP_HEADERS: [http::header::HeaderName; 4] = [
    http::header::HOST,
    http::header::CONNECTION,
    http::header::CONTENT_LENGTH,
    http::header::TRANSFER_ENCODING,
];

/// The response body: frames as they are released.
type Body = StreamBody<mpsc::Receiver<Result<Frame<Bytes>, Infallible>>>;

/// The faults in force.
#[derive(Debug, Clone, Default)]
struct Faults {
    /// Bumped by every cut: connections opened before are dropped.
    cuts: u64,
    cut: bool,
    stalled: BTreeSet<String>,
    expire_next_watch: BTreeSet<String>,
}

impl Faults {
    fn holds(&self, path: &str, watch: bool) -> bool {
        watch && self.stalled.iter().any(|p| path.contains(p.as_str()))
    }
}

/// A request as the proxy received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: Method,
    /// Path and query.
    pub target: String,
}

impl Seen {
    /// Whether it changes state (any method but GET).
    pub fn is_write(&self) -> bool {
        self.method != Method::GET
    }
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    pub port: u16,
    faults: watch::Sender<Faults>,
    seen: watch::Sender<Vec<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy forwarding to the API server through `upstream`.
    pub async fn start(upstream: Client) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let (faults, _) = watch::channel(Faults::default());
        let (seen, _) = watch::channel(Vec::new());
        let (f, s) = (faults.clone(), seen.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                if f.borrow().cut {
                    drop(stream);
                    continue;
                }
                tokio::spawn(serve(stream, upstream.clone(), f.clone(), s.clone()));
            }
        });
        FaultProxy {
            port,
            faults,
            seen,
            task,
        }
    }

    /// A kube config that reaches the API server through this proxy.
    pub fn config(&self, base: &kube::Config) -> kube::Config {
        let mut config = base.clone();
        config.cluster_url = format!("http://127.0.0.1:{}/", self.port)
            .parse()
            .expect("a URL");
        config.auth_info = kube::config::AuthInfo::default();
        config.root_cert = None;
        config
    }

    /// A kubeconfig file, for a process, that reaches the API server through this proxy.
    pub fn kubeconfig(&self, name: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("{name}-{}.kubeconfig", self.port));
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: proxy, cluster: {{server: 'http://127.0.0.1:{}'}}}}]\n\
             users: [{{name: proxied, user: {{}}}}]\n\
             contexts: [{{name: proxy, context: {{cluster: proxy, user: proxied}}}}]\n\
             current-context: proxy\n",
            self.port
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// Holds the events of every watch whose path contains `pattern` (e.g. `/pods`).
    pub fn stall_watches(&self, pattern: &str) {
        self.faults.send_modify(|f| {
            f.stalled.insert(pattern.to_string());
        });
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.faults.send_modify(|f| {
            f.cut = true;
            f.cuts += 1;
        });
    }

    /// Answers the next watch whose path contains `pattern` with "410 Gone".
    pub fn expire_next_watch(&self, pattern: &str) {
        self.faults.send_modify(|f| {
            f.expire_next_watch.insert(pattern.to_string());
        });
    }

    /// Ends every stall and cut; held events flow on.
    pub fn heal(&self) {
        self.faults.send_modify(|f| {
            f.cut = false;
            f.stalled.clear();
        });
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.borrow().clone()
    }

    /// Waits until a request matching `pred` has been received, and returns the first.
    pub async fn wait_seen(&self, what: &str, pred: impl Fn(&Seen) -> bool) -> Seen {
        let mut seen = self.seen.subscribe();
        let found = tokio::time::timeout(super::WAIT, seen.wait_for(|all| all.iter().any(&pred)))
            .await
            .unwrap_or_else(|_| panic!("{what}: not within {:?}", super::WAIT))
            .expect("the proxy runs");
        found.iter().find(|s| pred(s)).cloned().expect("just found")
    }
}

/// Serves one connection until it closes or a cut drops it.
async fn serve(
    stream: tokio::net::TcpStream,
    upstream: Client,
    faults: watch::Sender<Faults>,
    seen: watch::Sender<Vec<Seen>>,
) {
    let mut changes = faults.subscribe();
    let cuts = changes.borrow().cuts;
    let service = hyper::service::service_fn(move |req| {
        forward(req, upstream.clone(), faults.clone(), seen.clone())
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = conn => {}
        _ = changes.wait_for(|f| f.cuts != cuts) => {}
    }
}

async fn forward(
    req: Request<Incoming>,
    upstream: Client,
    faults: watch::Sender<Faults>,
    seen: watch::Sender<Vec<Seen>>,
) -> Result<Response<Body>, Infallible> {
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_string(), ToString::to_string);
    let method = req.method().clone();
    seen.send_modify(|all| {
        all.push(Seen {
            at: Instant::now(),
            method: method.clone(),
            target: target.clone(),
        });
    });
    let path = req.uri().path().to_string();
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let mut changes = faults.subscribe();
    if watch {
        let mut expired = false;
        faults.send_if_modified(|f| {
            let hit = f
                .expire_next_watch
                .iter()
                .find(|p| path.contains(p.as_str()))
                .cloned();
            if let Some(p) = hit {
                f.expire_next_watch.remove(&p);
                expired = true;
            }
            expired
        });
        if expired {
            let gone = serde_json::json!({
                "type": "ERROR",
                "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "reason": "Expired", "code": 410,
                    "message": "too old resource version (expired by the fault proxy)"}
            });
            return Ok(answer(StatusCode::OK, format!("{gone}\n").into()));
        }
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return Ok(answer(StatusCode::BAD_REQUEST, Bytes::new()));
    };
    let mut out = Request::builder().method(parts.method).uri(target);
    for (name, value) in &parts.headers {
        if !HOP_HEADERS.contains(name) {
            out = out.header(name, value);
        }
    }
    let Ok(out) = out.body(kube::client::Body::from(body)) else {
        return Ok(answer(StatusCode::BAD_REQUEST, Bytes::new()));
    };
    let response = match upstream.send(out).await {
        Ok(r) => r,
        Err(e) => return Ok(answer(StatusCode::BAD_GATEWAY, e.to_string().into())),
    };
    let (mut parts, mut upstream_body) = response.into_parts();
    for name in &HOP_HEADERS {
        parts.headers.remove(name);
    }
    let (mut tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = upstream_body.frame().await {
            // Held while a stall covers this response.
            if changes.wait_for(|f| !f.holds(&path, watch)).await.is_err() {
                return;
            }
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    });
    Ok(Response::from_parts(parts, StreamBody::new(rx)))
}

fn answer(code: StatusCode, body: Bytes) -> Response<Body> {
    let (mut tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Ok(Frame::data(body)));
    let mut response = Response::new(StreamBody::new(rx));
    *response.status_mut() = code;
    response
}
