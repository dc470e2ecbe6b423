//! The leader follows the pods the webhook mapped: a metadata watch of the pods labelled
//! `imagemap.dev/mapped=true`, each pod's recorded originals resolved by the rules in force
//! (`admission::pod_follows`) — again for every pod when the rules change. The rules that
//! decide a pod's containers are counted for the mapping statuses (`PodCounts`), and the
//! followed tags among the results are followed for the pod while it exists: a pod admitted
//! with a tag no replica held a digest for is thus how its check is asked of the leader; once
//! checked, the digest is published to every replica and later pods are pinned. Metadata
//! only: a pod costs its labels and recorded originals.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::core::admission::pod_follows::pod_follows;
use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::core::pod::records::{self, MAPPED, MAPPED_LABEL};
use crate::operator::leader::followed_tags::{FollowedTags, Follower};
use crate::operator::leader::mapping_statuses::pod_counts::PodCounts;
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::replica::digests::followed::Followed;
use crate::operator::watch_toolkit::scoped_watches::{Relists, key_of, watches};
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// What the pod followers read, follow tags in and count into.
pub struct PodFollowers {
    pub client: Client,
    /// The namespaces the operator acts in (empty: all).
    pub namespaces: Vec<String>,
    /// What admission maps pods from: what a mapped pod's records resolve to now.
    pub admission: AdmissionSources,
    pub followed: Arc<FollowedTags>,
    pub counts: Arc<PodCounts>,
}

/// What is kept of a mapped pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    labels: BTreeMap<String, String>,
    originals: BTreeMap<String, String>,
}

impl Kept {
    fn of(pod: &PartialObjectMeta<Pod>) -> Kept {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        Kept {
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            originals: records::originals(&annotations),
        }
    }
}

impl PodFollowers {
    /// Resolves `pod` by the rules in force: follows its tags, counts its rules.
    fn judge(&self, key: &NamespacedName, pod: &Kept) {
        let resolved = self
            .admission
            .view(|admission| pod_follows(admission, &key.namespace, &pod.labels, &pod.originals));
        let follows = resolved
            .follows
            .into_iter()
            .map(|f| Followed::of(&f.reference, f.rule.as_ref(), &key.namespace))
            .collect();
        self.followed
            .follow_as(&Follower::Pod(key.clone()), follows, Instant::now());
        self.counts.admitted(key.clone(), Some(resolved.rules));
    }

    fn forget(&self, key: &NamespacedName) {
        self.followed.forget_follower(&Follower::Pod(key.clone()));
        self.counts.admitted(key.clone(), None);
    }
}

/// Follows the mapped pods until the future is dropped.
pub async fn run(followers: PodFollowers) {
    let config = watcher::Config::default().labels(&format!("{MAPPED_LABEL}={MAPPED}"));
    let client = followers.client.clone();
    let mut events = watches(
        &followers.namespaces,
        move |ns: Option<&str>| match ns {
            Some(ns) => Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), ns),
            None => Api::<PartialObjectMeta<Pod>>::all(client.clone()),
        },
        &config,
        |api, config| watcher(api, config).backoff(WatchBackoff::default()),
    );
    let mut rules = followers.admission.rules.changes();
    // Borrowed by one of `relists.apply`'s two closures at a time.
    let pods: RefCell<HashMap<NamespacedName, Kept>> = RefCell::default();
    let mut relists = Relists::default();
    loop {
        tokio::select! {
            Some((ns, event)) = events.next() => match event {
                Ok(event) => relists.apply(
                    ns,
                    event,
                    key_of,
                    |key, pod| {
                        let Some(pod) = pod else {
                            pods.borrow_mut().remove(&key);
                            followers.forget(&key);
                            return;
                        };
                        let kept = Kept::of(pod);
                        let mut pods = pods.borrow_mut();
                        if pods.get(&key) != Some(&kept) {
                            followers.judge(&key, &kept);
                            pods.insert(key, kept);
                        }
                    },
                    |ns, found| {
                        let found: HashSet<&NamespacedName> = found.iter().collect();
                        pods.borrow_mut().retain(|key, _| {
                            let keep = found.contains(key) || ns.is_some_and(|ns| key.namespace != ns);
                            if !keep {
                                followers.forget(key);
                            }
                            keep
                        });
                    },
                ),
                Err(e) => tracing::debug!(error = %excerpt(&e.to_string()), "watching mapped pods"),
            },
            Ok(()) = rules.changed() => {
                for (key, pod) in pods.borrow().iter() {
                    followers.judge(key, pod);
                }
            }
            else => return,
        }
    }
}
