//! Following tags by digest: the checks at their registries ([`tag_follower`], through
//! `crate::registry`), whose answers go into the digests the read side keeps
//! (`read::digests`), the tags mapped pods run ([`pod_followers`]), the credentials Secret
//! they use, and the push notification endpoint that makes a pushed tag due at once. Wakes VMs through the VM queue.

pub mod credentials_watcher;
pub mod digest_publisher;
pub mod pod_followers;
pub mod push_endpoint;
pub mod tag_follower;
pub mod token_file;
