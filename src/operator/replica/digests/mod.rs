//! The digests of followed tags as every replica holds them for admission
//! ([`verified_digests`], keyed by [`followed::Followed`]): the leader verifies and publishes
//! them; every replica watches the publication ([`digests_watcher`]). The followed tags a
//! replica admitted without a digest are asked of the leader ([`tag_asks`]; under leader
//! election through [`asks_publisher`]).

pub mod asks_publisher;
pub mod digests_watcher;
pub mod followed;
pub mod tag_asks;
pub mod verified_digests;
