//! The operator's watches as changes to its caches: one watch per namespace it acts in
//! (or one of all namespaces), merged into one cache, each (re-)list turned into the
//! applies and deletes that bring the cache to the list — so a list of one namespace
//! never touches another's objects, and every object gone while a watch was down is
//! delivered as deleted to whoever follows the cache.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::caches::Listed;
use super::health::Health;
use super::projection::Projection;

/// What one list covers: a namespace (for a cluster-scoped kind, the object of that
/// name), or everything (`None`).
pub type ListScope = Option<String>;

/// One change to a cache, delivered after the cache took it.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheEvent<K> {
    /// A list of the scope started.
    ListStarted(ListScope),
    /// An object was added or changed.
    Applied(K),
    /// An object was deleted, or a list of its scope did not hold it.
    Deleted(K),
    /// A list of the scope is complete: the cache holds it.
    Listed(ListScope),
}

/// Whether `obj` is within `scope`.
fn within<K: Resource>(scope: &ListScope, obj: &K) -> bool {
    let Some(scope) = scope else { return true };
    match obj.meta().namespace.as_deref() {
        Some(ns) => ns == scope,
        None => obj.meta().name.as_deref() == Some(scope),
    }
}

/// The watch events of one scope, as changes to a cache shared with other scopes.
pub struct Relist<K: Resource> {
    scope: ListScope,
    /// What the list in progress has held so far.
    listing: Option<HashSet<ObjectRef<K>>>,
}

impl<K> Relist<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    #[must_use]
    pub fn new(scope: ListScope) -> Relist<K> {
        Relist {
            scope,
            listing: None,
        }
    }

    /// The changes `event` makes; `cached` gives the cache's objects (read only when a list
    /// completes).
    pub fn changes(
        &mut self,
        event: watcher::Event<K>,
        cached: impl FnOnce() -> Vec<Arc<K>>,
    ) -> Vec<CacheEvent<K>> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                vec![CacheEvent::ListStarted(self.scope.clone())]
            }
            watcher::Event::InitApply(obj) => {
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(ObjectRef::from_obj(&obj));
                }
                vec![CacheEvent::Applied(obj)]
            }
            watcher::Event::Apply(obj) => vec![CacheEvent::Applied(obj)],
            watcher::Event::Delete(obj) => vec![CacheEvent::Deleted(obj)],
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let mut out: Vec<CacheEvent<K>> = cached()
                    .into_iter()
                    .filter(|o| within(&self.scope, o.as_ref()))
                    .filter(|o| !listed.contains(&ObjectRef::from_obj(o.as_ref())))
                    .map(|o| CacheEvent::Deleted(o.as_ref().clone()))
                    .collect();
                out.push(CacheEvent::Listed(self.scope.clone()));
                out
            }
        }
    }
}

/// Applies cache events to the store and marks `listed` once every scope has listed.
struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: Writer<K>,
    unlisted: HashSet<ListScope>,
    listed: Listed,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn take(&mut self, event: &CacheEvent<K>) {
        match event {
            CacheEvent::Applied(obj) => self
                .writer
                .apply_watcher_event(&watcher::Event::Apply(obj.clone())),
            CacheEvent::Deleted(obj) => self
                .writer
                .apply_watcher_event(&watcher::Event::Delete(obj.clone())),
            CacheEvent::ListStarted(_) => {}
            CacheEvent::Listed(scope) => {
                if self.unlisted.remove(scope) && self.unlisted.is_empty() {
                    self.listed.mark();
                }
            }
        }
    }
}

/// One watch feeding a cache: what its lists cover, and what it watches.
pub struct Source<K: Clone> {
    scope: ListScope,
    api: Api<K>,
    config: watcher::Config,
}

impl<K> Source<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone,
{
    /// Watches of `K` in each of `namespaces`; all namespaces if there are none.
    pub fn namespaced(
        client: &Client,
        namespaces: &[String],
        config: &watcher::Config,
    ) -> Vec<Source<K>> {
        if namespaces.is_empty() {
            return vec![Source::all(client, config)];
        }
        namespaces
            .iter()
            .map(|ns| Source {
                scope: Some(ns.clone()),
                api: Api::namespaced(client.clone(), ns),
                config: config.clone(),
            })
            .collect()
    }
}

impl<K> Source<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    /// A watch of every `K`.
    pub fn all(client: &Client, config: &watcher::Config) -> Source<K> {
        Source {
            scope: None,
            api: Api::all(client.clone()),
            config: config.clone(),
        }
    }

    /// Watches of the cluster-scoped `K` of each of `names`; all if there are none.
    pub fn named(client: &Client, names: &[String], config: &watcher::Config) -> Vec<Source<K>> {
        if names.is_empty() {
            return vec![Source::all(client, config)];
        }
        names
            .iter()
            .map(|name| Source {
                scope: Some(name.clone()),
                api: Api::all(client.clone()),
                config: config.clone().fields(&format!("metadata.name={name}")),
            })
            .collect()
    }
}

/// Watches `sources` into one cache: the store, and the stream of its changes (which must
/// be polled for the store to fill). Each object keeps what its [`Projection`] leaves;
/// each watch result is reported to the liveness probe; `listed` is marked once every
/// source has listed.
pub fn watch<K>(
    sources: Vec<Source<K>>,
    listed: &Listed,
    health: &Arc<Health>,
) -> (
    Store<K>,
    impl Stream<Item = CacheEvent<K>> + Send + 'static + use<K>,
)
where
    K: Resource<DynamicType = ()>
        + Projection
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut writer = Writer::<K>::default();
    // The store is ready from the start: lists fill it through applies and deletes, and
    // `listed` says when they are complete.
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let store = writer.as_reader();
    let unlisted = sources.iter().map(|s| s.scope.clone()).collect();
    let streams = sources.into_iter().map(|source| {
        let health = Arc::clone(health);
        let store = store.clone();
        let mut relist = Relist::new(source.scope);
        watcher(source.api, source.config)
            .default_backoff()
            .inspect(move |r| health.watch_result(r.is_ok()))
            // Errors are retried by the backoff and reported to the liveness probe.
            .filter_map(|r| futures::future::ready(r.ok()))
            .map(|event| event.modify(K::project))
            .flat_map(move |event| stream::iter(relist.changes(event, || store.state())))
            .boxed()
    });
    let mut cache = Cache {
        writer,
        unlisted,
        listed: listed.clone(),
    };
    let events = stream::select_all(streams).inspect(move |event| cache.take(event));
    (store, events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::ResourceExt;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c
    }

    fn names(events: &[CacheEvent<ConfigMap>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                CacheEvent::ListStarted(s) => format!("started {s:?}"),
                CacheEvent::Applied(o) => format!("applied {}", o.name_any()),
                CacheEvent::Deleted(o) => format!("deleted {}", o.name_any()),
                CacheEvent::Listed(s) => format!("listed {s:?}"),
            })
            .collect()
    }

    #[test]
    fn a_relist_deletes_what_it_no_longer_holds_in_its_own_namespace_only() {
        let mut relist = Relist::<ConfigMap>::new(Some("a".into()));
        let none = Vec::new;
        let mut out = relist.changes(watcher::Event::Init, none);
        out.extend(relist.changes(watcher::Event::InitApply(cm("a", "kept")), none));
        let cached = || {
            ["kept", "gone"]
                .map(|n| Arc::new(cm("a", n)))
                .into_iter()
                .chain([Arc::new(cm("b", "other"))])
                .collect()
        };
        out.extend(relist.changes(watcher::Event::InitDone, cached));
        out.extend(relist.changes(watcher::Event::Apply(cm("a", "new")), none));
        out.extend(relist.changes(watcher::Event::Delete(cm("a", "new")), none));
        assert_eq!(
            names(&out),
            [
                "started Some(\"a\")",
                "applied kept",
                "deleted gone",
                "listed Some(\"a\")",
                "applied new",
                "deleted new",
            ]
        );
    }

    #[test]
    fn a_list_of_everything_deletes_anything_it_does_not_hold() {
        let mut relist = Relist::<ConfigMap>::new(None);
        relist.changes(watcher::Event::Init, Vec::new);
        let cached = || vec![Arc::new(cm("a", "x")), Arc::new(cm("b", "y"))];
        let out = relist.changes(watcher::Event::InitDone, cached);
        assert_eq!(names(&out), ["deleted x", "deleted y", "listed None"]);
    }

    #[test]
    fn a_cluster_scoped_object_is_within_the_scope_of_its_name() {
        let mut ns = Namespace::default();
        ns.metadata.name = Some("a".into());
        assert!(within(&Some("a".into()), &ns));
        assert!(!within(&Some("b".into()), &ns));
        assert!(within(&None, &ns));
    }

    #[test]
    fn the_cache_is_listed_once_every_scope_has_listed() {
        let listed = Listed::default();
        let mut cache = Cache {
            writer: Writer::<ConfigMap>::default(),
            unlisted: [Some("a".into()), Some("b".into())].into_iter().collect(),
            listed: listed.clone(),
        };
        let store = cache.writer.as_reader();
        cache.take(&CacheEvent::Applied(cm("a", "x")));
        cache.take(&CacheEvent::Listed(Some("a".into())));
        assert!(!listed.is_marked());
        cache.take(&CacheEvent::Listed(Some("a".into())));
        assert!(!listed.is_marked());
        cache.take(&CacheEvent::Listed(Some("b".into())));
        assert!(listed.is_marked());
        assert_eq!(store.state().len(), 1);
        cache.take(&CacheEvent::Deleted(cm("a", "x")));
        assert!(store.state().is_empty());
    }
}
