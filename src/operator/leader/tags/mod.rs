//! Following tags by digest: the checks at their registries ([`tag_follower`], through
//! `crate::registry`), whose answers go into the followed tags (`leader::followed_tags`) and
//! are published for every replica ([`digest_publisher`]); the tags the replicas ask for
//! (learned by [`asks_watcher`]); the credentials Secret they use ([`credentials_watcher`]); and the
//! push notification endpoint that makes a pushed tag due at once ([`push_endpoint`]). Wakes
//! VMs through the VM queue.

pub mod asks_watcher;
pub mod credentials_watcher;
pub mod digest_publisher;
pub mod push_endpoint;
pub mod tag_follower;
