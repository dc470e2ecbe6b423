//! The VirtualMachine reconcile: observe from the caches, plan (pure), apply.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};

use crate::core::api::{VirtualMachine, VirtualMachineStatus};
use crate::core::conditions;
use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::Mode;
use crate::core::vm_images;
use crate::core::vm_plan::{self, Observation, Plan, PodAction};
use crate::operator::acts_in::ActsIn;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::leader::followed_tags::Lookup;
use crate::operator::leader::mapping_statuses::status_due::StatusDue;
use crate::operator::leader::recreation_budget::RecreationBudget;
use crate::operator::leader::vms::replacements::NewPod;
use crate::operator::leader::vms::vm_memory::VmMemory;
use crate::operator::observe::health::Health;
use crate::operator::observe::metrics::Metrics;
use crate::operator::replica::digests::followed::Followed;
use crate::operator::replica::rule_watch::rules_in_force::RulesInForce;
use crate::operator::replica::watches::caches::Caches;
use crate::operator::writes::event_recorder::EventRecorder;
use crate::operator::writes::requests::{
    PodDeletion, Written, apply_status, create_pod, delete_pod, relabel_pod,
};

/// A reconcile that could not finish; retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("writing the status of {vm}: {source}")]
    Status {
        vm: NamespacedName,
        source: kube::Error,
    },
    #[error("creating pod {pod}: {source}")]
    CreatePod { pod: String, source: kube::Error },
    #[error("deleting pod {pod}: {source}")]
    DeletePod { pod: String, source: kube::Error },
    #[error("looking up pod {pod}, which the VM's status names: {source}")]
    LookUpPod { pod: String, source: kube::Error },
}

impl ReconcileError {
    /// A bounded label for metrics.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Status { .. } => "status_write",
            ReconcileError::CreatePod { .. } => "pod_create",
            ReconcileError::DeletePod { .. } => "pod_delete",
            ReconcileError::LookUpPod { .. } => "pod_lookup",
        }
    }
}

/// How long to wait for a deletion to finish (or a created pod to show) before looking again.
const WAITING_RECHECK: Duration = Duration::from_secs(10);
/// How long to wait for a replaced pod that terminates before creating its successor.
const TERMINATING_RECHECK: Duration = Duration::from_secs(5);
/// Backoff after a failed reconcile.
const ERROR_BACKOFF: Duration = Duration::from_secs(2);

/// What a reconcile observes, and writes and reports through.
pub struct Reconciler {
    pub client: Client,
    pub acts_in: ActsIn,
    /// `--default-runner-image`: what a VM without `runnerImage` runs.
    pub default_runner_image: String,
    pub caches: Caches,
    pub rules: Arc<RulesInForce>,
    /// The tags the VM's images follow, and their digests.
    pub followed: Arc<FollowedTags>,
    /// What is remembered of each VM between reconciles.
    pub memory: Arc<VmMemory>,
    pub budget: std::sync::Arc<RecreationBudget>,
    pub recorder: EventRecorder,
    /// The VMs whose mapping counts may have changed.
    pub status_due: Arc<StatusDue>,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
}

/// Reconciles one VirtualMachine, counting it in the metrics and the liveness probe.
pub async fn reconcile(
    vm: Arc<VirtualMachine>,
    ctx: Arc<Reconciler>,
) -> Result<Action, ReconcileError> {
    let health = Arc::clone(&ctx.health);
    let _running = health.reconcile_started();
    let started = std::time::Instant::now();
    let result = reconcile_vm(&vm, &ctx).await;
    // Mapping statuses count VMs and list those awaiting a restart: this one is counted
    // again, whatever the reconcile did.
    ctx.status_due.vm(NamespacedName::of(vm.as_ref()));
    let metrics = &ctx.metrics;
    metrics.reconciled(started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        metrics.failed(e.category());
    }
    result
}

async fn reconcile_vm(vm: &VirtualMachine, ctx: &Reconciler) -> Result<Action, ReconcileError> {
    let namespace = vm.namespace().unwrap_or_default();
    if !ctx.acts_in.contains(&namespace) || vm.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // The status this operator wrote may not be in the cache yet: plan from the latest.
    let latest = ctx.memory.statuses.latest(vm);
    if let Some(wait) = look_up_named_pod(&latest, ctx, &namespace).await? {
        return Ok(wait);
    }
    let mut plan = observe_and_plan(&latest, ctx, &namespace, None);
    let replaces = plan
        .actions
        .iter()
        .any(|a| matches!(a, PodAction::Replace { .. }));
    if replaces && let Err(wait) = ctx.budget.take(&namespace) {
        // The VM says so, and the pod stays until a recreation is free.
        let wait = wait.max(Duration::from_secs(1));
        tracing::info!(vm = %NamespacedName::of(vm), ?wait, "recreation budget spent; waiting");
        plan = observe_and_plan(&latest, ctx, &namespace, Some(wait));
    }
    match apply(vm, &latest, ctx, &namespace, &plan).await {
        Err(ReconcileError::CreatePod { pod, source }) => match refusal(&source) {
            // The VM says why it has no pod, and the create waits before the next attempt.
            Some(message) => {
                tracing::info!(vm = %NamespacedName::of(vm), %pod, %message, "pod create refused");
                ctx.memory
                    .create_failures
                    .refused(vm, message, std::time::Instant::now());
                let latest = ctx.memory.statuses.latest(vm);
                let plan = observe_and_plan(&latest, ctx, &namespace, None);
                apply(vm, &latest, ctx, &namespace, &plan).await
            }
            None => Err(ReconcileError::CreatePod { pod, source }),
        },
        result => result,
    }
}

/// When the VM's status names a pod and the cache holds none of the VM's pods, with no
/// evidence that the pod is gone: looks it up by name before the plan takes it for gone.
/// The cache selects runner pods by their label, and a pod that lost it while no operator
/// watched never reached it. The VM's own pod (its controller reference names this VM's
/// uid) gets its label back, with a UID precondition, and the reconcile waits for the cache
/// to show it (`Some`); a pod found missing, or not the VM's, is remembered as gone.
async fn look_up_named_pod(
    vm: &VirtualMachine,
    ctx: &Reconciler,
    namespace: &str,
) -> Result<Option<Action>, ReconcileError> {
    let Some(name) = vm.status.as_ref().and_then(|s| s.pod_name.as_deref()) else {
        return Ok(None);
    };
    let vm_ref = NamespacedName::of(vm);
    let index = &ctx.caches.pod_index;
    if !index.pods_of(&vm_ref).is_empty()
        || index.known_gone(&vm_ref, name)
        || ctx.memory.expectations.pending(&vm_ref, &[]).is_some()
    {
        return Ok(None);
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let found = api
        .get_opt(name)
        .await
        .map_err(|source| ReconcileError::LookUpPod {
            pod: name.to_string(),
            source,
        })?;
    let own = found.filter(|pod| {
        pod.owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == vm.metadata.uid.as_ref())
    });
    let Some(pod) = own else {
        index.mark_gone(&vm_ref, name);
        return Ok(None);
    };
    // Labelled already: the cache is behind, and shows it soon.
    if pod.labels().get(crate::core::runner_pod::VM_LABEL) == Some(&vm.name_any()) {
        return Ok(Some(Action::requeue(WAITING_RECHECK)));
    }
    let uid = pod.uid().unwrap_or_default();
    match relabel_pod(&api, name, &uid, &vm.name_any()).await {
        Ok(Written::Gone) => {
            index.mark_gone(&vm_ref, name);
            Ok(None)
        }
        Ok(_) => {
            tracing::info!(vm = %NamespacedName::of(vm), pod = %name, "the pod the VM's status names had lost its label; put it back");
            Ok(Some(Action::requeue(WAITING_RECHECK)))
        }
        Err(source) => Err(ReconcileError::LookUpPod {
            pod: name.to_string(),
            source,
        }),
    }
}

/// What the API server said when it refused a request for good (a 4xx other than a
/// conflict or throttling); `None` for errors worth retrying at once.
fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(s) if (400..500).contains(&s.code) && !matches!(s.code, 409 | 429) => {
            Some(crate::core::excerpt::excerpt(&s.message))
        }
        _ => None,
    }
}

/// Observes the VM's resolution and pods from the caches, and plans; `recreation_wait`:
/// the recreation budget is spent for that long.
fn observe_and_plan(
    vm: &VirtualMachine,
    ctx: &Reconciler,
    namespace: &str,
    recreation_wait: Option<Duration>,
) -> Plan {
    let mut resolution = vm_images::resolve_vm(
        &ctx.rules.current(),
        vm,
        &ctx.caches.namespace_labels(namespace),
        &ctx.default_runner_image,
        Mode::Live,
    );
    // Followed tags: the first answer of the registry is awaited (the follower reconciles
    // the VM with it); after that the last known digest pins the pod.
    let mut followed: Vec<Followed> = resolution
        .following()
        .map(|(reference, rule)| Followed::of(reference, rule, namespace))
        .collect();
    followed.sort();
    followed.dedup();
    let lookups = ctx
        .followed
        .follow(&NamespacedName::of(vm), followed, std::time::Instant::now());
    if lookups.iter().any(|(_, l)| *l == Lookup::Pending) {
        return Plan::hold(vm);
    }
    let previous = vm
        .status
        .as_ref()
        .map(VirtualMachineStatus::resolved_image_values)
        .unwrap_or_default();
    resolution.pin(
        |reference, rule| {
            let key = Followed::of(reference, rule, namespace);
            match lookups.iter().find(|(r, _)| *r == key) {
                Some((_, Lookup::Known { digest, error })) => {
                    (digest.clone(), error.as_ref().map(ToString::to_string))
                }
                _ => (None, None),
            }
        },
        &previous,
    );
    let now = conditions::now();
    let vm_ref = NamespacedName::of(vm);
    let mut pods = ctx.caches.pods_of(vm);
    // A pod this operator deleted that the cache still shows live is terminating: never
    // deleted (nor replaced, nor announced) twice while the pod watch lags.
    ctx.memory
        .expectations
        .mark_deleted(&vm_ref, &mut pods, &now);
    let pods: Vec<&Pod> = pods.iter().collect();
    let expected = ctx.memory.expectations.pending(&vm_ref, &pods);
    let refused = ctx.memory.create_failures.of(vm, std::time::Instant::now());
    let held = ctx.caches.unreadable_mappings.holding(namespace);
    vm_plan::plan(&Observation {
        vm,
        pods,
        resolution: &resolution,
        expected_pod: expected.as_deref(),
        create_failure: refused.as_ref(),
        recreation_wait,
        rules_unknown: held.as_deref(),
        now,
    })
}

/// Applies a plan: warnings, the status, the pod actions, then the other Events. `vm` is
/// the cached object, `latest` the same with the status this operator wrote last.
async fn apply(
    vm: &VirtualMachine,
    latest: &VirtualMachine,
    ctx: &Reconciler,
    namespace: &str,
    plan: &Plan,
) -> Result<Action, ReconcileError> {
    // Warnings about a state the status is entering go out before the status is written,
    // so a crash in between repeats them rather than losing them.
    ctx.recorder
        .record(vm, plan.events.iter().filter(|e| e.warning))
        .await;
    if plan.write_status {
        let api: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), namespace);
        let written = apply_status(&api, &vm.name_any(), latest.status.as_ref(), &plan.status)
            .await
            .map_err(|source| ReconcileError::Status {
                vm: NamespacedName::of(vm),
                source,
            })?;
        match written {
            Written::Gone => return Ok(Action::await_change()),
            Written::Changed => ctx.memory.statuses.wrote(vm, plan.status.clone()),
            Written::Unchanged => {}
        }
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let vm_ref = NamespacedName::of(vm);
    let mut requeue = plan.waiting.then_some(WAITING_RECHECK).or(plan.recheck);
    for action in &plan.actions {
        match action {
            PodAction::Create(pod) => {
                create(ctx, &pods, &vm_ref, pod).await?;
            }
            PodAction::Delete { name, uid, grace } => {
                ctx.memory.replacements.forget(&vm_ref);
                if delete(&pods, name, uid, *grace).await? != PodDeletion::Replaced {
                    ctx.memory
                        .expectations
                        .deleted(vm_ref.clone(), name.clone(), uid.clone());
                }
                ctx.memory.expectations.forget(&vm_ref);
            }
            PodAction::Replace {
                name,
                uid,
                grace,
                new,
            } => {
                // (The recreation budget was taken when planning.)
                // An unscheduled pod is gone at once; a running one terminates first, and the
                // pod watch hands the replacement over when it shows that pod gone.
                let deletion = delete(&pods, name, uid, *grace).await?;
                if deletion != PodDeletion::Replaced {
                    ctx.metrics.recreated();
                    ctx.memory
                        .expectations
                        .deleted(vm_ref.clone(), name.clone(), uid.clone());
                }
                match deletion {
                    PodDeletion::Gone | PodDeletion::NotFound => {
                        create(ctx, &pods, &vm_ref, new).await?;
                    }
                    PodDeletion::Terminating | PodDeletion::Replaced => {
                        let new = NewPod {
                            name: new.name_any(),
                            images: plan.status.resolved_image_values().into(),
                            restart_count: plan.status.restart_count,
                        };
                        ctx.memory
                            .replacements
                            .wait_for(vm_ref.clone(), name.clone(), new);
                        requeue = Some(TERMINATING_RECHECK);
                    }
                }
            }
        }
    }
    // Reports of what was done follow the actions.
    ctx.recorder
        .queue(vm, plan.events.iter().filter(|e| !e.warning))
        .await;
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

async fn create(
    ctx: &Reconciler,
    api: &Api<Pod>,
    vm: &NamespacedName,
    pod: &Pod,
) -> Result<(), ReconcileError> {
    // Not while the replacement the pod watch handed over is being created.
    if !ctx.memory.replacements.claim(vm) {
        return Ok(());
    }
    create_pod(api, pod)
        .await
        .map_err(|source| ReconcileError::CreatePod {
            pod: pod.name_any(),
            source,
        })?;
    ctx.memory.expectations.expect(vm.clone(), pod.name_any());
    ctx.memory.create_failures.created(vm);
    Ok(())
}

async fn delete(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    grace: Option<u32>,
) -> Result<PodDeletion, ReconcileError> {
    delete_pod(api, name, uid, grace)
        .await
        .map_err(|source| ReconcileError::DeletePod {
            pod: name.to_string(),
            source,
        })
}

/// Backoff after a failed reconcile.
#[allow(clippy::needless_pass_by_value)] // The signature kube's Controller calls.
pub fn error_policy(
    vm: Arc<VirtualMachine>,
    error: &ReconcileError,
    _ctx: Arc<Reconciler>,
) -> Action {
    let error_category = error.category();
    let error = crate::core::excerpt::excerpt(&error.to_string());
    tracing::warn!(vm = %NamespacedName::of(vm.as_ref()), category = error_category, %error, "reconcile failed");
    Action::requeue(ERROR_BACKOFF)
}
