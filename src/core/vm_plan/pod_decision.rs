//! Step 1 of the plan: what happens to the VM's pods — which to create, replace or
//! delete, and the phase, pod name and restart count that follow.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::core::api::{
    ResolvedImage, RestartPolicy, VirtualMachine, VirtualMachineStatus, VmPhase,
};
use crate::core::runner_pod::{self, pod_images, pod_images_hash, pod_phase, pod_restart_count};

use super::restart_backoff;

/// A change to a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum PodAction {
    Create(Box<Pod>),
    /// Delete with a UID precondition (and, for a pod whose own grace period is 0, a grace
    /// period of `grace` seconds: see [`crate::core::runner_pod::MIN_GRACE_SECONDS`]).
    Delete {
        name: String,
        uid: String,
        grace: Option<u32>,
    },
    /// liveReload: delete the old pod (UID precondition, `grace` as for `Delete`), then
    /// create the new one as soon as the old one is gone — in the same pass when its
    /// deletion is immediate.
    Replace {
        name: String,
        uid: String,
        grace: Option<u32>,
        new: Box<Pod>,
    },
}

/// One slot whose image differs between the live pod and the resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageChange {
    pub slot: String,
    /// What the pod runs; `None`: the pod has no such slot.
    pub from: Option<String>,
    /// What the slot resolves to now; `None`: the slot is gone.
    pub to: Option<String>,
}

/// The slots whose images differ, in slot order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageChanges(pub Vec<ImageChange>);

impl ImageChanges {
    fn between(pod: &Pod, images: &[ResolvedImage]) -> ImageChanges {
        let running = pod_images(pod);
        let mut changes = Vec::new();
        for img in images {
            let to = img.pod_image();
            match running.get(&img.slot) {
                Some(old) if Some(old) == to.as_ref() => {}
                from => changes.push(ImageChange {
                    slot: img.slot.clone(),
                    from: from.cloned(),
                    to,
                }),
            }
        }
        for (slot, old) in &running {
            if !images.iter().any(|i| &i.slot == slot) {
                changes.push(ImageChange {
                    slot: slot.clone(),
                    from: Some(old.clone()),
                    to: None,
                });
            }
        }
        ImageChanges(changes)
    }
}

impl fmt::Display for ImageChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match (&c.from, &c.to) {
                (_, None) => write!(f, "{}: removed", c.slot)?,
                (Some(from), Some(to)) => write!(f, "{}: {from} → {to}", c.slot)?,
                (None, Some(to)) => write!(f, "{}: (none) → {to}", c.slot)?,
            }
        }
        Ok(())
    }
}

/// Something that happened to the VM's pod, reported as a Normal Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodTransition {
    /// A runner pod is created with these images.
    Created {
        pod: String,
        images: Vec<ResolvedImage>,
    },
    /// liveReload: the pod is replaced for new images.
    Recreating {
        old: String,
        new: String,
        changes: ImageChanges,
    },
    /// The restart policy starts a new pod after `pod` finished (or, `None`, vanished).
    Restarting {
        pod: Option<String>,
        phase: VmPhase,
        policy: RestartPolicy,
    },
}

/// Whether the pod runs the images the slots resolve to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodImages {
    /// It does (or is being replaced by one that does).
    Current,
    /// It runs older images and liveReload is off.
    RestartRequired(ImageChanges),
    /// It runs older images and its replacement waits for the recreation budget.
    Throttled(ImageChanges),
    /// No pod runs, and none is started.
    NoPod,
}

/// The outcome of step 1.
#[derive(Debug, Clone, PartialEq)]
pub struct PodDecision {
    pub phase: Option<VmPhase>,
    pub pod_name: Option<String>,
    pub restart_count: i32,
    /// Restarts in a row after short runs (see [`super::restart_backoff`]).
    pub crash_loop_count: i32,
    /// The finished pod's restart backs off for this long yet.
    pub restart_wait: Option<Duration>,
    pub actions: Vec<PodAction>,
    pub transitions: Vec<PodTransition>,
    /// Waiting for a deletion to finish before creating.
    pub waiting: bool,
    /// The current pod is starting (see [`runner_pod::pod_starting`]), for this long yet.
    pub starting: Option<Duration>,
    pub images: PodImages,
}

fn should_restart(policy: RestartPolicy, phase: VmPhase) -> bool {
    match policy {
        RestartPolicy::Always => matches!(phase, VmPhase::Succeeded | VmPhase::Failed),
        RestartPolicy::OnFailure => phase == VmPhase::Failed,
        RestartPolicy::Never => false,
    }
}

fn delete(pod: &Pod) -> PodAction {
    PodAction::Delete {
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        grace: grace_floor(pod),
    }
}

/// The grace period to delete `pod` with when its own is below the floor (a pod made
/// before the floor was), so that the kubelet's confirmation is what removes it.
fn grace_floor(pod: &Pod) -> Option<u32> {
    let own = pod.spec.as_ref()?.termination_grace_period_seconds?;
    (own < runner_pod::MIN_GRACE_SECONDS)
        .then(|| u32::try_from(runner_pod::MIN_GRACE_SECONDS).unwrap_or(1))
}

impl PodDecision {
    /// Holds back a liveReload replacement while the recreation budget is spent: the live
    /// pod (one of `pods`) stays, and is what the status names. Whether there was one.
    pub fn hold_replacement(&mut self, pods: &[&Pod]) -> bool {
        let Some(i) = self
            .actions
            .iter()
            .position(|a| matches!(a, PodAction::Replace { .. }))
        else {
            return false;
        };
        let PodAction::Replace { name, .. } = self.actions.remove(i) else {
            return false;
        };
        let mut changes = ImageChanges::default();
        self.transitions.retain(|t| match t {
            PodTransition::Recreating { changes: c, .. } => {
                changes = c.clone();
                false
            }
            _ => true,
        });
        self.phase = pods
            .iter()
            .find(|p| p.name_any() == name)
            .map(|p| pod_phase(p))
            .or(self.phase);
        self.pod_name = Some(name);
        self.images = PodImages::Throttled(changes);
        true
    }
}

/// What every branch of the decision reads.
struct Inputs<'a> {
    vm: &'a VirtualMachine,
    images: &'a [ResolvedImage],
    now: &'a Time,
    desired_hash: Option<String>,
    /// A stale, extra or terminating pod exists: no pod may be created now.
    blocked: bool,
}

impl Inputs<'_> {
    /// Creates the pod of restart count `count` (when the images resolve and nothing
    /// blocks it).
    /// (`announce`: whether the create is news; the second half of a liveReload replacement
    /// was announced by `Recreating`.)
    fn create(&self, out: &mut PodDecision, count: i32, announce: bool) {
        out.restart_count = count;
        out.phase = Some(VmPhase::Pending);
        let Some(pod) = runner_pod::build(self.vm, self.images, count) else {
            return;
        };
        out.pod_name = Some(pod.name_any());
        if self.blocked {
            out.waiting = true;
            return;
        }
        if announce {
            out.transitions.push(PodTransition::Created {
                pod: pod.name_any(),
                images: self.images.to_vec(),
            });
        }
        out.actions.push(PodAction::Create(Box::new(pod)));
    }

    /// The VM has a live pod of its restart count.
    fn with_pod(&self, out: &mut PodDecision, pod: &Pod) {
        let policy = self.vm.spec.restart_policy;
        out.pod_name = Some(pod.name_any());
        let phase = pod_phase(pod);
        out.phase = Some(phase);
        if phase == VmPhase::Pending {
            out.starting = runner_pod::pod_starting(pod, self.now);
        }
        let finished = matches!(phase, VmPhase::Succeeded | VmPhase::Failed);
        if finished && should_restart(policy, phase) && self.desired_hash.is_some() {
            let next = restart_backoff::next_restart(out.crash_loop_count, Some(pod));
            if let Some(left) = next.wait_left(self.now) {
                // The finished pod stays until its restart may start.
                out.restart_wait = Some(left);
                return;
            }
            out.crash_loop_count = next.crash_loop_count;
            // The finished pod is deleted in this pass; creation waits for it.
            out.actions.push(delete(pod));
            out.transitions.push(PodTransition::Restarting {
                pod: Some(pod.name_any()),
                phase,
                policy,
            });
            out.restart_count += 1;
            out.phase = Some(VmPhase::Pending);
            out.waiting = true;
        } else if let Some(want) = self.desired_hash.as_deref()
            && pod_images_hash(pod) != Some(want)
            && !finished
        {
            // (A finished pod that is not replaced runs nothing: nothing to restart.)
            let changes = ImageChanges::between(pod, self.images);
            match runner_pod::build(self.vm, self.images, out.restart_count) {
                Some(new) if self.vm.spec.live_reload => {
                    out.transitions.push(PodTransition::Recreating {
                        old: pod.name_any(),
                        new: new.name_any(),
                        changes,
                    });
                    out.pod_name = Some(new.name_any());
                    out.phase = Some(VmPhase::Pending);
                    out.actions.push(PodAction::Replace {
                        name: pod.name_any(),
                        uid: pod.uid().unwrap_or_default(),
                        grace: grace_floor(pod),
                        new: Box::new(new),
                    });
                }
                _ => out.images = PodImages::RestartRequired(changes),
            }
        }
    }

    /// The VM has no pod, live or terminating: start one if its phase and policy say so.
    fn without_pod(&self, out: &mut PodDecision, previous: Option<VmPhase>) {
        let policy = self.vm.spec.restart_policy;
        // The status names the pod it saw last; pod names derive from (uid, restart count,
        // images), so a liveReload VM whose last pod ran other images had it replaced.
        let replaced = self.vm.spec.live_reload
            && self.desired_hash.as_deref().is_some_and(|hash| {
                out.pod_name.as_ref().is_some_and(|last| {
                    *last != runner_pod::pod_name(self.vm, out.restart_count, hash)
                })
            });
        let phase = match previous {
            Some(VmPhase::Running) if replaced => VmPhase::Pending,
            // The pod of a running VM vanished.
            Some(VmPhase::Running) => VmPhase::Failed,
            Some(p) => p,
            None => VmPhase::Pending,
        };
        out.phase = Some(phase);
        if phase == VmPhase::Pending {
            self.create(out, out.restart_count, !replaced);
        } else if should_restart(policy, phase) {
            out.crash_loop_count =
                restart_backoff::next_restart(out.crash_loop_count, None).crash_loop_count;
            out.transitions.push(PodTransition::Restarting {
                pod: None,
                phase,
                policy,
            });
            self.create(out, out.restart_count + 1, true);
        } else {
            out.images = PodImages::NoPod;
        }
    }
}

/// Decides from the VM, its previous status, its pods and its resolved images.
#[must_use]
pub fn decide(
    vm: &VirtualMachine,
    prev: &VirtualMachineStatus,
    pods: &[&Pod],
    images: &[ResolvedImage],
    now: &Time,
) -> PodDecision {
    let restart_count = prev.restart_count;
    let desired_hash = runner_pod::images_hash(images);
    let mut out = PodDecision {
        phase: prev.phase,
        pod_name: prev.pod_name.clone(),
        restart_count,
        crash_loop_count: prev.crash_loop_count,
        restart_wait: None,
        actions: Vec::new(),
        transitions: Vec::new(),
        waiting: false,
        starting: None,
        images: PodImages::Current,
    };

    let (live, terminating): (Vec<&Pod>, Vec<&Pod>) = pods
        .iter()
        .copied()
        .partition(|p| p.metadata.deletion_timestamp.is_none());
    let (mut current, stale): (Vec<&Pod>, Vec<&Pod>) = live
        .into_iter()
        .partition(|p| pod_restart_count(p) == Some(restart_count));
    // More than one pod of this restart count cannot come from this operator; keep the one
    // with the wanted images (or the first by name) and delete the rest.
    current.sort_by_key(|p| (pod_images_hash(p) != desired_hash.as_deref(), p.name_any()));
    let extra = if current.len() > 1 {
        current.split_off(1)
    } else {
        Vec::new()
    };
    out.actions
        .extend(stale.iter().chain(&extra).map(|p| delete(p)));
    let inputs = Inputs {
        vm,
        images,
        now,
        blocked: !terminating.is_empty() || !stale.is_empty() || !extra.is_empty(),
        desired_hash,
    };
    match current.first() {
        Some(pod) => inputs.with_pod(&mut out, pod),
        None if !terminating.is_empty() => out.waiting = true,
        None => inputs.without_pod(&mut out, prev.phase),
    }
    // Unresolved images and no pod of this restart count: nothing can start yet.
    if inputs.desired_hash.is_none() && current.is_empty() {
        out.phase = Some(VmPhase::Pending);
    }
    out
}
