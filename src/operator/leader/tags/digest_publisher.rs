//! The leader's part of the channel by which every replica holds the digests it verified:
//! each time a followed tag's digest moves (or is learned, or a tag that had one is no
//! longer followed), it puts them in force for its own admissions and, under leader
//! election, publishes them in the ConfigMap every replica watches — written only when
//! what it holds changed.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::replica::digests::verified_digests::{VerifiedDigests, encode};
use crate::operator::writes::digests_configmap::publish_digests;

/// How long a burst of digest changes is gathered into one write.
const COALESCE: Duration = Duration::from_millis(200);
/// Pause before writing again after a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// What the publisher reads, and where it publishes.
pub struct DigestPublisher {
    pub client: Client,
    pub followed: Arc<FollowedTags>,
    /// What this replica's admissions pin to.
    pub verified: Arc<VerifiedDigests>,
    /// The ConfigMap every replica watches; `None`: no other replica to tell.
    pub configmap: Option<NamespacedName>,
}

/// Publishes at each change of the digests, until the operator stops.
pub async fn run(ctx: DigestPublisher) {
    let mut written: Option<String> = None;
    let mut dropped_before = 0;
    loop {
        ctx.followed.digests_changed.notified().await;
        tokio::time::sleep(COALESCE).await;
        loop {
            let snapshot = ctx.followed.verified();
            ctx.verified.replace(
                snapshot
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            let Some(name) = &ctx.configmap else {
                break;
            };
            let (text, dropped) = encode(&snapshot);
            if dropped > 0 && dropped_before == 0 {
                tracing::warn!(
                    dropped,
                    "more followed tags than one ConfigMap holds: some digests are not published, and other replicas admit their tags unpinned"
                );
            }
            dropped_before = dropped;
            if written.as_ref() == Some(&text) {
                break;
            }
            match publish_digests(&ctx.client, name, &text).await {
                Ok(()) => {
                    written = Some(text);
                    break;
                }
                Err(e) => {
                    tracing::warn!(configmap = %name, error = %excerpt(&e.to_string()), "publishing the verified digests");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }
}
