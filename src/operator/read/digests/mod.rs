//! The digests of followed tags: which tags the VMs follow, and the digest each points to as
//! last verified ([`followed_tags`]) — the tag follower of the write side fills it;
//! reconciles and the mapping statuses read it — and the digests every replica holds for
//! admission ([`verified_digests`]), which the leader publishes and every replica watches
//! ([`digests_watcher`]).

pub mod digests_watcher;
pub mod followed_tags;
pub mod verified_digests;
