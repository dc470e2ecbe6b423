//! Something a user must see, told as a Kubernetes Event on the object it is about: a VM, a
//! NeonVM VM, a workload or a pod. Pure: the leader's event recorder sends it.

/// An Event to tell: its type (`Warning`, else `Normal`), reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}
