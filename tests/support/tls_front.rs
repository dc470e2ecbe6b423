//! A test front before several webhook replicas, as a Service is: a TCP proxy that passes
//! TLS through untouched (every replica serves the same certificate), sends each new
//! connection to the next replica whose `/readyz` answers 200, and stops sending new ones
//! to a replica as soon as its `/readyz` fails.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use super::http_get;

/// One replica: where it serves the webhook, and its probes.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    pub port: u16,
    pub health_port: u16,
}

#[derive(Debug, Default)]
struct State {
    backends: Vec<Backend>,
    ready: Vec<bool>,
    next: usize,
    /// Connections sent to each backend so far.
    sent: Vec<u64>,
}

/// The front; it stops when dropped.
pub struct TlsFront {
    pub port: u16,
    state: Arc<Mutex<State>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TlsFront {
    pub async fn start(backends: Vec<Backend>) -> TlsFront {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let n = backends.len();
        let state = Arc::new(Mutex::new(State {
            backends,
            ready: vec![false; n],
            next: 0,
            sent: vec![0; n],
        }));
        let probing = Arc::clone(&state);
        let probe = tokio::spawn(async move {
            loop {
                let backends = probing.lock().unwrap().backends.clone();
                let ready: Vec<bool> = backends
                    .iter()
                    .map(|b| http_get(b.health_port, "/readyz").map(|r| r.0) == Some(200))
                    .collect();
                probing.lock().unwrap().ready = ready;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let routing = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&routing);
                tokio::spawn(async move {
                    let Some(mut server) = connect(&state).await else {
                        return;
                    };
                    let mut client = client;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        TlsFront {
            port,
            state,
            tasks: vec![probe, accept],
        }
    }

    /// Replaces backend `i` (a replica started again, with probes on another port).
    pub fn replace(&self, i: usize, backend: Backend) {
        let mut state = self.state.lock().unwrap();
        state.backends[i] = backend;
        state.ready[i] = false;
    }

    /// How many connections each backend was sent.
    pub fn sent(&self) -> Vec<u64> {
        self.state.lock().unwrap().sent.clone()
    }

    /// Waits until every backend is ready, as the front sees it.
    pub async fn wait_all_ready(&self) {
        super::wait_until(super::WAIT, "every replica ready behind the front", || {
            self.state.lock().unwrap().ready.iter().all(|r| *r)
        })
        .await;
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A connection to the next ready backend that accepts one.
async fn connect(state: &Mutex<State>) -> Option<TcpStream> {
    let n = state.lock().unwrap().backends.len();
    for _ in 0..n {
        let (i, backend) = {
            let mut s = state.lock().unwrap();
            let ready: Vec<usize> = (0..n).filter(|&i| s.ready[i]).collect();
            if ready.is_empty() {
                return None;
            }
            let i = ready[s.next % ready.len()];
            s.next += 1;
            (i, s.backends[i])
        };
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", backend.port)).await {
            state.lock().unwrap().sent[i] += 1;
            return Some(stream);
        }
    }
    None
}
