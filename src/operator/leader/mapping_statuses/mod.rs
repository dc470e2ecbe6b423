//! The mappings' statuses: when they are due and for which VMs ([`status_due`]); the
//! writer that counts the VMs (imagemap's and NeonVM's) each rule decides and writes every
//! status that changed ([`mapping_status_writer`]); the pods each rule decides, admission
//! did not map, or that wait for a roll ([`pod_counts`]); and the leader's paged passes over
//! the pods that count them and find the tags pods follow ([`pod_census`]). Reads the caches, the rules in force, the
//! followed tags and what admission makes of a pod; calls the pure
//! `crate::core::mapping_status`.

pub mod mapping_status_writer;
pub mod pod_census;
pub mod pod_counts;
pub mod status_due;
