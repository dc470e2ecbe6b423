//! A registry that misbehaves on purpose, for the tests of the operator's reach: it answers
//! each repository as its [`Behaviour`] says (huge bodies, malformed digests, redirects and
//! token realms pointing elsewhere), and [`Listener`] counts the connections a host the
//! operator must never contact receives. Both run on threads of their own.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How the registry answers for one repository.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// HEAD and GET: 200 with this `Docker-Content-Digest`.
    Digest(String),
    /// HEAD: 200 without a digest; GET: 200 and a body of this many bytes, chunked.
    HugeManifest(usize),
    /// HEAD: 200 without a digest; GET: 500 and a body of this many bytes, chunked.
    HugeError(usize),
    /// 307 to this URL.
    Redirect(String),
    /// 401 with a bearer challenge naming this realm.
    Realm(String),
}

/// The registry, on `127.0.0.1:port`.
pub struct HostileRegistry {
    pub port: u16,
    behaviours: Arc<Mutex<HashMap<String, Behaviour>>>,
    /// Requests received, as `METHOD path`.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl HostileRegistry {
    pub fn start() -> HostileRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let behaviours: Arc<Mutex<HashMap<String, Behaviour>>> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let (b, r) = (Arc::clone(&behaviours), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (b, r) = (Arc::clone(&b), Arc::clone(&r));
                std::thread::spawn(move || serve(&stream, &b, &r));
            }
        });
        HostileRegistry {
            port,
            behaviours,
            requests,
        }
    }

    /// `127.0.0.1:port`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Answers for `repository` as `behaviour` says from now on.
    pub fn set(&self, repository: &str, behaviour: Behaviour) {
        self.behaviours
            .lock()
            .unwrap()
            .insert(repository.into(), behaviour);
    }

    /// How many requests named `repository`.
    pub fn requests_for(&self, repository: &str) -> usize {
        let path = format!("/v2/{repository}/");
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.contains(&path))
            .count()
    }
}

fn serve(
    stream: &TcpStream,
    behaviours: &Mutex<HashMap<String, Behaviour>>,
    log: &Mutex<Vec<String>>,
) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
    }
    log.lock().unwrap().push(format!("{method} {path}"));
    let mut out = stream;
    let repository = path
        .strip_prefix("/v2/")
        .and_then(|rest| rest.split_once("/manifests/"))
        .map(|(repo, _)| repo.to_string());
    let behaviour = repository.and_then(|r| behaviours.lock().unwrap().get(&r).cloned());
    let head = method == "HEAD";
    let _ = match behaviour {
        None => out
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
        Some(Behaviour::Digest(d)) => write!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\n\
             docker-content-digest: {d}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
        Some(Behaviour::HugeManifest(_) | Behaviour::HugeError(_)) if head => out.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\n\
              content-length: 0\r\nconnection: close\r\n\r\n",
        ),
        Some(Behaviour::HugeManifest(n)) => huge(out, "200 OK", n),
        Some(Behaviour::HugeError(n)) => huge(out, "500 Internal Server Error", n),
        Some(Behaviour::Redirect(to)) => write!(
            out,
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
        Some(Behaviour::Realm(realm)) => write!(
            out,
            "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"{realm}\",service=\"hostile\"\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n"
        ),
    };
}

/// A chunked body of `n` bytes, written until done or the client goes.
fn huge(mut out: &TcpStream, status: &str, n: usize) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )?;
    let chunk = vec![b'x'; 64 << 10];
    let mut left = n;
    while left > 0 {
        let len = left.min(chunk.len());
        write!(out, "{len:x}\r\n")?;
        out.write_all(&chunk[..len])?;
        out.write_all(b"\r\n")?;
        left -= len;
    }
    out.write_all(b"0\r\n\r\n")
}

/// A listener that only counts the connections it receives (and closes them).
pub struct Listener {
    pub port: u16,
    pub connections: Arc<AtomicUsize>,
}

impl Listener {
    pub fn start() -> Listener {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Listener { port, connections }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}
