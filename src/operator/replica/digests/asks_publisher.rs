//! Under leader election, a replica tells the leader the followed tags it admitted without a
//! digest ([`TagAsks`]) by writing them under its own key of one ConfigMap beside the Lease,
//! which the leader watches: a JSON merge patch of that key alone (the other replicas'
//! keys are theirs), creating the ConfigMap when it is absent. One write per change of the
//! asks, gathered over [`COALESCE`]: a tag costs a write once, not once per pod.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::core::excerpt::excerpt;
use crate::operator::options::AsksPlace;
use crate::operator::replica::digests::tag_asks::{TagAsks, encode};

/// The field manager of a replica's writes of its asks.
const FIELD_MANAGER: &str = "imagemap.dev/replica";
/// How long asks are gathered into one write.
const COALESCE: Duration = Duration::from_millis(100);
/// Pause before writing again after a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Writes this replica's asks at each change, until the operator stops.
pub async fn run(client: Client, place: AsksPlace, asks: Arc<TagAsks>) {
    let api: Api<ConfigMap> = Api::namespaced(client, &place.configmap.namespace);
    loop {
        asks.changed.notified().await;
        tokio::time::sleep(COALESCE).await;
        loop {
            let text = encode(&asks.asks());
            match write(&api, &place, &text).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(configmap = %place.configmap, error = %excerpt(&e.to_string()), "telling the leader the followed tags admitted without a digest");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }
}

/// Sets this replica's key of the ConfigMap to `text`, creating the ConfigMap if absent.
async fn write(api: &Api<ConfigMap>, place: &AsksPlace, text: &str) -> Result<(), kube::Error> {
    let patch = json!({"data": {place.key.as_str(): text}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api
        .patch(&place.configmap.name, &params, &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let object: ConfigMap = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": place.configmap.name,
                    "labels": {"app.kubernetes.io/name": "imagemap"},
                },
                "data": {place.key.as_str(): text},
            }))
            .map_err(kube::Error::SerdeError)?;
            let created = api
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..PostParams::default()
                    },
                    &object,
                )
                .await;
            match created {
                // Another replica created it meanwhile: patch it.
                Err(kube::Error::Api(e)) if e.code == 409 => api
                    .patch(&place.configmap.name, &params, &Patch::Merge(&patch))
                    .await
                    .map(drop),
                other => other.map(drop),
            }
        }
        other => other.map(drop),
    }
}
