//! A real OCI registry for tests: the CNCF distribution registry (`registry`, built by
//! `scripts/control-plane build`) on a loopback port with its own storage, and images
//! pushed to it with `crane`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A registry process, stopped when dropped.
pub struct TestRegistry {
    pub port: u16,
    dir: PathBuf,
    child: super::Killed,
    /// For a private registry: the Docker config `crane` pushes with.
    docker_config: Option<PathBuf>,
}

/// The one account of a private test registry.
pub const PRIVATE_USER: &str = "puller";
pub const PRIVATE_PASSWORD: &str = "pull-only-test-password";
/// `PRIVATE_USER:bcrypt(PRIVATE_PASSWORD)`, as the registry's htpasswd file holds it.
const PRIVATE_HTPASSWD: &str =
    "puller:$2a$06$j9q9akKSNQ/A853xxQ134e5eM04gK7jM1wH7LZ397SK.O8BFE8IeO";

impl TestRegistry {
    /// Starts a registry and waits until it answers.
    pub async fn start(name: &str) -> TestRegistry {
        Self::start_with(name, "").await
    }

    /// Starts a registry that posts its push notifications to `url` with `token` as
    /// bearer token.
    pub async fn start_notifying(name: &str, url: &str, token: &str) -> TestRegistry {
        let notifications = format!(
            "notifications: {{endpoints: [{{name: imagemap, url: '{url}', \
             headers: {{Authorization: ['Bearer {token}']}}, timeout: 2s, threshold: 3, backoff: 1s}}]}}\n"
        );
        Self::start_with(name, &notifications).await
    }

    /// Starts a registry that answers only [`PRIVATE_USER`] (HTTP basic auth, as htpasswd
    /// configures it).
    pub async fn start_private(name: &str) -> TestRegistry {
        let dir = fresh_dir(name);
        let htpasswd = dir.join("htpasswd");
        std::fs::write(&htpasswd, format!("{PRIVATE_HTPASSWD}\n")).unwrap();
        let auth = format!(
            "auth: {{htpasswd: {{realm: imagemap-test, path: {}}}}}\n",
            htpasswd.display()
        );
        let mut registry = Self::start_in(dir, &auth).await;
        registry.use_private_credentials();
        registry
    }

    /// Starts a registry that answers only requests with a token, sending clients to
    /// `tokens` for one (the distribution registry's `silly` access controller: any token
    /// passes, so what is tested is how clients get one).
    pub async fn start_with_token_service(name: &str, tokens: &TokenService) -> TestRegistry {
        let auth = format!(
            "auth: {{silly: {{realm: '{}', service: test-registry}}}}\n",
            tokens.realm()
        );
        let mut registry = Self::start_in(fresh_dir(name), &auth).await;
        registry.use_private_credentials();
        registry
    }

    /// Pushes with [`PRIVATE_USER`]'s credentials from now on.
    fn use_private_credentials(&mut self) {
        let config = self.dir.join("docker");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.json"),
            docker_config(&self.host(), PRIVATE_USER, PRIVATE_PASSWORD),
        )
        .unwrap();
        self.docker_config = Some(config);
    }

    async fn start_with(name: &str, extra: &str) -> TestRegistry {
        Self::start_in(fresh_dir(name), extra).await
    }

    async fn start_in(dir: PathBuf, extra: &str) -> TestRegistry {
        let port = super::free_port();
        let config = format!(
            "version: 0.1\nlog: {{level: warn}}\n\
             storage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\n\
             http: {{addr: 127.0.0.1:{port}}}\n{extra}",
            dir.join("data").display()
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let child = serve(&dir, port).await;
        TestRegistry {
            port,
            dir,
            child,
            docker_config: None,
        }
    }

    /// Starts the stopped registry again, on the same port with the same images.
    pub async fn restart(&mut self) {
        self.child = serve(&self.dir, self.port).await;
    }

    /// `host:port`, as `--insecure-registries` names it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes a one-layer image whose only file holds `content` as `repository:tag`;
    /// returns its manifest digest.
    pub fn push(&self, repository: &str, tag: &str, content: &str) -> String {
        let work = self.dir.join(format!("push-{tag}-{}", content.len()));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("build"), content).unwrap();
        let tar = work.join("layer.tar");
        let made = Command::new("tar")
            .args([
                "-cf",
                tar.to_str().unwrap(),
                "-C",
                work.to_str().unwrap(),
                "build",
            ])
            .status()
            .unwrap();
        assert!(made.success(), "tar");
        let reference = format!("{}/{repository}:{tag}", self.host());
        let pushed = self
            .crane()
            .args([
                "append",
                "--insecure",
                "-f",
                tar.to_str().unwrap(),
                "-t",
                &reference,
            ])
            .output()
            .expect("crane (built by scripts/control-plane build, on PATH in scripts/test)");
        assert!(
            pushed.status.success(),
            "crane append: {}",
            String::from_utf8_lossy(&pushed.stderr)
        );
        self.digest_of(&reference)
    }

    /// Pushes an image index (a multi-platform image) of `manifests` (digests in
    /// `repository`) as `repository:tag`; returns the index's own digest.
    pub fn push_index(&self, repository: &str, tag: &str, manifests: &[&str]) -> String {
        let reference = format!("{}/{repository}:{tag}", self.host());
        let mut args = vec!["index".to_string(), "append".into(), "--insecure".into()];
        for digest in manifests {
            args.extend([
                "-m".into(),
                format!("{}/{repository}@{digest}", self.host()),
            ]);
        }
        args.extend(["-t".into(), reference.clone()]);
        let pushed = self.crane().args(&args).output().unwrap();
        assert!(
            pushed.status.success(),
            "crane index append: {}",
            String::from_utf8_lossy(&pushed.stderr)
        );
        self.digest_of(&reference)
    }

    /// The digest `reference` points to, as `crane digest` says.
    fn digest_of(&self, reference: &str) -> String {
        let digest = self
            .crane()
            .args(["digest", "--insecure", reference])
            .output()
            .unwrap();
        assert!(digest.status.success(), "crane digest");
        String::from_utf8_lossy(&digest.stdout).trim().to_string()
    }

    /// `crane`, with the private registry's credentials if it has them.
    fn crane(&self) -> Command {
        let mut c = Command::new("crane");
        if let Some(config) = &self.docker_config {
            c.env("DOCKER_CONFIG", config);
        }
        c
    }

    /// Stops the registry (until [`Self::restart`]).
    pub fn stop(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }
}

/// A new, empty directory for a registry's files.
fn fresh_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("registry-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    dir
}

/// A Docker config (`config.json`, and a `.dockerconfigjson` Secret's content) with one
/// entry: `user` and `password` for `host`.
pub fn docker_config(host: &str, user: &str, password: &str) -> String {
    serde_json::json!({"auths": {host: {"username": user, "password": password}}}).to_string()
}

/// A `kubernetes.io/dockerconfigjson` Secret named `name` holding `password` for
/// [`PRIVATE_USER`] at `host`.
pub fn credentials_secret(
    name: &str,
    host: &str,
    password: &str,
) -> k8s_openapi::api::core::v1::Secret {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": docker_config(host, PRIVATE_USER, password)},
    }))
    .unwrap()
}

/// Runs `registry serve` on the configuration in `dir` and waits until it answers.
async fn serve(dir: &std::path::Path, port: u16) -> super::Killed {
    let child = super::Killed(
        Command::new("registry")
            .args(["serve", dir.join("config.yml").to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("registry (built by scripts/control-plane build, on PATH in scripts/test)"),
    );
    let deadline = Instant::now() + super::WAIT;
    // Polled, as a readiness probe would: the process gives no other sign. A private
    // registry answers 401.
    while !matches!(super::http_get(port, "/v2/").map(|r| r.0), Some(200 | 401)) {
        assert!(Instant::now() < deadline, "the registry never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// A registry token service, as the distribution token protocol has it: `GET /token?scope=…`
/// answered with `{"token": …}` to [`PRIVATE_USER`]'s basic credentials, 401 to anyone else.
/// It runs on a thread of its own: the tests' `crane` pushes block their runtime, and crane
/// asks it too.
pub struct TokenService {
    pub port: u16,
    /// Tokens issued, and their scopes.
    pub issued: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Token requests refused (wrong or no credentials).
    pub refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl TokenService {
    pub fn start() -> TokenService {
        use base64::Engine;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let expected = format!(
            "basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{PRIVATE_USER}:{PRIVATE_PASSWORD}"))
        );
        let issued = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (issued_by, refused_by) = (issued.clone(), refused.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (target, authorization) = read_request(&stream);
                let scope = target
                    .split_once("scope=")
                    .map(|(_, rest)| rest.split('&').next().unwrap_or_default().to_string())
                    .unwrap_or_default();
                let response = if authorization.eq_ignore_ascii_case(&expected) {
                    let mut issued = issued_by.lock().unwrap();
                    issued.push(scope);
                    let body = format!(r#"{{"token": "t-{}", "expires_in": 300}}"#, issued.len());
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    refused_by.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        .to_string()
                };
                let _ = std::io::Write::write_all(&mut &stream, response.as_bytes());
            }
        });
        TokenService {
            port,
            issued,
            refused,
        }
    }

    /// The realm registries send clients to. By name: crane refuses a realm that is a
    /// loopback or private IP literal (unless it is the registry's own host and port).
    pub fn realm(&self) -> String {
        format!("http://localhost:{}/token", self.port)
    }
}

/// The request target and `Authorization` header of an HTTP/1.1 request without a body.
fn read_request(stream: &std::net::TcpStream) -> (String, String) {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    let target = line.split(' ').nth(1).unwrap_or_default().to_string();
    let mut authorization = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("authorization")
        {
            authorization = value.trim().to_string();
        }
    }
    (target, authorization)
}
