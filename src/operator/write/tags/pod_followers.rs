//! The leader keeps the tags pods run checked: a metadata watch of the pods the webhook
//! mapped (label `imagemap.dev/mapped=true`), each pod's recorded originals resolved by the
//! rules in force (`admission::pod_follows`), and the followed tags among them followed for
//! the pod while it exists. A pod admitted with a tag no replica held a digest for is thus
//! how its check is asked of the leader; once checked, the digest is published to every
//! replica and later pods are pinned. Metadata only: a pod costs its labels and annotations
//! while its event is handled, and its followed tags after.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::admission::pod_follows::pod_follows;
use crate::admission::records::{MAPPED, MAPPED_LABEL};
use crate::excerpt::excerpt;
use crate::namespaced_name::NamespacedName;
use crate::operator::read::digests::followed_tags::{Followed, FollowedTags, Follower};
use crate::operator::read::rules::rules_in_force::RulesInForce;
use crate::operator::read::watches::caches::Caches;
use crate::operator::read::watches::watch_backoff::WatchBackoff;

/// What the pod followers read and follow tags in.
pub struct PodFollowers {
    pub client: Client,
    /// The namespaces the operator acts in (empty: all).
    pub namespaces: Vec<String>,
    pub caches: Caches,
    pub rules: Arc<RulesInForce>,
    pub followed: Arc<FollowedTags>,
}

fn follower(pod: &PartialObjectMeta<Pod>) -> Option<Follower> {
    Some(Follower::Pod(NamespacedName {
        namespace: pod.metadata.namespace.clone()?,
        name: pod.metadata.name.clone()?,
    }))
}

impl PodFollowers {
    /// The tags `pod` follows now, as the rules in force resolve its recorded originals.
    fn follows(&self, pod: &PartialObjectMeta<Pod>) -> Vec<Followed> {
        let Some(namespace) = pod.metadata.namespace.as_deref() else {
            return Vec::new();
        };
        let empty = std::collections::BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let namespace_labels = self.caches.namespace_labels(namespace);
        let rules = self.rules.current();
        pod_follows(&rules, namespace, labels, annotations, &namespace_labels)
            .into_iter()
            .map(|f| Followed::of(&f.reference, f.rule.as_ref(), namespace))
            .collect()
    }

    /// Records what `pod` follows; whether it follows any.
    fn apply(&self, pod: &PartialObjectMeta<Pod>) -> Option<Follower> {
        let who = follower(pod)?;
        let follows = self.follows(pod);
        let any = !follows.is_empty();
        self.followed.follow_as(&who, follows, Instant::now());
        any.then_some(who)
    }
}

/// Follows the tags of mapped pods until the future is dropped.
pub async fn run(followers: PodFollowers) {
    let config = watcher::Config::default().labels(&format!("{MAPPED_LABEL}={MAPPED}"));
    let apis: Vec<Api<PartialObjectMeta<Pod>>> = if followers.namespaces.is_empty() {
        vec![Api::all(followers.client.clone())]
    } else {
        followers
            .namespaces
            .iter()
            .map(|ns| Api::namespaced(followers.client.clone(), ns))
            .collect()
    };
    let mut events = stream::select_all(apis.into_iter().map(|api| {
        watcher(api, config.clone())
            .backoff(WatchBackoff::default())
            .boxed()
    }));
    // The pods that follow a tag; during a re-list, those seen in it.
    let mut following: HashSet<Follower> = HashSet::new();
    let mut relisted: Option<HashSet<Follower>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(pod)) => {
                match followers.apply(&pod) {
                    Some(who) => following.insert(who),
                    None => follower(&pod).is_some_and(|who| following.remove(&who)),
                };
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(who) = follower(&pod) {
                    followers.followed.forget_follower(&who);
                    following.remove(&who);
                }
            }
            Ok(watcher::Event::Init) => relisted = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(pod)) => {
                if let Some(who) = followers.apply(&pod) {
                    following.insert(who.clone());
                    if let Some(seen) = relisted.as_mut() {
                        seen.insert(who);
                    }
                }
            }
            // With several namespaces, one's re-list forgets only what it no longer has
            // when it is the only watch: otherwise a pod gone while a watch was down is
            // forgotten at its namespace's next event for it, or stays followed (checked
            // needlessly) until the operator restarts.
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = relisted.take()
                    && followers.namespaces.len() <= 1
                {
                    for gone in following.difference(&seen) {
                        followers.followed.forget_follower(gone);
                    }
                    following = seen;
                }
            }
            Err(e) => {
                tracing::debug!(error = %excerpt(&e.to_string()), "watching mapped pods");
            }
        }
    }
}
