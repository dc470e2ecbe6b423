//! Asking the VM controller for a reconcile from outside its own watch: rule changes,
//! namespace label changes and pod events.

use std::sync::Arc;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::runtime::reflector::ObjectRef;

use crate::core::api::VirtualMachine;
use crate::core::namespaced_name::NamespacedName;
use crate::operator::observe::health::Health;

/// Sends VMs to the controller's queue, telling the liveness probe that work is waiting.
#[derive(Debug, Clone)]
pub struct Trigger {
    tx: UnboundedSender<ObjectRef<VirtualMachine>>,
    health: Arc<Health>,
}

impl Trigger {
    /// A trigger and the stream the controller reads it from.
    #[must_use]
    pub fn channel(health: Arc<Health>) -> (Trigger, UnboundedReceiver<ObjectRef<VirtualMachine>>) {
        let (tx, rx) = unbounded();
        (Trigger { tx, health }, rx)
    }

    /// Asks for a reconcile of `vm`.
    pub fn reconcile(&self, vm: &NamespacedName) {
        self.health.demand();
        // Closed only when the controller has stopped, and then nothing is left to do.
        let _ = self.tx.unbounded_send(vm.object_ref());
    }
}
