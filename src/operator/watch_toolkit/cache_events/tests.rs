use super::*;
use crate::operator::replica::watches::cached_pod::CachedPod;
use kube::ResourceExt;

fn pod(ns: &str, name: &str) -> CachedPod {
    let mut p = CachedPod::default();
    p.metadata.namespace = Some(ns.into());
    p.metadata.name = Some(name.into());
    p
}

/// A store holding `objects`.
fn store_of<K: Resource<DynamicType = ()> + Clone + 'static>(objects: Vec<K>) -> Store<K> {
    let mut writer = Writer::<K>::default();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    writer.as_reader()
}

fn names<K: Resource>(events: &[CacheEvent<K>]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            CacheEvent::ListStarted(s) => format!("started {s:?}"),
            CacheEvent::Applied(o) => format!("applied {}", o.name_any()),
            CacheEvent::Deleted(o) => format!("deleted {}", o.name_any()),
            CacheEvent::Listed(s) => format!("listed {s:?}"),
            CacheEvent::Invalid(i) => {
                format!("invalid {}", i.metadata.name.as_deref().unwrap_or_default())
            }
            CacheEvent::InvalidGone(i) => {
                format!(
                    "invalid gone {}",
                    i.metadata.name.as_deref().unwrap_or_default()
                )
            }
        })
        .collect()
}

#[test]
fn a_relist_deletes_what_it_no_longer_holds_in_its_own_namespace_only() {
    let mut relist = Relist::<CachedPod>::new(Some("a".into()));
    let store = store_of(vec![pod("a", "kept"), pod("a", "gone"), pod("b", "other")]);
    let mut out = Vec::new();
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(pod("a", "kept")),
        watcher::Event::InitDone,
        watcher::Event::Apply(pod("a", "new")),
        watcher::Event::Delete(pod("a", "new")),
    ] {
        out.extend(relist.changes(event, &store));
    }
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
    let mut relist = Relist::<CachedPod>::new(None);
    let store = store_of(vec![pod("a", "x"), pod("b", "y")]);
    relist.changes(watcher::Event::<CachedPod>::Init, &store);
    let mut out = relist.changes(watcher::Event::<CachedPod>::InitDone, &store);
    out.sort_by_key(|e| names(std::slice::from_ref(e)));
    assert_eq!(names(&out), ["deleted x", "deleted y", "listed None"]);
}

#[test]
fn an_unreadable_object_is_skipped_and_its_last_readable_version_dropped() {
    let guarded = |json: serde_json::Value| -> DeserializeGuard<VirtualMachine> {
        serde_json::from_value(json).unwrap()
    };
    let readable = |name: &str| {
        guarded(serde_json::json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "dev"},
            "spec": {"guest": {"rootDisk": {"image": "disk:1"}}}
        }))
    };
    let unreadable = |name: &str| {
        guarded(serde_json::json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "dev"},
            "spec": {"guest": {"rootDisk": {"image": "disk:1"}},
                     "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                         {"weight": 99_999_999_999_i64, "preference": {}}]}}}
        }))
    };
    let mut relist = Relist::<VirtualMachine>::new(None);
    let store = store_of(vec![readable("was-fine").0.unwrap()]);
    let mut out = Vec::new();
    for event in [
        watcher::Event::Apply(unreadable("was-fine")),
        watcher::Event::Apply(unreadable("never-fine")),
        watcher::Event::Init,
        watcher::Event::InitApply(readable("ok")),
        watcher::Event::InitApply(unreadable("never-fine")),
    ] {
        out.extend(relist.changes(event, &store));
    }
    assert_eq!(
        names(&out),
        [
            "invalid was-fine",
            "deleted was-fine",
            "invalid never-fine",
            "started None",
            "applied ok",
            "invalid never-fine",
        ]
    );
    let CacheEvent::Invalid(invalid) = &out[0] else {
        unreachable!()
    };
    assert!(
        invalid.error.contains("containerPort") || invalid.error.contains("i32"),
        "{}",
        invalid.error
    );
}

#[test]
fn an_unreadable_mapping_keeps_its_last_readable_version() {
    let guarded = |priority: i64| -> DeserializeGuard<ImageMapping> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": "m", "namespace": "dev"},
            "spec": {"priority": priority, "rules": []}
        }))
        .unwrap()
    };
    let mut relist = Relist::<ImageMapping>::new(None);
    let store = store_of(vec![guarded(1).0.unwrap()]);
    let mut out = Vec::new();
    for event in [
        watcher::Event::Apply(guarded(99_999_999_999)),
        watcher::Event::Init,
        watcher::Event::InitApply(guarded(99_999_999_999)),
        watcher::Event::InitDone,
        watcher::Event::Delete(guarded(99_999_999_999)),
    ] {
        out.extend(relist.changes(event, &store));
    }
    // Kept through the change and the relist; deleted only when the mapping is.
    assert_eq!(
        names(&out),
        [
            "invalid m",
            "started None",
            "invalid m",
            "listed None",
            "deleted m"
        ]
    );
    let empty = store_of::<ImageMapping>(vec![]);
    let gone = relist.changes(watcher::Event::Delete(guarded(99_999_999_999)), &empty);
    assert_eq!(names(&gone), ["invalid gone m"]);
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
        writer: Writer::<CachedPod>::default(),
        unlisted: [Some("a".into()), Some("b".into())].into_iter().collect(),
        listed: listed.clone(),
    };
    let store = cache.writer.as_reader();
    cache.take(&CacheEvent::Applied(pod("a", "x")));
    cache.take(&CacheEvent::Listed(Some("a".into())));
    assert!(!listed.is_marked());
    cache.take(&CacheEvent::Listed(Some("a".into())));
    assert!(!listed.is_marked());
    cache.take(&CacheEvent::Listed(Some("b".into())));
    assert!(listed.is_marked());
    assert_eq!(store.state().len(), 1);
    cache.take(&CacheEvent::Deleted(pod("a", "x")));
    assert!(store.state().is_empty());
}
