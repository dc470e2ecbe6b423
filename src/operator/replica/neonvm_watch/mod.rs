//! NeonVM, when its CRDs exist (found at run time, and picked up when installed later): its
//! VirtualMachines, their runner pods' images and the migrations under way, as every replica
//! keeps them ([`neonvm_state`], filled by [`neonvm_watcher`]). Admission gives a migration's
//! target pod what its source runs; the leader live-reloads runner pods from it.

pub mod neonvm_state;
pub mod neonvm_watcher;
