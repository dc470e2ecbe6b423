//! Every write the leader makes to the API server: statuses by server-side apply, runner pod
//! creates, deletes and metadata patches ([`requests`]), evictions ([`eviction`]), Events
//! ([`event_recorder`]), the webhook's certificates ([`certificate_writes`]) and the
//! published digests ([`digests_configmap`]). (The Lease is the `election` room's; a
//! replica's own webhook configuration, with `--webhook-url`, the webhook's.)

pub mod certificate_writes;
pub mod digests_configmap;
pub mod event_recorder;
pub mod eviction;
pub mod requests;
