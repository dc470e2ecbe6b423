//! Objects the operator cannot read — a tenant wrote something the CRD accepts but the
//! operator's types do not (an integer out of range in an extra init container, say). Each
//! is skipped, never blocking its watch, and told to whoever reports it (the write side's
//! `unreadable_reporter`).

use kube::core::error_boundary::InvalidObject;

/// An unreadable object and the kind it was watched as.
#[derive(Debug)]
pub struct Unreadable {
    pub api_version: String,
    pub kind: String,
    pub object: Box<InvalidObject>,
}
