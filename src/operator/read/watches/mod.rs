//! What the operator watches and keeps: one watch per kind (per namespace with
//! `--namespace`), each feeding a reflector store and a stream of [`cache_events`] — every
//! (re-)list as applies and deletes. Owns the caches ([`caches::Caches`]), what they keep of
//! each object ([`projection`], one copy of equal values: [`interner`]), the pods' index, and
//! the record of objects that cannot be read. Calls the API server's watches only; the other
//! rooms read what it keeps.

pub mod cache_events;
pub mod cached_pod;
pub mod caches;
pub mod interner;
pub mod invalid_objects;
pub mod listed;
pub mod pod_index;
pub mod projection;
pub mod scoped_watches;
pub mod teller;
pub mod unreadable_mappings;
pub mod watch_backoff;
