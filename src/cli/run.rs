//! `imagemap run`: the operator.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::operator::{self, Options, Progress, health};
use crate::vm_images;

/// Arguments of `imagemap run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Runner image of VirtualMachines that name no `spec.runnerImage`.
    #[arg(long, default_value = vm_images::DEFAULT_RUNNER_IMAGE)]
    pub default_runner_image: String,
    /// A namespace to act in (repeatable). Default: all namespaces.
    #[arg(long = "namespace", value_name = "NS")]
    pub namespaces: Vec<String>,
    /// Registries (`host[:port]` or `*.domain`) that rules may rewrite to, comma-separated
    /// or repeated. A rule pointing elsewhere is refused and reported. Default: any.
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub allowed_registries: Vec<String>,
    /// Most pod recreations for liveReload per minute, over all VMs; 0 for no limit.
    #[arg(long, default_value_t = 60)]
    pub max_recreates_per_minute: u32,
    /// Address of the /livez and /readyz endpoints; `off` to serve none.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_addr: String,
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
    pub fn options(&self) -> Options {
        Options {
            default_runner_image: self.default_runner_image.clone(),
            namespaces: self.namespaces.clone(),
            allowed_registries: (!self.allowed_registries.is_empty())
                .then(|| self.allowed_registries.clone()),
            max_recreates_per_minute: self.max_recreates_per_minute,
        }
    }
}

/// Runs the operator with the in-cluster or `KUBECONFIG` credentials until SIGTERM or
/// Ctrl-C; then running reconciles finish before it exits.
pub async fn run(args: &RunArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no Kubernetes credentials (in-cluster or KUBECONFIG): {e}")
    })?;
    let progress = Arc::new(Progress::default());
    if args.health_addr != "off" {
        let addr: SocketAddr = args
            .health_addr
            .parse()
            .map_err(|e| anyhow::anyhow!("--health-addr {:?}: {e}", args.health_addr))?;
        let health = Arc::clone(&progress);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("--health-addr {addr}: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = health::serve(listener, health).await {
                tracing::error!(error = %e, "probe endpoint stopped");
            }
        });
    }
    operator::run_with(client, args.options(), progress, shutdown_signal()).await
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
