//! The operator's watches as changes to its caches: one watch per namespace it acts in
//! (or one of all namespaces), merged into one cache, each (re-)list turned into the
//! applies and deletes that bring the cache to the list — so a list of one namespace
//! never touches another's objects, and every object gone while a watch was down is
//! delivered as deleted to whoever follows the cache.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::error_boundary::InvalidObject;
use kube::core::{DeserializeGuard, NamespaceResourceScope};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::operator::observe::health::Health;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// What one list covers: a namespace (for a cluster-scoped kind, the object of that
/// name), or everything (`None`).
pub type ListScope = Option<String>;

/// One change to a cache, delivered after the cache took it.
#[derive(Debug, Clone)]
pub enum CacheEvent<K> {
    /// A list of the scope started.
    ListStarted(ListScope),
    /// An object was added or changed.
    Applied(K),
    /// An object was deleted, or a list of its scope did not hold it.
    Deleted(K),
    /// A list of the scope is complete: the cache holds it.
    Listed(ListScope),
    /// An object the operator cannot read (the CRD accepted something its types do not):
    /// skipped. Its last readable version, if any, is deleted from the cache — but for the
    /// kinds that keep it ([`Arrival::KEEPS_LAST_READABLE`]: mappings, whose rules would
    /// otherwise vanish from every VM they map), which keep it until the object is readable
    /// again or deleted.
    Invalid(Box<InvalidObject>),
    /// An object that could not be read was deleted (nothing cached went with it).
    InvalidGone(Box<InvalidObject>),
}

/// What a cache keeps of an object of a kind (the impls: the replica side's `projection`).
pub trait Projection {
    /// Drops what the operator never reads.
    fn project(&mut self);
}

/// How objects of a kind arrive from the API server: as they are, or — for the kinds
/// tenants write — guarded, so that one unreadable object is skipped rather than failing
/// the whole list.
pub trait Arrival<K>:
    Resource<DynamicType = (), Scope = K::Scope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
where
    K: Resource,
{
    /// Whether the cache keeps an object's last readable version while it cannot be read.
    const KEEPS_LAST_READABLE: bool = false;

    /// The object, or why it could not be read.
    fn decoded(self) -> Result<K, Box<InvalidObject>>;
}

/// Kinds the API server validates fully: they always decode.
macro_rules! arrives_as_is {
    ($($kind:ty),*) => {$(
        impl Arrival<$kind> for $kind {
            fn decoded(self) -> Result<$kind, Box<InvalidObject>> {
                Ok(self)
            }
        }
    )*};
}

/// Kinds tenants write: decoded behind a guard (keeping the last readable version, or not).
macro_rules! arrives_guarded {
    ($keeps:expr; $($kind:ty),*) => {$(
        impl Arrival<$kind> for DeserializeGuard<$kind> {
            const KEEPS_LAST_READABLE: bool = $keeps;

            fn decoded(self) -> Result<$kind, Box<InvalidObject>> {
                self.0.map_err(Box::new)
            }
        }
    )*};
}

arrives_as_is!(Namespace);
arrives_guarded!(false; VirtualMachine);
arrives_guarded!(true; ImageMapping, ClusterImageMapping);

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
    K: Resource<DynamicType = ()> + Projection + Clone + 'static,
{
    #[must_use]
    pub fn new(scope: ListScope) -> Relist<K> {
        Relist {
            scope,
            listing: None,
        }
    }

    /// The changes `event` makes to the cache `store`; each object keeps what its
    /// [`Projection`] leaves.
    pub fn changes<W: Arrival<K>>(
        &mut self,
        event: watcher::Event<W>,
        store: &Store<K>,
    ) -> Vec<CacheEvent<K>> {
        let decoded = |w: W| {
            w.decoded().map(|mut k| {
                k.project();
                k
            })
        };
        let key_of = |invalid: &InvalidObject| {
            let key = ObjectRef::<K>::new(invalid.metadata.name.as_deref()?);
            Some(match invalid.metadata.namespace.as_deref() {
                Some(ns) => key.within(ns),
                None => key,
            })
        };
        // The cached version of an object that can no longer be read.
        let cached = |invalid: &InvalidObject| {
            store
                .get(&key_of(invalid)?)
                .map(|k| CacheEvent::Deleted(k.as_ref().clone()))
        };
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                vec![CacheEvent::ListStarted(self.scope.clone())]
            }
            watcher::Event::InitApply(obj) => match decoded(obj) {
                Ok(obj) => {
                    if let Some(listing) = self.listing.as_mut() {
                        listing.insert(ObjectRef::from_obj(&obj));
                    }
                    vec![CacheEvent::Applied(obj)]
                }
                // Not in the list: a cached version is deleted when the list completes
                // (unless it is kept).
                Err(invalid) => {
                    if W::KEEPS_LAST_READABLE
                        && let (Some(listing), Some(key)) =
                            (self.listing.as_mut(), key_of(&invalid))
                    {
                        listing.insert(key);
                    }
                    vec![CacheEvent::Invalid(invalid)]
                }
            },
            watcher::Event::Apply(obj) => match decoded(obj) {
                Ok(obj) => vec![CacheEvent::Applied(obj)],
                Err(invalid) if W::KEEPS_LAST_READABLE => vec![CacheEvent::Invalid(invalid)],
                Err(invalid) => {
                    let deleted = cached(&invalid);
                    std::iter::once(CacheEvent::Invalid(invalid))
                        .chain(deleted)
                        .collect()
                }
            },
            watcher::Event::Delete(obj) => match decoded(obj) {
                Ok(obj) => vec![CacheEvent::Deleted(obj)],
                Err(invalid) => match cached(&invalid) {
                    Some(deleted) => vec![deleted],
                    None => vec![CacheEvent::InvalidGone(invalid)],
                },
            },
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let mut out: Vec<CacheEvent<K>> = store
                    .state()
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
            CacheEvent::ListStarted(_) | CacheEvent::Invalid(_) | CacheEvent::InvalidGone(_) => {}
            CacheEvent::Listed(scope) => {
                if self.unlisted.remove(scope) && self.unlisted.is_empty() {
                    self.listed.mark();
                }
            }
        }
    }
}

/// One watch feeding a cache: what its lists cover, and what it watches.
pub struct Source<W: Clone> {
    scope: ListScope,
    api: Api<W>,
    config: watcher::Config,
}

impl<W> Source<W>
where
    W: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone,
{
    /// Watches in each of `namespaces`; all namespaces if there are none.
    pub fn namespaced(
        client: &Client,
        namespaces: &[String],
        config: &watcher::Config,
    ) -> Vec<Source<W>> {
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

impl<W> Source<W>
where
    W: Resource<DynamicType = ()> + Clone,
{
    /// A watch of every object of the kind.
    pub fn all(client: &Client, config: &watcher::Config) -> Source<W> {
        Source {
            scope: None,
            api: Api::all(client.clone()),
            config: config.clone(),
        }
    }

    /// Watches of the cluster-scoped objects of each of `names`; all if there are none.
    pub fn named(client: &Client, names: &[String], config: &watcher::Config) -> Vec<Source<W>> {
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
pub fn watch<K, W>(
    sources: Vec<Source<W>>,
    listed: &Listed,
    health: &Arc<Health>,
) -> (
    Store<K>,
    impl Stream<Item = CacheEvent<K>> + Send + 'static + use<K, W>,
)
where
    K: Resource<DynamicType = ()> + Projection + Clone + std::fmt::Debug + Send + Sync + 'static,
    W: Arrival<K>,
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
            .backoff(WatchBackoff::default())
            .inspect(move |r| health.watch_result(r.is_ok()))
            // Errors are retried by the backoff and reported to the liveness probe.
            .filter_map(|r| futures::future::ready(r.ok()))
            .flat_map(move |event| stream::iter(relist.changes(event, &store)))
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
mod tests;
