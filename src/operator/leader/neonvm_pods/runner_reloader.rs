//! The leader's live reload of NeonVM runner pods. For every NeonVM VM it resolves the VM's
//! slots as admission would map them (the rules in force, the digests verified), compares them
//! with what the runner pod runs, and takes the verdict of `neonvm::reload`: a live-reload VM
//! under `restartPolicy: Always` gets its pod deleted (with a UID precondition and the pod's
//! own grace period, within the recreation budget) and NeonVM creates the next, which
//! admission maps; the others are told restart required; a replacement that came back
//! unmapped is told and left. It looks again when NeonVM's objects, the rules or the digests
//! change. The tags the VMs follow are followed for them, so that a moved tag reloads them.
//!
//! What it compares is what runs, so a pod that was current before the operator restarted
//! is current after it, and a pod created while the webhook was down is found (and, for a
//! live-reload VM, replaced once).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::{Api, Client};

use crate::core::namespaced_name::NamespacedName;
use crate::core::neonvm::NeonVm;
use crate::core::neonvm::reload::{self, Replaced, Verdict};
use crate::operator::acts_in::ActsIn;
use crate::operator::leader::followed_tags::{FollowedTags, Follower};
use crate::operator::leader::mapping_statuses::status_due::StatusDue;
use crate::operator::leader::recreation_budget::RecreationBudget;
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::replica::digests::followed::Followed;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::writes::event_recorder::EventRecorder;
use crate::operator::writes::requests::{PodDeletion, delete_pod};

/// How often every VM is looked at again when nothing told of a change (the recreation
/// budget freeing up, a re-list).
const LOOK_AGAIN: Duration = Duration::from_secs(10);

/// What the reloader reads, deletes with and tells through.
pub struct RunnerReloader {
    /// The leader's (fenced) client.
    pub client: Client,
    /// What admission maps runner pods from (NeonVM's VMs and pods among it): what the
    /// VMs are judged by.
    pub admission: AdmissionSources,
    pub followed: Arc<FollowedTags>,
    pub recorder: EventRecorder,
    pub budget: Arc<RecreationBudget>,
    /// The mapping statuses count NeonVM's VMs: told when they change.
    pub status_due: Arc<StatusDue>,
    /// `--neonvm-default-runner-image`: what a VM without `runnerImage` runs.
    pub default_runner: Option<String>,
    pub acts_in: ActsIn,
    /// What it judges from, listed once: the rules, the namespaces' labels, the digests.
    /// Judged before, every mapped pod would look stale.
    pub loaded: Vec<Listed>,
}

/// What the reloader remembers of a VM while it leads.
#[derive(Debug, Default)]
struct Memory {
    replaced: Option<Replaced>,
    /// The last Event told, so that each is told once.
    told: Option<(String, String)>,
    /// Waiting for a migration (said once).
    waiting: bool,
}

impl RunnerReloader {
    /// What the rules make of each of `vm`'s slots now (as admission maps them), and the
    /// tags they follow.
    fn resolved(&self, vm: &NeonVm) -> (BTreeMap<String, String>, Vec<Followed>) {
        let slots = vm.slots(self.default_runner.as_deref());
        let asked = slots
            .iter()
            .map(|s| (s.slot.as_str(), s.requested.as_str()));
        let outcomes = self
            .admission
            .view(|admission| admission.slots(&vm.namespace, &vm.labels, asked));
        let mut images = BTreeMap::new();
        let mut follows = Vec::new();
        for outcome in outcomes {
            let resolution = &outcome.resolution;
            if let (true, Ok(reference)) = (resolution.follow_tag, &resolution.outcome) {
                follows.push(Followed::of(
                    reference,
                    resolution.rule.as_ref(),
                    &vm.namespace,
                ));
            }
            images.insert(outcome.slot, outcome.image.unwrap_or(outcome.requested));
        }
        (images, follows)
    }

    /// Looks at one VM and acts on its verdict.
    async fn look(&self, vm: &NeonVm, memory: &mut Memory) {
        let key = NamespacedName::new(&vm.namespace, &vm.name);
        let (resolved, follows) = self.resolved(vm);
        self.followed
            .follow_as(&Follower::NeonVm(key.clone()), follows, Instant::now());
        let Some(pod) = self.admission.neonvm.runner_pod(vm) else {
            return;
        };
        let seen = reload::Pod {
            uid: &pod.uid,
            images: &pod.images,
            deleting: pod.deleting,
        };
        let migrating = self.admission.neonvm.migration_under_way(vm);
        let verdict = reload::verdict(
            vm,
            Some(seen),
            &resolved,
            migrating,
            memory.replaced.as_ref(),
        );
        if let Verdict::Migrating(_) = &verdict {
            if !std::mem::replace(&mut memory.waiting, true) {
                tracing::info!(vm = %key, pod = %pod.name, "live reload waits: a migration is under way");
            }
        } else {
            memory.waiting = false;
        }
        if verdict == Verdict::Current {
            // Current again: what was replaced or told is over, and told again if it comes back.
            memory.replaced = None;
            memory.told = None;
        }
        if let Verdict::Replace(_) = &verdict {
            if let Err(wait) = self.budget.take(&vm.namespace) {
                tracing::info!(vm = %key, ?wait, "recreation budget spent; the runner pod waits");
                return;
            }
            if !self.delete(&vm.namespace, &pod.name, &pod.uid).await {
                return;
            }
            memory.replaced = Some(Replaced {
                pod_uid: pod.uid.clone(),
                expected: resolved,
            });
        }
        let Some(event) = reload::event(&verdict, &pod.name) else {
            return;
        };
        let said = (event.reason.to_string(), event.message.clone());
        if memory.told.as_ref() == Some(&said) {
            return;
        }
        memory.told = Some(said);
        self.recorder.note(regarding(vm), &event).await;
    }

    /// Deletes the runner pod `name` if it is still `uid`, with its own grace period;
    /// whether it went.
    async fn delete(&self, namespace: &str, name: &str, uid: &str) -> bool {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match delete_pod(&pods, name, uid, None).await {
            Ok(PodDeletion::Gone | PodDeletion::Terminating) => true,
            Ok(PodDeletion::NotFound | PodDeletion::Replaced) => false,
            Err(e) => {
                tracing::warn!(pod = %name, error = %crate::core::excerpt::excerpt(&e.to_string()), "could not delete a runner pod for live reload");
                false
            }
        }
    }
}

/// The NeonVM VM, for an Event.
fn regarding(vm: &NeonVm) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{}/v1", crate::core::neonvm::GROUP)),
        kind: Some("VirtualMachine".into()),
        namespace: Some(vm.namespace.clone()),
        name: Some(vm.name.clone()),
        uid: Some(vm.uid.clone()),
        ..ObjectReference::default()
    }
}

/// Reloads runner pods until the future is dropped.
pub async fn run(reloader: RunnerReloader) {
    for listed in &reloader.loaded {
        listed.wait().await;
    }
    let mut rules = reloader.admission.rules.changes();
    let mut digests = reloader.admission.digests.changes();
    let mut memory: HashMap<NamespacedName, Memory> = HashMap::new();
    loop {
        let vms = reloader.admission.neonvm.vms();
        let present: std::collections::HashSet<NamespacedName> = vms
            .iter()
            .map(|vm| NamespacedName::new(&vm.namespace, &vm.name))
            .collect();
        // What the rooms remember of a VM goes with it.
        memory.retain(|key, _| {
            let keep = present.contains(key);
            if !keep {
                reloader
                    .followed
                    .forget_follower(&Follower::NeonVm(key.clone()));
            }
            keep
        });
        for vm in vms
            .iter()
            .filter(|vm| reloader.acts_in.contains(&vm.namespace))
        {
            let key = NamespacedName::new(&vm.namespace, &vm.name);
            reloader.look(vm, memory.entry(key).or_default()).await;
        }
        tokio::select! {
            () = reloader.admission.neonvm.changed.notified() => reloader.status_due.neonvm(),
            _ = rules.changed() => {}
            _ = digests.changed() => {}
            () = tokio::time::sleep(LOOK_AGAIN) => {}
        }
    }
}
