//! imagemap: "use image Y wherever image X is asked for" on Kubernetes.
//!
//! The library holds all logic; the `imagemap` binary is a thin command line over it.

pub mod admission;
pub mod allowed_registries;
pub mod api;
pub mod api_requests;
pub mod cli;
pub mod conditions;
pub mod crds;
pub mod excerpt;
#[cfg(test)]
mod fixtures;
pub mod local_registry;
pub mod manifests;
pub mod mapping_status;
pub mod namespaced_name;
pub mod neonvm;
pub mod operator;
pub mod pod_template;
pub mod preview;
pub mod reference;
pub mod registry;
pub mod rule_change;
pub mod rules;
pub mod runner_pod;
pub mod vm_images;
pub mod vm_plan;
pub mod webhook_certificate;
pub mod workload_preview;
pub mod workload_reload;
