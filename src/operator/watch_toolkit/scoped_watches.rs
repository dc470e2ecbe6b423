//! Watches scoped to the namespaces the operator acts in — one per namespace, or one over
//! all — each event tagged with the namespace its watch covers, so that a re-list forgets
//! exactly what that watch no longer has.

use std::collections::HashMap;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use kube::Api;
use kube::runtime::watcher;

use crate::core::namespaced_name::NamespacedName;

/// A watch event, with the namespace its watch covers (`None`: all).
pub type Scoped<K> = (Option<String>, Result<watcher::Event<K>, watcher::Error>);

/// One watch per namespace of `namespaces` (one for all when empty), made by `each` from
/// `api` and `config`.
pub fn watches<K, S>(
    namespaces: &[String],
    api: impl Fn(Option<&str>) -> Api<K>,
    config: &watcher::Config,
    each: impl Fn(Api<K>, watcher::Config) -> S,
) -> BoxStream<'static, Scoped<K>>
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let scopes: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    };
    stream::select_all(scopes.into_iter().map(|ns| {
        let events = each(api(ns.as_deref()), config.clone());
        events.map(move |e| (ns.clone(), e)).boxed()
    }))
    .boxed()
}

/// The namespace and name of an object.
#[must_use]
pub fn key_of<K: kube::Resource>(object: &K) -> Option<NamespacedName> {
    let meta = object.meta();
    Some(NamespacedName::new(
        meta.namespace.as_deref()?,
        meta.name.as_deref()?,
    ))
}

/// `event` with each object made `f` of it.
pub fn map_event<K, T>(event: watcher::Event<K>, f: impl FnOnce(K) -> T) -> watcher::Event<T> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// What each watch's re-list under way has found so far.
#[derive(Debug, Default)]
pub struct Relists(HashMap<Option<String>, Vec<NamespacedName>>);

impl Relists {
    /// Applies one event of the watch covering `ns`: `put` keeps (`Some`) or forgets
    /// (`None`) an object, known by `key`; once a re-list is done, `retain` is told the scope
    /// and what it found, to forget the rest.
    pub fn apply<K>(
        &mut self,
        ns: Option<String>,
        event: watcher::Event<K>,
        key: impl Fn(&K) -> Option<NamespacedName>,
        mut put: impl FnMut(NamespacedName, Option<&K>),
        retain: impl FnOnce(Option<&str>, &[NamespacedName]),
    ) {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                if let Some(key) = key(&o) {
                    if let Some(seen) = self.0.get_mut(&ns) {
                        seen.push(key.clone());
                    }
                    put(key, Some(&o));
                }
            }
            watcher::Event::Delete(o) => {
                if let Some(key) = key(&o) {
                    put(key, None);
                }
            }
            watcher::Event::Init => {
                self.0.insert(ns, Vec::new());
            }
            watcher::Event::InitDone => {
                if let Some(found) = self.0.remove(&ns) {
                    retain(ns.as_deref(), &found);
                }
            }
        }
    }
}
