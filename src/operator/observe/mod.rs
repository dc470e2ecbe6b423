//! What the operator reports: the probes (`/livez`, `/readyz`: [`health`]), `/metrics`
//! ([`metrics`]) and the progress values tests wait on ([`progress`]). Every room reports
//! here; this room calls none of them.

pub mod health;
pub mod metrics;
pub mod progress;
