//! `imagemap run`: the operator.

use crate::operator::{self, Options};
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

/// Runs the operator with the in-cluster or `KUBECONFIG` credentials.
pub async fn run(args: &RunArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("no Kubernetes credentials (in-cluster or KUBECONFIG): {e}")
    })?;
    tokio::select! {
        res = operator::run(client, args.options()) => res,
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted; stopping");
            Ok(())
        }
    }
}
