//! The cluster's local registry as it advertises it: a watch of the one ConfigMap
//! `kube-public/local-registry-hosting`, read by name (absent is normal), its observations
//! turned into rule changes — the rules watcher puts each in force and recompiles.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use crate::core::excerpt::excerpt;
use crate::core::local_registry::{self, LocalRegistry};
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// One observation of the ConfigMap.
#[derive(Debug, Clone, PartialEq)]
pub enum LocalRegistrySeen {
    /// It advertises this registry, or none (absent, or advertising no host).
    Advertised(Option<Arc<LocalRegistry>>),
    /// It says something unusable: no registry is taken from it.
    Unusable {
        why: String,
        object: ObjectReference,
    },
    /// It cannot be read now (the watch failed): what is in force stays.
    Unread(String),
}

/// The ConfigMap's observations.
pub fn observations(client: &Client) -> BoxStream<'static, LocalRegistrySeen> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), local_registry::NAMESPACE);
    watcher::watch_object(api, local_registry::NAME)
        .backoff(WatchBackoff::default())
        .map(|event| match event {
            Ok(seen) => observe(seen.as_ref()),
            Err(e) => LocalRegistrySeen::Unread(excerpt(&e.to_string())),
        })
        .boxed()
}

/// What the ConfigMap as seen (`None`: it does not exist) advertises.
fn observe(seen: Option<&ConfigMap>) -> LocalRegistrySeen {
    let data = seen.and_then(|c| c.data.as_ref());
    match data.map(LocalRegistry::from_data) {
        None | Some(Ok(None)) => LocalRegistrySeen::Advertised(None),
        Some(Ok(Some(registry))) => LocalRegistrySeen::Advertised(Some(Arc::new(registry))),
        Some(Err(why)) => LocalRegistrySeen::Unusable {
            why,
            object: seen.map(|c| c.object_ref(&())).unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use super::*;

    fn config_map(document: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([(
                local_registry::KEY_V1.to_string(),
                document.to_string(),
            )])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn absent_empty_advertised_and_unusable() {
        assert_eq!(observe(None), LocalRegistrySeen::Advertised(None));
        assert_eq!(
            observe(Some(&ConfigMap::default())),
            LocalRegistrySeen::Advertised(None)
        );
        let LocalRegistrySeen::Advertised(Some(r)) =
            observe(Some(&config_map("host: localhost:5000")))
        else {
            panic!("not advertised");
        };
        assert_eq!(r.name(), "localhost:5000");
        assert!(matches!(
            observe(Some(&config_map("host: 'no host'"))),
            LocalRegistrySeen::Unusable { .. }
        ));
    }
}
