//! The custom resources of group `imagemap.dev`, version `v1alpha1`.
//!
//! Doc comments on fields are shipped in the CRDs: they are written for users.

pub mod bounded_conditions;
mod mapping;
mod vm;

pub use mapping::*;
pub use vm::*;

/// API group of every imagemap resource.
pub const GROUP: &str = "imagemap.dev";
/// API version of every imagemap resource.
pub const VERSION: &str = "v1alpha1";
