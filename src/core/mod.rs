//! The pure engine: parsing, matching, pod building and status computation. Nothing here
//! talks to the API server, a registry or the file system; the edges (`operator`, `cli`,
//! `registry`) call it with plain values, and it is unit-tested with them.

pub mod admission;
pub mod allowed_registries;
pub mod api;
pub mod conditions;
pub mod crd_yaml;
pub mod excerpt;
pub mod explain;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod local_registry;
pub mod manifests;
pub mod mapping_status;
pub mod namespaced_name;
pub mod neonvm;
pub mod neonvm_preview;
pub mod neonvm_status;
pub mod notice;
pub mod pod;
pub mod pod_template;
pub mod reference;
pub mod rule_change;
pub mod rules;
pub mod runner_pod;
pub mod slot_resolution;
pub mod stale_slot;
pub mod vm_images;
pub mod vm_plan;
pub mod vm_preview;
pub mod webhook_certificate;
pub mod workload_preview;
pub mod workload_reload;
