//! The creator of replacements: a liveReload replacement whose old pod was still
//! terminating when the reconcile deleted it is created the moment the pod watch shows that
//! pod gone — on evidence, as the reconcile would, but without waiting for the VM's next
//! turn in the controller's queue behind every other VM of a fan-out.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::core::api::VirtualMachine;
use crate::core::namespaced_name::NamespacedName;
use crate::core::runner_pod;
use crate::operator::leader::vms::replacements::Replacement;
use crate::operator::leader::vms::trigger::Trigger;
use crate::operator::leader::vms::vm_memory::VmMemory;
use crate::operator::writes::requests::create_pod;

/// What the creator builds replacements from, creates them through and remembers.
pub struct ReplacementCreator {
    pub client: Client,
    /// The VMs, as the cache holds them now.
    pub vms: Store<VirtualMachine>,
    pub memory: Arc<VmMemory>,
    /// How many are created at once: as many as reconciles may run.
    pub concurrency: u16,
}

/// Creates each replacement handed over (as many at once as reconciles may run), then asks
/// for a reconcile of its VM, which reports it. Runs until the pod watcher stops.
pub async fn create_handed_over(
    ctx: ReplacementCreator,
    handed: UnboundedReceiver<Replacement>,
    trigger: Trigger,
) {
    let concurrency = usize::from(ctx.concurrency);
    let ctx = Arc::new(ctx);
    handed
        .for_each_concurrent(concurrency, |r| {
            let (ctx, trigger) = (Arc::clone(&ctx), trigger.clone());
            async move {
                // Built from the VM as it is now: one deleted meanwhile gets no pod, and
                // one whose spec changed gets the pod its reconcile plans.
                let pod = ctx.vms.get(&r.vm.object_ref()).and_then(|vm| {
                    runner_pod::build(&vm, &r.pod.images, r.pod.restart_count)
                        .filter(|pod| pod.name_any() == r.pod.name)
                });
                match pod {
                    Some(pod) => create(&ctx, &r.vm, &pod).await,
                    None => ctx.memory.replacements.done(&r.vm),
                }
                trigger.reconcile(&r.vm);
            }
        })
        .await;
}

async fn create(ctx: &ReplacementCreator, vm: &NamespacedName, pod: &Pod) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &vm.namespace);
    match create_pod(&api, pod).await {
        Ok(_) => {
            ctx.memory.expectations.expect(vm.clone(), pod.name_any());
            ctx.memory.create_failures.created(vm);
        }
        Err(e) => {
            // The reconcile that follows plans the pod again (and reports a refusal).
            tracing::info!(%vm, pod = %pod.name_any(), error = %crate::core::excerpt::excerpt(&e.to_string()), "creating a replacement pod");
        }
    }
    ctx.memory.replacements.done(vm);
}
