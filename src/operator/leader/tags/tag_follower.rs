//! The tag follower: checks each followed reference once per poll interval (jittered; a
//! failing one backs off), and reconciles the VMs that use it when what they should report
//! changed — a new digest, the first answer, an error appearing, changing or clearing. It
//! starts once the registry credentials were read.
//!
//! Each check runs on its own, at most a few at a time per registry and follower (the
//! cluster's rules, or one namespace's), and a few more per follower over all registries: a
//! registry that is slow or never answers holds up only its own tags, never another
//! registry's (nor a push notification's check of them), and no namespace takes more than
//! its share of the ceiling over all, which bounds the connections held open. Failing tags
//! back off, so silent registries occupy little of it for long.
//!
//! A tag is checked with the registry credentials only for the followers they serve: the
//! cluster's rules, and the namespaces `--registry-credentials-namespaces` names. Others
//! are asked anonymously — a tenant never reads another's private tags with the operator's
//! credentials.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::core::reference::domain_of_normalized;
use crate::operator::jitter::jittered;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::leader::vms::trigger::Trigger;
use crate::operator::observe::metrics::Metrics;
use crate::operator::replica::digests::followed::{Followed, FollowedBy};
use crate::registry::{Cause, Credentials, Registries, RegistryError};

/// Most checks under way at one registry, per follower.
const CHECKS_PER_REGISTRY: usize = 4;

/// Most checks under way for one follower (the cluster's rules, or one namespace's).
const CHECKS_PER_FOLLOWER: usize = 8;

/// Most checks under way over all registries and followers.
const CHECKS_IN_ALL: usize = 64;

/// Whom the credentials Secret serves, as a refusal says it.
const SERVED: &str =
    "ClusterImageMapping rules (and the namespaces --registry-credentials-namespaces names) only";

/// Runs until the operator stops.
/// What the follower checks, where, and whom it tells.
pub struct TagFollower {
    pub followed: Arc<FollowedTags>,
    pub registries: Arc<Registries>,
    pub metrics: Arc<Metrics>,
    /// `--tag-poll-interval`.
    pub poll_interval: Duration,
    /// `--registry-credentials-namespaces`: the namespaces whose tags are checked with the
    /// credentials besides the cluster's.
    pub credentials_namespaces: Vec<String>,
}

pub async fn run(ctx: Arc<TagFollower>, trigger: Trigger) {
    let interval = ctx.poll_interval;
    // Checked without the credentials, a private registry's tags would be reported
    // unverified until they are read.
    ctx.registries.loaded().await;
    let mut registries: HashMap<(FollowedBy, String), Arc<Semaphore>> = HashMap::new();
    let mut followers: HashMap<FollowedBy, Arc<Semaphore>> = HashMap::new();
    let all = Arc::new(Semaphore::new(CHECKS_IN_ALL));
    let mut checks = JoinSet::new();
    loop {
        let (due, next) = ctx.followed.take_due(Instant::now());
        for reference in due {
            let registry = domain_of_normalized(&reference.reference).to_string();
            let limit = registries
                .entry((reference.by.clone(), registry))
                .or_insert_with(|| Arc::new(Semaphore::new(CHECKS_PER_REGISTRY)));
            let share = followers
                .entry(reference.by.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(CHECKS_PER_FOLLOWER)));
            let (limit, share, all) = (Arc::clone(limit), Arc::clone(share), Arc::clone(&all));
            let (ctx, trigger) = (Arc::clone(&ctx), trigger.clone());
            checks.spawn(async move {
                let under_way = UnderWay {
                    ctx: &ctx,
                    trigger: &trigger,
                    reference: &reference,
                    answered: false,
                };
                // Never closed.
                let _slot = limit.acquire_owned().await;
                let _share = share.acquire_owned().await;
                let _ceiling = all.acquire_owned().await;
                check(under_way).await;
            });
        }
        while let Some(ended) = checks.try_join_next() {
            if let Err(e) = ended {
                tracing::error!(error = %e, "a tag check ended abnormally");
            }
        }
        // Registries and followers with no check under way or waiting.
        registries.retain(|_, limit| Arc::strong_count(limit) > 1);
        followers.retain(|_, share| Arc::strong_count(share) > 1);
        let wait = next.map_or(interval, |t| t.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = ctx.followed.wake.notified() => {}
        }
    }
}

/// A check taken from the followed tags: it is answered, whatever happens to the task
/// (a reference left under way would never be checked again).
struct UnderWay<'a> {
    ctx: &'a TagFollower,
    trigger: &'a Trigger,
    reference: &'a Followed,
    answered: bool,
}

impl UnderWay<'_> {
    /// Records the answer and reconciles the VMs whose report it changes (a first answer
    /// lets the pods that waited for it be created).
    fn answer(&mut self, result: Result<String, RegistryError>) {
        self.answered = true;
        let interval = self.ctx.poll_interval;
        let users =
            self.ctx
                .followed
                .checked(self.reference, result, Instant::now(), jittered(interval));
        for vm in users {
            self.trigger.reconcile(&vm);
        }
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.answer(Err(RegistryError {
                reference: self.reference.reference.clone(),
                cause: Cause::Interrupted,
                asked_as: None,
                via: None,
            }));
        }
    }
}

/// Checks the reference and reconciles its users if what they report changed.
async fn check(mut under_way: UnderWay<'_>) {
    let (ctx, reference) = (under_way.ctx, under_way.reference);
    // Released while it waited for a slot: nobody needs the answer.
    if !ctx.followed.follows(reference) {
        under_way.answered = true;
        return;
    }
    let credentials = if served(&ctx.credentials_namespaces, &reference.by) {
        Credentials::InForce
    } else {
        Credentials::NotServed(SERVED)
    };
    let result = ctx
        .registries
        .digest(&reference.reference, &credentials)
        .await;
    if let Err(e) = &result {
        tracing::warn!(reference = %reference.reference, error = %e, "could not check a followed tag");
    }
    ctx.metrics.tag_checked(result.is_ok());
    under_way.answer(result);
}

/// Whether the registry credentials serve `by`: the cluster's rules, and the namespaces the
/// administrator named.
fn served(credentials_namespaces: &[String], by: &FollowedBy) -> bool {
    match by {
        FollowedBy::Cluster => true,
        FollowedBy::Namespace(ns) => credentials_namespaces.contains(ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_serve_the_cluster_and_the_namespaces_named() {
        let named = ["ci".to_string()];
        assert!(served(&named, &FollowedBy::Cluster));
        assert!(served(&named, &FollowedBy::Namespace("ci".into())));
        assert!(!served(&named, &FollowedBy::Namespace("dev".into())));
        assert!(!served(&[], &FollowedBy::Namespace("ci".into())));
    }
}
