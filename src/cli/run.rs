//! `imagemap run`: the operator.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::api_requests::ApiRequests;
use crate::core::admission::scope::Excluded;
use crate::core::allowed_registries::AllowedRegistries;
use crate::core::local_registry::Vantage;
use crate::core::namespaced_name::NamespacedName;
use crate::core::vm_images;
use crate::core::webhook_certificate::plan::Lifetimes;
use crate::operator::{
    self, AsksPlace, ElectedClients, LeaderElection, LeaseTiming, Observers, Options,
    RegistryNotifications, TokenFile, Webhook, WebhookCertificate, health,
};

/// Arguments of `imagemap run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Runner image of VirtualMachines that name no `spec.runnerImage`.
    #[arg(long, default_value = vm_images::DEFAULT_RUNNER_IMAGE)]
    pub default_runner_image: String,
    /// A namespace to act in (repeatable). Default: all namespaces.
    #[arg(long = "namespace", value_name = "NS")]
    pub namespaces: Vec<String>,
    /// Registries (`host[:port]` or `*.domain`) that rules may rewrite to and the operator
    /// may contact (digest checks of followed tags, the token services registries name),
    /// comma-separated or repeated. A rule pointing elsewhere is refused and reported.
    /// Default: rules may rewrite anywhere, and no tag is followed.
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub allowed_registries: Vec<String>,
    /// Most pod recreations for liveReload per minute, over all VMs (one namespace takes at
    /// most half); 0 for no limit.
    #[arg(long, default_value_t = 60)]
    pub max_recreates_per_minute: u32,
    /// Most VirtualMachine reconciles at once, and so API requests in flight for them.
    #[arg(long, default_value_t = operator::DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// How often each tag that a `followTag` rule follows is checked at its registry (one
    /// manifest HEAD per tag, however many VMs use it), e.g. `30s`, `500ms`, `2m`.
    #[arg(long, default_value = "30s", value_parser = parse_interval)]
    pub tag_poll_interval: Duration,
    /// Registries (`host[:port]`) to reach over plain HTTP for digest checks,
    /// comma-separated or repeated (k3d's local registry is one). Others: HTTPS only.
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub insecure_registries: Vec<String>,
    /// Which name of the cluster's local registry (the ConfigMap
    /// kube-public/local-registry-hosting) digest checks use: `cluster-network`
    /// (`hostFromClusterNetwork`, as pods reach it) or `host` (as the machine outside the
    /// cluster does). Default: `cluster-network` in a pod, else `host`.
    #[arg(long, value_enum, value_name = "NAME")]
    pub local_registry_vantage: Option<Vantage>,
    /// A file holding the bearer token registries must send with push notifications;
    /// given, the operator accepts them on `--registry-notifications-addr` and checks a
    /// pushed tag at once. Read again when it changes (a mounted Secret rotated).
    #[arg(long, value_name = "FILE")]
    pub registry_notifications_token_file: Option<std::path::PathBuf>,
    /// Address of the registry notification endpoint (with
    /// `--registry-notifications-token-file`).
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub registry_notifications_addr: String,
    /// A `kubernetes.io/dockerconfigjson` Secret in the operator's namespace
    /// (`POD_NAMESPACE`, else the namespace of its credentials) whose entries digest checks
    /// use (`kubectl create secret docker-registry`). It is watched: a change takes effect
    /// at once. Registries it has no entry for, or all when it does not exist, are asked
    /// anonymously.
    #[arg(long, value_name = "NAME")]
    pub registry_credentials_secret: Option<String>,
    /// Namespaces whose ImageMappings' followed tags are checked with the credentials of
    /// `--registry-credentials-secret` too, comma-separated or repeated. By default only
    /// ClusterImageMapping rules (written by cluster administrators) use them; other tags
    /// are checked anonymously.
    #[arg(long, value_delimiter = ',', value_name = "NS")]
    pub registry_credentials_namespaces: Vec<String>,
    /// Address of the admission webhook (HTTPS), which maps the images of every Pod created;
    /// `off` to serve none. It needs a certificate: `--webhook-secret`, `--webhook-url` or
    /// `--webhook-cert-dir`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub webhook_addr: String,
    /// The webhook's URL as the API server reaches it (`https://HOST:PORT`), for an operator
    /// outside the cluster: it makes its own CA and certificate for HOST, registers its own
    /// MutatingWebhookConfiguration (`--webhook-configuration`), and deletes it on exit.
    #[arg(long, value_name = "URL", conflicts_with_all = ["webhook_cert_dir", "webhook_secret"])]
    pub webhook_url: Option<String>,
    /// A Secret in the operator's namespace in which the leader keeps the webhook's CA and
    /// serving certificate (made, renewed and rotated here) for every replica to serve, and
    /// whose CA it sets as the `caBundle` of the `--webhook-configuration`. The install ships
    /// both, the Secret empty.
    #[arg(long, value_name = "NAME", conflicts_with = "webhook_cert_dir")]
    pub webhook_secret: Option<String>,
    /// Seconds between two passes over one namespace's pods, at least, when rule changes
    /// reach it.
    #[arg(long, hide = true, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub pod_scan_namespace_seconds: u64,
    /// Seconds between two passes of the leader over every namespace's pods: a paged LIST
    /// that counts the mappings' `affectedPods` and `unmappedPods` and finds the followed
    /// tags pods use (a change of rules counts the namespaces it reaches again within a
    /// minute).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub pod_count_seconds: u64,
    /// Seconds the CA `--webhook-secret` makes is valid (rotated after two thirds).
    #[arg(long, hide = true, default_value_t = 3 * 365 * 24 * 3600, value_parser = clap::value_parser!(u64).range(60..))]
    pub webhook_ca_validity_seconds: u64,
    /// Seconds a serving certificate `--webhook-secret` makes is valid (renewed after two
    /// thirds).
    #[arg(long, hide = true, default_value_t = 90 * 24 * 3600, value_parser = clap::value_parser!(u64).range(30..))]
    pub webhook_cert_validity_seconds: u64,
    /// A directory with the webhook's certificate as cert-manager writes it (`tls.crt`,
    /// `tls.key`), read again when it changes; cert-manager's cainjector then keeps the
    /// configuration's `caBundle`.
    #[arg(long, value_name = "DIR")]
    pub webhook_cert_dir: Option<std::path::PathBuf>,
    /// The name of the MutatingWebhookConfiguration `--webhook-url` registers, or whose
    /// `caBundle` the leader keeps with `--webhook-secret`.
    #[arg(long, default_value = "imagemap", value_name = "NAME")]
    pub webhook_configuration: String,
    /// Seconds a stopping replica keeps answering admissions at most, once unready: until
    /// no request came for 2 s. Keep it below the pod's termination grace period.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=300))]
    pub webhook_drain_seconds: u64,
    /// Namespaces whose pods are never mapped, besides kube-system, kube-public,
    /// kube-node-lease and the operator's own; comma-separated or repeated.
    #[arg(long, value_delimiter = ',', value_name = "NS")]
    pub webhook_exclude_namespaces: Vec<String>,
    /// The runner image NeonVM's controller gives a `vm.neon.tech` VM that names none (its
    /// `VM_RUNNER_IMAGE`). Without it, such a VM's runner is mapped at admission all the
    /// same, but not compared with its rules: a rule change for it is not live-reloaded.
    #[arg(long, value_name = "IMAGE")]
    pub neonvm_default_runner_image: Option<String>,
    /// Address of the /livez, /readyz and /metrics endpoints; `off` to serve none.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_addr: String,
    /// Run only while holding a Lease, so that several replicas have one active operator.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Lease. Default: `POD_NAMESPACE`, else `default`.
    #[arg(long)]
    pub lease_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "imagemap-operator")]
    pub lease_name: String,
    /// Seconds followers wait after the Lease last changed before taking it over. The leader
    /// renews it every 2/15 of this, and stops writing when it could not renew it for 2/3 of
    /// this — before any follower can take over.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=3600))]
    pub lease_duration_seconds: u64,
    /// Fault injection for crash tests: abort the process right after the response to its
    /// Nth write request.
    #[arg(long, hide = true, value_name = "N")]
    pub abort_after_writes: Option<u64>,
    /// Log format: `plain` text or one `json` object per line. Levels follow `RUST_LOG`
    /// (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
}

/// Format of the operator's logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Sets up logging on stderr.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Plain => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().init(),
    }
}

impl RunArgs {
    /// The operator's settings; `own_namespace` is the namespace it runs in.
    pub fn options(&self, own_namespace: &str) -> anyhow::Result<Options> {
        let registry_notifications = match &self.registry_notifications_token_file {
            None => None,
            Some(path) => {
                let token = TokenFile::open(path)
                    .map_err(|e| anyhow::anyhow!("--registry-notifications-token-file {e}"))?;
                Some(RegistryNotifications {
                    addr: self.registry_notifications_addr.clone(),
                    token: Arc::new(token),
                })
            }
        };
        Ok(Options {
            default_runner_image: self.default_runner_image.clone(),
            namespaces: self.namespaces.clone(),
            allowed_registries: if self.allowed_registries.is_empty() {
                AllowedRegistries::any()
            } else {
                AllowedRegistries::only(self.allowed_registries.clone())
            },
            max_recreates_per_minute: self.max_recreates_per_minute,
            concurrency: self.concurrency,
            tag_poll_interval: self.tag_poll_interval,
            insecure_registries: self.insecure_registries.clone(),
            local_registry_vantage: self
                .local_registry_vantage
                .unwrap_or_else(vantage_of_this_process),
            registry_notifications,
            registry_credentials_namespaces: self.registry_credentials_namespaces.clone(),
            registry_credentials: self.registry_credentials_secret.as_ref().map(|name| {
                NamespacedName {
                    namespace: own_namespace.to_string(),
                    name: name.clone(),
                }
            }),
            webhook: self.webhook(own_namespace)?,
            neonvm_default_runner_image: self.neonvm_default_runner_image.clone(),
            pod_scan_namespace_interval: Duration::from_secs(self.pod_scan_namespace_seconds),
            pod_count_interval: Duration::from_secs(self.pod_count_seconds),
            asks: None,
            // Under leader election, the leader tells the others what it verified.
            published_digests: self.leader_elect.then(|| NamespacedName {
                namespace: self.lease_namespace(),
                name: PUBLISHED_DIGESTS.into(),
            }),
        })
    }
}

/// The ConfigMap, beside the Lease, in which the leader publishes the digests it verified.
pub const PUBLISHED_DIGESTS: &str = "imagemap-digests";

/// The ConfigMap, beside the Lease, in which each replica tells the leader the followed
/// tags it admitted without a digest, under its own key.
pub const ASKED_TAGS: &str = "imagemap-asked-tags";

impl RunArgs {
    /// The Lease's namespace: `--lease-namespace`, else `POD_NAMESPACE`, else `default`.
    fn lease_namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into())
    }

    /// The webhook's settings; `None` when it is `off`, or has no certificate to serve.
    fn webhook(&self, own_namespace: &str) -> anyhow::Result<Option<Webhook>> {
        if self.webhook_addr == "off" {
            return Ok(None);
        }
        let certificate = match (
            &self.webhook_url,
            &self.webhook_cert_dir,
            &self.webhook_secret,
        ) {
            (None, None, Some(secret)) => WebhookCertificate::Secret {
                secret: NamespacedName {
                    namespace: own_namespace.to_string(),
                    name: secret.clone(),
                },
                configuration: self.webhook_configuration.clone(),
                lifetimes: Lifetimes {
                    authority: Duration::from_secs(self.webhook_ca_validity_seconds),
                    serving: Duration::from_secs(self.webhook_cert_validity_seconds),
                },
            },
            (Some(url), _, _) => {
                let parsed: http::Uri = url
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--webhook-url {url:?}: {e}"))?;
                if parsed.scheme_str() != Some("https") || parsed.host().is_none() {
                    anyhow::bail!("--webhook-url {url:?}: give https://HOST:PORT");
                }
                WebhookCertificate::Local {
                    url: url.clone(),
                    configuration: self.webhook_configuration.clone(),
                }
            }
            (None, Some(dir), _) => WebhookCertificate::Dir(dir.clone()),
            (None, None, None) => return Ok(None),
        };
        Ok(Some(Webhook {
            addr: self.webhook_addr.clone(),
            drain: Duration::from_secs(self.webhook_drain_seconds),
            certificate,
            // The namespace the operator runs in: in a cluster, `POD_NAMESPACE` (outside, the
            // kubeconfig's namespace is the user's, and is mapped).
            excluded: Excluded::new(
                std::env::var("POD_NAMESPACE").ok().as_deref(),
                &self.webhook_exclude_namespaces,
            ),
        }))
    }
}

/// Runs the operator with the in-cluster or `KUBECONFIG` credentials until SIGTERM or
/// Ctrl-C; then running reconciles finish before it exits.
pub async fn run(args: &RunArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer().await.map_err(|e| {
        anyhow::anyhow!("no Kubernetes credentials (in-cluster or KUBECONFIG): {e}")
    })?;
    let own_namespace = operator_namespace(&config.default_namespace);
    let mut options = args.options(&own_namespace)?;
    if options.webhook.is_none() && args.webhook_addr != "off" {
        tracing::info!(
            "the admission webhook is not served: it needs --webhook-secret, --webhook-url or --webhook-cert-dir"
        );
    }
    if !args.leader_elect {
        let (clients, requests) = operator::OperatorClients::new(config)?;
        let observers = observe(args, &options, requests).await?;
        return operator::run_with(clients, options, observers, shutdown_signal()).await;
    }
    // Under leader election, the operator's writes pass only while its hold on the Lease
    // lasts.
    let clients = ElectedClients::new(config)?;
    let observers = observe(args, &options, clients.requests.clone()).await?;
    let identity = operator::unique_identity(&identity_base());
    // Beside the Lease, under this replica's identity.
    options.asks = Some(AsksPlace {
        configmap: NamespacedName {
            namespace: args.lease_namespace(),
            name: ASKED_TAGS.into(),
        },
        key: identity.clone(),
    });
    let election = LeaderElection {
        lease_name: args.lease_name.clone(),
        // Not the credentials' namespace: through a rolling upgrade, replicas of an older
        // version (POD_NAMESPACE, else `default`) must agree on the Lease.
        namespace: args.lease_namespace(),
        identity,
        timing: LeaseTiming::for_duration(Duration::from_secs(args.lease_duration_seconds)),
    };
    Box::pin(operator::run_elected(
        clients,
        options,
        observers,
        election,
        shutdown_signal(),
    ))
    .await
}

/// What names this replica in its Lease identity: `POD_NAME` (the Deployment sets it), else
/// the host name (a pod's name in a cluster).
fn identity_base() -> String {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "imagemap".into())
}

/// The namespace the operator runs in: `POD_NAMESPACE` (the Deployment sets it), else
/// `credentials_namespace` (in a pod, its ServiceAccount's; else the kubeconfig's).
fn operator_namespace(credentials_namespace: &str) -> String {
    std::env::var("POD_NAMESPACE").unwrap_or_else(|_| credentials_namespace.to_string())
}

/// The observers of a run over `requests`, served on `--health-addr` (and the registry
/// notification endpoint, when there is one: every replica serves it).
async fn observe(
    args: &RunArgs,
    options: &Options,
    requests: ApiRequests,
) -> anyhow::Result<Observers> {
    if let Some(n) = args.abort_after_writes {
        requests.abort_after_writes(n);
    }
    let observers = Observers::new(requests);
    if args.health_addr != "off" {
        let addr: SocketAddr = args
            .health_addr
            .parse()
            .map_err(|e| anyhow::anyhow!("--health-addr {:?}: {e}", args.health_addr))?;
        let (health, metrics) = (
            Arc::clone(&observers.health),
            Arc::clone(&observers.metrics),
        );
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("--health-addr {addr}: {e}"))?;
        tokio::spawn(health::serve(listener, health, metrics));
    }
    if let Some(endpoint) = &options.registry_notifications {
        operator::serve_notifications(endpoint, &observers).await?;
    }
    Ok(observers)
}

/// A poll interval: a number with `ms`, `s` or `m` (bare: seconds), from 100 ms to a day.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number with ms, s or m, like 30s"))?;
    let interval = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("{text:?}: the unit must be ms, s or m")),
    };
    if interval < Duration::from_millis(100) {
        return Err(format!("{text:?}: at least 100ms"));
    }
    if interval > Duration::from_hours(24) {
        return Err(format!("{text:?}: at most a day (1440m)"));
    }
    Ok(interval)
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    tracing::info!("stopping: letting running reconciles finish");
}

/// Where this process reaches the cluster's local registry from: from a pod when the kubelet
/// gave it the API server's service address, else from the host.
fn vantage_of_this_process() -> Vantage {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        Vantage::ClusterNetwork
    } else {
        Vantage::Host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_written() {
        assert_eq!(parse_interval("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_interval("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("2m"), Ok(Duration::from_mins(2)));
        assert!(parse_interval("10ms").unwrap_err().contains("at least"));
        assert!(parse_interval("1h").unwrap_err().contains("unit"));
        assert!(parse_interval("1441m").unwrap_err().contains("at most"));
        assert!(
            parse_interval("99999999999999999m")
                .unwrap_err()
                .contains("at most")
        );
        assert!(parse_interval("s").unwrap_err().contains("number"));
    }
}
