//! Following tags by digest: which tags the VMs follow and the digests they point to
//! ([`followed_tags`]), the checks at their registries ([`tag_follower`], through
//! `crate::registry`), the credentials Secret they use, and the push notification
//! endpoint that makes a pushed tag due at once. Wakes VMs through the VM queue.

pub mod credentials_watcher;
pub mod followed_tags;
pub mod push_endpoint;
pub mod tag_follower;
pub mod token_file;
