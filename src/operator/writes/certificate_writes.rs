//! The leader's writes of the webhook's certificates: the Secret's data and every webhook's
//! `caBundle`, each conditional on the version it was decided from, each under a field
//! manager of its own (the keeper, `leader::webhook_tls`, decides them).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::core::namespaced_name::NamespacedName;

/// The field manager of the Secret's data.
const SECRET_MANAGER: &str = "imagemap.dev/webhook-certificate";
/// The field manager of the configuration's `caBundle`.
const CA_BUNDLE_MANAGER: &str = "imagemap.dev/webhook-ca-bundle";

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Writes `data` into the Secret `name`, if it is still at `secret`'s version.
pub async fn write_secret(
    client: &Client,
    name: &NamespacedName,
    secret: &Secret,
    data: &BTreeMap<&'static str, String>,
) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &name.namespace);
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_string(), base64(v).into()))
        .collect();
    let patch = json!({
        "metadata": {"resourceVersion": secret.resource_version()},
        "data": data,
    });
    let params = PatchParams {
        field_manager: Some(SECRET_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(&name.name, &params, &Patch::Merge(patch))
        .await
        .map(|_| ())
}

/// Sets every webhook's `caBundle` of the configuration `name` to `bundle`, if it is still
/// at `configuration`'s version.
pub async fn publish_ca_bundle(
    client: &Client,
    name: &str,
    configuration: &MutatingWebhookConfiguration,
    bundle: &str,
) -> Result<(), kube::Error> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let webhooks: Vec<_> = configuration
        .webhooks
        .iter()
        .flatten()
        .map(|w| json!({"name": w.name, "clientConfig": {"caBundle": base64(bundle)}}))
        .collect();
    let patch = json!({
        "metadata": {"resourceVersion": configuration.resource_version()},
        "webhooks": webhooks,
    });
    let params = PatchParams {
        field_manager: Some(CA_BUNDLE_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Strategic(patch))
        .await
        .map(|_| ())
}
