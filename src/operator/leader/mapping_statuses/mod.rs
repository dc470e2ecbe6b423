//! The mappings' statuses: when they are due and for which VMs ([`status_due`]), and the
//! writer that counts the VMs each rule decides and writes every status that changed
//! ([`mapping_status_writer`]). Reads the caches, the rules in force and the digests; calls
//! the pure `crate::core::mapping_status`.

pub mod mapping_status_writer;
pub mod pod_counts;
pub mod pod_scanner;
pub mod status_due;
