//! Admission of Pods, pure: which pods and containers are mapped, to what, and the JSON patch,
//! records and warnings that say so ([`pod_mutation`]); a pod's image slots
//! ([`pod_slots`]); what a mapped pod records ([`records`]); which requests are left alone
//! ([`scope`]); which followed tags a mapped pod runs, for the leader to keep checked
//! ([`pod_follows`]); what a NeonVM migration's target pod runs ([`migration_target`]). The
//! webhook (`operator::admission`) serves it.

pub mod migration_target;
pub mod pod_follows;
pub mod pod_mutation;
pub mod pod_view;
pub mod scope;
