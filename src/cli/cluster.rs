//! Reading what `imagemap resolve --cluster` previews against from the live cluster:
//! ImageMappings, ClusterImageMappings, VirtualMachines (with their status), Namespaces and
//! the cluster's local registry — through a kubeconfig, as kubectl reads it. Read-only: the
//! `imagemap-view` role suffices.

use std::io::Write;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, ResourceExt};

use super::preview_scope::PreviewScope;
use crate::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::core::excerpt::excerpt;
use crate::core::local_registry::{self, LocalRegistry};
use crate::core::manifests::Manifests;

/// Where the cluster is: kubectl's `--kubeconfig` and `--context`.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// A kubeconfig file; default: `KUBECONFIG`, else `~/.kube/config` (or in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// A context of it; default: its current context.
    pub context: Option<String>,
}

/// A client for `target`, and the namespace its context names (`default` without one).
pub async fn connect(target: &Target) -> Result<(Client, String), String> {
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..KubeConfigOptions::default()
    };
    let no_credentials = |e: &dyn std::fmt::Display| {
        format!("no Kubernetes credentials (kubeconfig or in-cluster): {e}")
    };
    let config = match &target.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| no_credentials(&e))?
        }
        None if target.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| no_credentials(&e))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| no_credentials(&e))?,
    };
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).map_err(|e| format!("cannot reach the cluster: {e}"))?;
    Ok((client, namespace))
}

/// The objects the preview resolves, as the cluster holds them now — the VMs and
/// ImageMappings of the namespaces in `scope` (one list of each per namespace), of all with
/// [`PreviewScope::All`] — and notes on what could not be read.
pub async fn read(
    client: &Client,
    scope: &PreviewScope,
) -> Result<(Manifests, Vec<String>), String> {
    let mut notes = Vec::new();
    let all = ListParams::default();
    let listed =
        |what: &str, e: kube::Error| format!("cannot list {what}: {}", excerpt(&e.to_string()));
    let apis: Vec<(Api<ImageMapping>, Api<VirtualMachine>)> = match scope.namespaces() {
        None => vec![(Api::all(client.clone()), Api::all(client.clone()))],
        Some(namespaces) => namespaces
            .iter()
            .map(|ns| {
                (
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced(client.clone(), ns),
                )
            })
            .collect(),
    };
    let (mut image_mappings, mut virtual_machines) = (Vec::new(), Vec::new());
    for (mappings, vms) in apis {
        image_mappings.extend(
            mappings
                .list(&all)
                .await
                .map_err(|e| listed("ImageMappings", e))?
                .items,
        );
        virtual_machines.extend(
            vms.list(&all)
                .await
                .map_err(|e| listed("VirtualMachines", e))?
                .items,
        );
    }
    let cluster_image_mappings = Api::<ClusterImageMapping>::all(client.clone())
        .list(&all)
        .await
        .map_err(|e| listed("ClusterImageMappings", e))?
        .items;
    // Namespace labels, for ClusterImageMappings' namespaceSelectors; without the right to
    // list them, every namespace has only its name label.
    let namespaces = match Api::<Namespace>::all(client.clone()).list(&all).await {
        Ok(list) => list
            .items
            .into_iter()
            .map(|ns| {
                let name = ns.name_any();
                (name, ns.metadata.labels.unwrap_or_default())
            })
            .collect(),
        Err(e) => {
            notes.push(format!(
                "cannot list namespaces ({}): namespaceSelectors see only kubernetes.io/metadata.name",
                excerpt(&e.to_string())
            ));
            std::collections::BTreeMap::default()
        }
    };
    let local = Api::<ConfigMap>::namespaced(client.clone(), local_registry::NAMESPACE)
        .get_opt(local_registry::NAME)
        .await;
    let configmap = format!("{}/{}", local_registry::NAMESPACE, local_registry::NAME);
    let local_registry = match local {
        Ok(None) => Some(None),
        Ok(Some(cm)) => match LocalRegistry::from_data(&cm.data.unwrap_or_default()) {
            Ok(registry) => Some(registry),
            Err(why) => {
                notes.push(format!("{configmap} cannot be used: {why}"));
                Some(None)
            }
        },
        Err(e) => {
            notes.push(format!(
                "cannot read {configmap} ({}): the preview takes the cluster to advertise no local registry",
                excerpt(&e.to_string())
            ));
            None
        }
    };
    Ok((
        Manifests {
            image_mappings,
            cluster_image_mappings,
            virtual_machines,
            // Not read from the cluster yet: the preview covers VirtualMachines.
            pod_templates: Vec::new(),
            neonvm_vms: Vec::new(),
            namespaces,
            local_registry,
            skipped: Vec::new(),
        },
        notes,
    ))
}

/// A runtime for the commands that read the cluster; `None` (said on `err`) when there is
/// none.
pub fn runtime(err: &mut dyn Write) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            let _ = writeln!(err, "error: no async runtime: {e}");
            None
        }
    }
}
