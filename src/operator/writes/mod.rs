//! Every write the leader makes to the API server: statuses by server-side apply, runner pod
//! creates, deletes and label patches ([`requests`]), and Events ([`event_recorder`]). (The
//! Lease is the `election` room's; a replica's own webhook configuration, with
//! `--webhook-url`, the webhook's.)

pub mod event_recorder;
pub mod requests;
