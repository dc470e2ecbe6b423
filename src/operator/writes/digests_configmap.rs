//! The leader's write of the ConfigMap it publishes its verified digests in (every replica
//! reads it for admission: `replica::digests`), by server-side apply under the operator's
//! field manager.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::core::namespaced_name::NamespacedName;
use crate::operator::replica::digests::verified_digests::DATA_KEY;
use crate::operator::writes::requests::FIELD_MANAGER;

/// Applies `text`, the encoded digests, as the ConfigMap `name`'s data.
pub async fn publish_digests(
    client: &Client,
    name: &NamespacedName,
    text: &str,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &name.namespace);
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name.name, "labels": {"app.kubernetes.io/name": "imagemap"}},
        "data": {DATA_KEY: text},
    });
    api.patch(
        &name.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(())
}
