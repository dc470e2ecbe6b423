//! Mappings the operator cannot read and of which it holds no readable version (one written
//! under an older, looser CRD, seen first by a process that never read it well): their
//! rules are unknown, so no VM they might map may change its pods on a guess. An
//! ImageMapping holds its namespace's VMs; a ClusterImageMapping every VM. (An unreadable
//! mapping with a readable version keeps that version's rules: the cache keeps it.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kube::Resource;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::core::excerpt::excerpt;
use crate::operator::watch_toolkit::cache_events::{CacheEvent, ListScope};

/// A mapping: its kind, namespace (none for a ClusterImageMapping) and name.
type Key = (&'static str, Option<String>, String);

#[derive(Debug, Default)]
struct State {
    /// Why each cannot be read.
    unreadable: BTreeMap<Key, String>,
    /// During a list of a scope: the unreadable mappings it held so far.
    listing: BTreeMap<(&'static str, ListScope), BTreeSet<Key>>,
}

/// The mappings whose rules are unknown.
#[derive(Debug, Default)]
pub struct UnreadableMappings {
    state: Mutex<State>,
}

/// Which VMs a change of the unreadable mappings concerns: a namespace's (`Some`), or all.
pub type Held = Option<String>;

impl UnreadableMappings {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves whole maps: a panicking holder left usable ones.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `event` of the mapping cache `store` (of kind `K`); the VMs to reconcile when
    /// what holds them changed.
    pub fn observe<K: Resource<DynamicType = ()> + Clone>(
        &self,
        event: &CacheEvent<K>,
        store: &Store<K>,
    ) -> Option<Held> {
        let kind: &'static str = if K::kind(&()) == "ClusterImageMapping" {
            "ClusterImageMapping"
        } else {
            "ImageMapping"
        };
        let key_of = |namespace: Option<String>, name: String| -> Key { (kind, namespace, name) };
        let held = |key: &Key| key.1.clone();
        let mut state = self.lock();
        match event {
            CacheEvent::Invalid(invalid) => {
                let (namespace, name) = names(invalid)?;
                let key = key_of(namespace.clone(), name.clone());
                for ((k, scope), seen) in &mut state.listing {
                    if *k == kind && scope.as_ref().is_none_or(|s| Some(s) == namespace.as_ref()) {
                        seen.insert(key.clone());
                    }
                }
                let mut cached = ObjectRef::<K>::new(&name);
                if let Some(ns) = &namespace {
                    cached = cached.within(ns);
                }
                // A readable version is kept, with its rules.
                if store.get(&cached).is_some() {
                    return None;
                }
                let why = excerpt(&invalid.error);
                let changed = state.unreadable.get(&key) != Some(&why);
                state.unreadable.insert(key.clone(), why);
                changed.then(|| held(&key))
            }
            CacheEvent::Applied(obj) | CacheEvent::Deleted(obj) => {
                let meta = obj.meta();
                let key = key_of(meta.namespace.clone(), meta.name.clone()?);
                state.unreadable.remove(&key).map(|_| held(&key))
            }
            CacheEvent::InvalidGone(invalid) => {
                let (namespace, name) = names(invalid)?;
                let key = key_of(namespace, name);
                state.unreadable.remove(&key).map(|_| held(&key))
            }
            CacheEvent::ListStarted(scope) => {
                state.listing.insert((kind, scope.clone()), BTreeSet::new());
                None
            }
            CacheEvent::Listed(scope) => {
                let seen = state
                    .listing
                    .remove(&(kind, scope.clone()))
                    .unwrap_or_default();
                let gone: Vec<Key> = state
                    .unreadable
                    .keys()
                    .filter(|k| {
                        k.0 == kind && scope.as_ref().is_none_or(|s| k.1.as_ref() == Some(s))
                    })
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                let mut concerned: Option<Held> = None;
                for key in gone {
                    state.unreadable.remove(&key);
                    // Several namespaces (or a cluster mapping): every VM.
                    concerned = Some(match concerned {
                        None => held(&key),
                        Some(h) if h == held(&key) => h,
                        Some(_) => None,
                    });
                }
                concerned
            }
        }
    }

    /// Why the VMs of `namespace` may change no pod, if they may not: the first unreadable
    /// mapping that could map them.
    #[must_use]
    pub fn holding(&self, namespace: &str) -> Option<String> {
        let state = self.lock();
        let (key, why) = state
            .unreadable
            .iter()
            .find(|(k, _)| k.1.as_deref().is_none_or(|ns| ns == namespace))?;
        let (kind, ns, name) = key;
        let whose = match ns {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        Some(format!(
            "{whose} cannot be read ({why}) and no readable version of it is known: its rules are unknown, so this VM's pod is neither created nor replaced until it can be read (is the CRD older than the operator?)"
        ))
    }
}

fn names(invalid: &InvalidObject) -> Option<(Option<String>, String)> {
    Some((
        invalid.metadata.namespace.clone(),
        invalid.metadata.name.clone()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::api::ImageMapping;
    use kube::core::DeserializeGuard;
    use kube::runtime::reflector::store::Writer;

    fn invalid(name: &str) -> Box<InvalidObject> {
        let guarded: DeserializeGuard<ImageMapping> = serde_json::from_value(serde_json::json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": name, "namespace": "dev"},
            "spec": {"priority": 99_999_999_999_i64, "rules": []}
        }))
        .unwrap();
        Box::new(guarded.0.unwrap_err())
    }

    fn readable(name: &str) -> ImageMapping {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": name, "namespace": "dev"},
            "spec": {"rules": []}
        }))
        .unwrap()
    }

    #[test]
    fn an_unreadable_mapping_without_a_readable_version_holds_its_namespace() {
        let unreadable = UnreadableMappings::default();
        let mut writer = Writer::<ImageMapping>::default();
        let store = writer.as_reader();
        let held = unreadable.observe(&CacheEvent::Invalid(invalid("m")), &store);
        assert_eq!(held, Some(Some("dev".into())));
        let why = unreadable.holding("dev").unwrap();
        assert!(
            why.starts_with("ImageMapping dev/m cannot be read"),
            "{why}"
        );
        assert!(unreadable.holding("prod").is_none());
        // Seen again the same: nothing new.
        assert_eq!(
            unreadable.observe(&CacheEvent::Invalid(invalid("m")), &store),
            None
        );
        // Readable again: released.
        let fixed = CacheEvent::Applied(readable("m"));
        assert_eq!(unreadable.observe(&fixed, &store), Some(Some("dev".into())));
        assert!(unreadable.holding("dev").is_none());
        // One with a readable version cached keeps its rules and holds nothing.
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(readable("kept")));
        assert_eq!(
            unreadable.observe(&CacheEvent::Invalid(invalid("kept")), &store),
            None
        );
        assert!(unreadable.holding("dev").is_none());
        // Deleted while unreadable: released.
        unreadable.observe(&CacheEvent::Invalid(invalid("m")), &store);
        let gone = CacheEvent::<ImageMapping>::InvalidGone(invalid("m"));
        assert_eq!(unreadable.observe(&gone, &store), Some(Some("dev".into())));
        assert!(unreadable.holding("dev").is_none());
    }

    #[test]
    fn a_relist_that_no_longer_holds_it_releases_it_and_one_that_does_keeps_it() {
        let unreadable = UnreadableMappings::default();
        let store = Writer::<ImageMapping>::default().as_reader();
        unreadable.observe(&CacheEvent::Invalid(invalid("m")), &store);
        let scope = Some("dev".to_string());
        unreadable.observe(
            &CacheEvent::<ImageMapping>::ListStarted(scope.clone()),
            &store,
        );
        unreadable.observe(&CacheEvent::Invalid(invalid("m")), &store);
        assert_eq!(
            unreadable.observe(&CacheEvent::<ImageMapping>::Listed(scope.clone()), &store),
            None
        );
        assert!(
            unreadable.holding("dev").is_some(),
            "held throughout the relist"
        );
        unreadable.observe(
            &CacheEvent::<ImageMapping>::ListStarted(scope.clone()),
            &store,
        );
        assert_eq!(
            unreadable.observe(&CacheEvent::<ImageMapping>::Listed(scope), &store),
            Some(Some("dev".into()))
        );
        assert!(unreadable.holding("dev").is_none());
    }
}
