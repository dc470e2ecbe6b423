//! The digests of followed tags as every replica holds them for admission
//! ([`verified_digests`], keyed by [`followed::Followed`]): the leader verifies and publishes
//! them; every replica watches the publication ([`digests_watcher`]).

pub mod digests_watcher;
pub mod followed;
pub mod verified_digests;
