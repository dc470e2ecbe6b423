//! NeonVM's VMs on the leader: live reload of their runner pods, restart required reported,
//! and replacements that came back unmapped ([`runner_reloader`], deciding with
//! `crate::core::neonvm::reload`). It acts on what the read side keeps of NeonVM.

pub mod runner_reloader;
