//! Where the leader learns the replicas' asks ([`AskedTags`]): from this replica's memory
//! when it runs alone, or, under leader election, from the ConfigMap every replica writes
//! its own key of, watched by name (a key that cannot be read is left out, said once while
//! it lasts). After a pass over the pods, the keys whose every ask was answered are removed
//! — only while the ConfigMap is as the leader last read it, so that an ask written
//! meanwhile is never lost.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::operator::leader::followed_tags::asked_tags::{AskedTags, MAX_SOURCES};
use crate::operator::replica::digests::tag_asks::{TagAsks, decode};
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;
use crate::operator::writes::requests::FIELD_MANAGER;

/// The source name of this replica's own asks when it runs alone.
const HERE: &str = "here";

/// Where the asks come from.
pub enum AsksFrom {
    /// This replica's memory: it runs alone.
    Here(Arc<TagAsks>),
    /// The ConfigMap every replica writes its key of.
    ConfigMap(NamespacedName),
}

/// Puts the asks in force in `asked` as they change, until the operator stops.
pub async fn run(client: Client, from: AsksFrom, asked: Arc<AskedTags>) {
    let name = match from {
        AsksFrom::Here(asks) => loop {
            asked.set(HERE, asks.asks(), Instant::now());
            asks.changed.notified().await;
        },
        AsksFrom::ConfigMap(name) => name,
    };
    let api: Api<ConfigMap> = Api::namespaced(client, &name.namespace);
    let mut events = watcher::watch_object(api.clone(), &name.name)
        .backoff(WatchBackoff::default())
        .boxed();
    let mut unreadable: BTreeSet<String> = BTreeSet::new();
    // The ConfigMap's `resourceVersion` as last read: the precondition of a prune.
    let mut version: Option<String> = None;
    loop {
        let event = tokio::select! {
            event = events.next() => match event {
                Some(event) => event,
                None => return,
            },
            () = asked.answered_changed.notified() => {
                prune(&api, &name, &asked.take_answered(), version.as_deref()).await;
                continue;
            }
        };
        match event {
            Ok(Some(cm)) => {
                let now = Instant::now();
                let mut sources = HashSet::new();
                let data = cm.data.clone().unwrap_or_default();
                let mut now_unreadable = BTreeSet::new();
                for (key, text) in data.iter().take(MAX_SOURCES) {
                    match decode(text) {
                        Ok(asks) => {
                            asked.set(key, asks, now);
                            sources.insert(key.clone());
                        }
                        Err(why) => {
                            if !unreadable.contains(key) {
                                tracing::warn!(configmap = %name, key = %excerpt(key), "a replica's asks cannot be read, left out: {why}");
                            }
                            now_unreadable.insert(key.clone());
                        }
                    }
                }
                unreadable = now_unreadable;
                asked.keep_only(&sources, now);
                version = cm.resource_version();
            }
            Ok(None) => {
                asked.keep_only(&HashSet::new(), Instant::now());
                version = None;
            }
            Err(e) => {
                tracing::debug!(configmap = %name, error = %excerpt(&e.to_string()), "watching the replicas' asks");
            }
        }
    }
}

/// Removes `keys` from the ConfigMap `name`, if it is still at `version`.
async fn prune(
    api: &Api<ConfigMap>,
    name: &NamespacedName,
    keys: &[String],
    version: Option<&str>,
) {
    let Some(resource_version) = version else {
        return;
    };
    if keys.is_empty() {
        return;
    }
    let data: Map<String, Value> = keys.iter().map(|k| (k.clone(), Value::Null)).collect();
    let patch = json!({"metadata": {"resourceVersion": resource_version}, "data": data});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(&name.name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::debug!(configmap = %name, keys = keys.len(), "removed the replicas' answered asks");
        }
        // Written meanwhile: removed after a later pass.
        Err(e) => {
            tracing::debug!(configmap = %name, error = %excerpt(&e.to_string()), "removing the replicas' answered asks");
        }
    }
}
