//! Every replica's copy of the digests the leader verified: the one ConfigMap it publishes
//! them in, watched by name. A document that cannot be read leaves what is held (said once
//! while it lasts); a ConfigMap gone leaves it too (the leader publishes it again).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::operator::replica::digests::verified_digests::{DATA_KEY, VerifiedDigests, decode};
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// Holds in `digests` what the ConfigMap `name` publishes, until the operator stops;
/// `loaded` is marked once it was first read (or found absent: nothing published yet).
pub async fn run(
    client: Client,
    name: NamespacedName,
    digests: Arc<VerifiedDigests>,
    loaded: Listed,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &name.namespace);
    let mut events = watcher::watch_object(api, &name.name)
        .backoff(WatchBackoff::default())
        .boxed();
    let mut failing = false;
    while let Some(event) = events.next().await {
        let read = match event {
            Ok(Some(cm)) => {
                let text = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get(DATA_KEY))
                    .map_or("[]", String::as_str);
                decode(text).map_err(|e| format!("{name}: {e}"))
            }
            Ok(None) => {
                loaded.mark();
                continue;
            }
            Err(e) => Err(format!("watching {name}: {}", excerpt(&e.to_string()))),
        };
        match read {
            Ok(read) => {
                failing = false;
                tracing::debug!(digests = read.len(), "verified digests");
                digests.replace(read);
                loaded.mark();
            }
            Err(why) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!("cannot read the verified digests, keeping those held: {why}");
                }
            }
        }
    }
}
