//! The operator's writes to the API server, for every room of the write side: statuses by
//! server-side apply, runner pod creates, deletes and label patches ([`requests`]), and
//! Events ([`events`]). (The Lease is the `leader` room's.)

pub mod events;
pub mod requests;
