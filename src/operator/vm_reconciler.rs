//! The VirtualMachine reconcile: observe from the caches, plan, apply.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::{Context, FIELD_MANAGER};
use crate::api::VirtualMachine;
use crate::rules::Mode;
use crate::vm_images;
use crate::vm_plan::{self, Observation, PodAction, VmEvent};

/// A reconcile that could not finish; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("writing the status of {vm}: {source}")]
    Status { vm: String, source: kube::Error },
    #[error("creating pod {pod}: {source}")]
    CreatePod { pod: String, source: kube::Error },
    #[error("deleting pod {pod}: {source}")]
    DeletePod { pod: String, source: kube::Error },
}

impl ReconcileError {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Status { .. } => "status_write",
            ReconcileError::CreatePod { .. } => "pod_create",
            ReconcileError::DeletePod { .. } => "pod_delete",
        }
    }
}

fn now() -> Time {
    // Whole seconds: what the API server stores, so cached and computed statuses compare equal.
    let secs = Timestamp::now().as_second();
    Time(Timestamp::from_second(secs).unwrap_or_else(|_| Timestamp::now()))
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Reconciles one VirtualMachine, counting it in the metrics.
pub async fn reconcile(
    vm: Arc<VirtualMachine>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let started = std::time::Instant::now();
    let result = reconcile_vm(vm, Arc::clone(&ctx)).await;
    let metrics = &ctx.progress.metrics;
    metrics.reconciled(started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        metrics.failed(e.category());
    }
    result
}

async fn reconcile_vm(
    vm: Arc<VirtualMachine>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let namespace = vm.namespace().unwrap_or_default();
    if !ctx.in_scope(&namespace) || vm.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Deciding from a pod cache that has not listed yet would create pods that exist.
    if !matches!(ctx.pods.wait_until_ready().now_or_never(), Some(Ok(()))) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let rules = ctx.rules();
    let ns_labels = ctx.namespace_labels(&namespace);
    let resolution = vm_images::resolve_vm(
        &rules,
        &vm,
        &ns_labels,
        &ctx.options.default_runner_image,
        Mode::Live,
    );
    let pods = ctx.pods_of(&vm);
    let vm_ref = ObjectRef::from_obj(vm.as_ref());
    let expected = ctx.expected_pod(&vm_ref, &pods);
    let plan = vm_plan::plan(&Observation {
        vm: &vm,
        pods: pods.iter().map(AsRef::as_ref).collect(),
        resolution: &resolution,
        expected_pod: expected.as_deref(),
        now: now(),
    });

    // Warnings about a state the status is entering go out before the status is written,
    // so a crash in between repeats them rather than losing them.
    publish(&ctx, &vm, plan.events.iter().filter(|e| e.warning)).await;
    if vm.status.as_ref() != Some(&plan.status) {
        let api: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({
            "apiVersion": VirtualMachine::api_version(&()),
            "kind": VirtualMachine::kind(&()),
            "status": plan.status,
        });
        api.patch_status(
            &vm.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| ReconcileError::Status {
            vm: format!("{namespace}/{}", vm.name_any()),
            source,
        })?;
    }

    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut requeue = plan.waiting.then_some(Duration::from_secs(10));
    for action in &plan.actions {
        match action {
            PodAction::Create(pod) => {
                let name = pod.name_any();
                match pods_api.create(&PostParams::default(), pod).await {
                    Ok(_) => {}
                    Err(e) if is_status(&e, 409) => {}
                    Err(source) => return Err(ReconcileError::CreatePod { pod: name, source }),
                }
                ctx.expect_pod(vm_ref.clone(), name);
            }
            PodAction::Delete { name, uid } => {
                delete_pod(&pods_api, name, uid).await?;
                ctx.forget_pod(&vm_ref);
            }
            PodAction::Replace { name, uid, new } => {
                if let Err(wait) = ctx.take_recreation() {
                    tracing::info!(vm = %vm_ref, pod = %name, ?wait, "recreation budget spent; waiting");
                    requeue = Some(wait.max(Duration::from_secs(1)));
                    continue;
                }
                delete_pod(&pods_api, name, uid).await?;
                // An unscheduled pod is gone at once; a running one terminates first, and its
                // deletion event brings the VM back here to create the replacement.
                match pods_api.get_opt(name).await {
                    Ok(None) => {
                        let new_name = new.name_any();
                        match pods_api.create(&PostParams::default(), new).await {
                            Ok(_) => {}
                            Err(e) if is_status(&e, 409) => {}
                            Err(source) => {
                                return Err(ReconcileError::CreatePod {
                                    pod: new_name,
                                    source,
                                });
                            }
                        }
                        ctx.expect_pod(vm_ref.clone(), new_name);
                        ctx.progress.metrics.recreated();
                    }
                    Ok(Some(_)) | Err(_) => requeue = Some(Duration::from_secs(5)),
                }
            }
        }
    }
    // Reports of what was done follow the actions.
    publish(&ctx, &vm, plan.events.iter().filter(|e| !e.warning)).await;
    // Mapping statuses count VMs and list those awaiting a restart.
    ctx.mapping_status.notify_one();
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

async fn publish<'a>(
    ctx: &Context,
    vm: &VirtualMachine,
    events: impl Iterator<Item = &'a VmEvent>,
) {
    for ev in events {
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: ev.reason.into(),
            note: Some(ev.message.chars().take(1000).collect()),
            action: ev.reason.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &vm.object_ref(&())).await {
            tracing::warn!(vm = %ObjectRef::from_obj(vm), error = %e, "could not record event");
        }
    }
}

/// Deletes a pod with a UID precondition; a pod already gone or replaced is not an error.
async fn delete_pod(api: &Api<Pod>, name: &str, uid: &str) -> Result<(), ReconcileError> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(source) => Err(ReconcileError::DeletePod {
            pod: name.to_string(),
            source,
        }),
    }
}

/// Backoff after a failed reconcile.
pub fn error_policy(vm: Arc<VirtualMachine>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(vm = %ObjectRef::from_obj(vm.as_ref()), category = error.category(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(2))
}
