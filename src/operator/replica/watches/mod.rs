//! What every replica watches and keeps: one watch per kind (per namespace with
//! `--namespace`), each feeding a reflector store and a stream of cache events (the watch
//! toolkit's `cache_events`). Owns the caches ([`caches::Caches`]), what they keep of each
//! object ([`projection`], pods as [`cached_pod`]; one copy of equal values: [`interner`]),
//! the pods' index ([`pod_index`]), and the record of objects that cannot be read
//! ([`invalid_objects`], [`unreadable_mappings`]). Calls the API server's watches only; the
//! other rooms read what it keeps.

pub mod cached_pod;
pub mod caches;
pub mod interner;
pub mod invalid_objects;
pub mod pod_index;
pub mod projection;
pub mod unreadable_mappings;
