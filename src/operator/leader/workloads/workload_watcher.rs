//! Watches what live reload of workloads reads, into [`WorkloadState`]: the pods labelled
//! `imagemap.dev/live-reload=true`, and the Deployments, ReplicaSets, StatefulSets and
//! DaemonSets of the namespaces the operator acts in. Each object is read into the little
//! live reload keeps as it arrives. Marks `listed` once every watch has listed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::core::pod::records::LIVE_RELOAD_LABEL;
use crate::core::workload_reload::WorkloadKind;
use crate::core::workload_reload::live_pod::LivePod;
use crate::core::workload_reload::workload_status::{
    WorkloadStatus, of_daemon_set, of_deployment, of_replica_set, of_stateful_set,
};
use crate::operator::leader::workloads::workload_state::WorkloadState;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::watch_toolkit::scoped_watches::{Relists, Scoped, key_of, map_event, watches};
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// What the watcher reads through, and where it keeps what it read.
pub struct WorkloadWatcher {
    pub client: Client,
    /// The namespaces the operator acts in (empty: all).
    pub namespaces: Vec<String>,
    pub state: Arc<WorkloadState>,
    /// Marked once every watch has listed.
    pub listed: Listed,
}

fn scoped<K>(
    watcher: &WorkloadWatcher,
    config: &watcher::Config,
) -> futures::stream::BoxStream<'static, Scoped<K>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let client = watcher.client.clone();
    watches(
        &watcher.namespaces,
        move |ns: Option<&str>| match ns {
            Some(ns) => Api::<K>::namespaced(client.clone(), ns),
            None => Api::<K>::all(client.clone()),
        },
        config,
        |api, config| watcher::watcher(api, config).backoff(WatchBackoff::default()),
    )
}

/// Which of the five watches an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    Pods,
    Workload(WorkloadKind),
}

/// What was read of an object: its key, and the little live reload keeps of it (`None`:
/// a pod that could not be read).
type Item = (Option<NamespacedName>, Option<Read>);

#[derive(Debug, Clone)]
enum Read {
    Pod(LivePod),
    Workload(WorkloadStatus),
}

fn item<K: kube::Resource>(object: &K, read: Option<Read>) -> Item {
    (key_of(object), read)
}

/// Runs until the future is dropped.
pub async fn run(watcher: WorkloadWatcher) {
    let all = watcher::Config::default();
    let mut pods = scoped::<Pod>(
        &watcher,
        &watcher::Config::default().labels(&format!("{LIVE_RELOAD_LABEL}=true")),
    );
    let mut deployments = scoped::<Deployment>(&watcher, &all);
    let mut replica_sets = scoped::<ReplicaSet>(&watcher, &all);
    let mut stateful_sets = scoped::<StatefulSet>(&watcher, &all);
    let mut daemon_sets = scoped::<DaemonSet>(&watcher, &all);
    let scopes = watcher.namespaces.len().max(1);
    let mut listed: HashSet<(Source, Option<String>)> = HashSet::new();
    let mut relists: HashMap<Source, Relists> = HashMap::new();
    let workload = |kind| Source::Workload(kind);
    loop {
        let (source, ns, event) = tokio::select! {
            Some((ns, e)) = pods.next() => (Source::Pods, ns, e.map(|e| map_event(e, |p: Pod| item(&p, LivePod::read(&p).map(Read::Pod))))),
            Some((ns, e)) = deployments.next() => (workload(WorkloadKind::Deployment), ns, e.map(|e| map_event(e, |d| item(&d, Some(Read::Workload(of_deployment(&d))))))),
            Some((ns, e)) = replica_sets.next() => (workload(WorkloadKind::ReplicaSet), ns, e.map(|e| map_event(e, |r| item(&r, Some(Read::Workload(of_replica_set(&r))))))),
            Some((ns, e)) = stateful_sets.next() => (workload(WorkloadKind::StatefulSet), ns, e.map(|e| map_event(e, |s| item(&s, Some(Read::Workload(of_stateful_set(&s))))))),
            Some((ns, e)) = daemon_sets.next() => (workload(WorkloadKind::DaemonSet), ns, e.map(|e| map_event(e, |d| item(&d, Some(Read::Workload(of_daemon_set(&d))))))),
            else => return,
        };
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(error = %excerpt(&e.to_string()), ?source, "watching for live reload");
                continue;
            }
        };
        let done = matches!(event, watcher::Event::InitDone);
        apply(
            &watcher.state,
            source,
            relists.entry(source).or_default(),
            ns.clone(),
            event,
        );
        if done {
            listed.insert((source, ns));
            if listed.len() >= 5 * scopes {
                watcher.listed.mark();
            }
        }
    }
}

fn apply(
    state: &WorkloadState,
    source: Source,
    relists: &mut Relists,
    ns: Option<String>,
    event: watcher::Event<Item>,
) {
    relists.apply(
        ns,
        event,
        |(key, _): &Item| key.clone(),
        |key, item| match (source, item.and_then(|(_, read)| read.as_ref())) {
            (Source::Pods, Some(Read::Pod(pod))) => state.pod(key, Some(pod.clone())),
            (Source::Workload(kind), Some(Read::Workload(status))) => {
                state.workload(kind, key, Some(status.clone()));
            }
            (Source::Pods, _) => state.pod(key, None),
            (Source::Workload(kind), _) => state.workload(kind, key, None),
        },
        |ns, found| match source {
            Source::Pods => state.retain_pods(ns, found),
            Source::Workload(kind) => state.retain_workloads(kind, ns, found),
        },
    );
}
