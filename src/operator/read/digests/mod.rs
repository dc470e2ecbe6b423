//! The digests of followed tags: which tags the VMs follow, and the digest each points to as
//! last verified ([`followed_tags`]). The tag follower of the write side fills it; reconciles
//! and the mapping statuses read it.

pub mod followed_tags;
