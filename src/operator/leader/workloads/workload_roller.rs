//! The leader's live reload of workloads. For every pod labelled
//! `imagemap.dev/live-reload: "true"` it resolves the pod's containers as admission would map
//! them now (the rules in force, the digests verified) and compares them with what the pod
//! runs (`workload_reload::changes`). A stale pod of a ReplicaSet (alone or under its
//! Deployment), StatefulSet or DaemonSet is evicted when its workload's roll takes the next
//! step (`workload_reload::roll`), within the recreation budget; the workload's controller
//! creates the replacement and admission maps it. A stale pod nothing would recreate is told
//! `RestartRequired` and stays; either VirtualMachine kind's pods are left to their own live
//! reload. No spec is ever written.
//!
//! What it compares is what runs, so a pod current before the operator restarted is current
//! after it, and a roll cut by a restart goes on from where it is.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use serde_json::json;

use crate::core::excerpt::excerpt;
use crate::core::mapping_status::ReloadCount;
use crate::core::namespaced_name::NamespacedName;
use crate::core::notice::Notice;
use crate::core::rules::{MappingKey, RuleSet};
use crate::core::stale_slot::StaleSlot;
use crate::core::workload_reload::live_pod::{LivePod, UNMAPPED_REPLACEMENT_ANNOTATION};
use crate::core::workload_reload::roll::{self, RollMemory, RollPod, RollStep, Wait};
use crate::core::workload_reload::workload_status::WorkloadStatus;
use crate::core::workload_reload::{PodOwner, WorkloadKey, WorkloadKind};
use crate::operator::leader::mapping_statuses::pod_counts::PodCounts;
use crate::operator::leader::recreation_budget::RecreationBudget;
use crate::operator::leader::workloads::workload_state::WorkloadState;
use crate::operator::observe::metrics::Metrics;
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::writes::event_recorder::EventRecorder;
use crate::operator::writes::eviction::{Eviction, evict};
use crate::operator::writes::requests::patch_pod_metadata;

/// How often everything is looked at again while a roll waits (a replacement's
/// `minReadySeconds` passing, a backoff ending), and when nothing waits.
const WAITING: Duration = Duration::from_secs(1);
const IDLE: Duration = Duration::from_secs(30);
/// Backoff after a budget's 429 or a failed eviction: from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));
/// How long a refused eviction (two budgets over a pod) waits before it is tried again.
const REFUSED: Duration = Duration::from_mins(5);

/// What the roller reads, evicts with and tells through.
pub struct WorkloadRoller {
    /// The leader's (fenced) client that kube does not retry.
    pub evictions: Client,
    pub state: Arc<WorkloadState>,
    /// What admission maps the replacements from: what their pods are judged by.
    pub admission: AdmissionSources,
    pub recorder: EventRecorder,
    pub budget: Arc<RecreationBudget>,
    pub metrics: Arc<Metrics>,
    /// The mapping statuses' pod counts: pods not mapped at admission, waiting, rolling.
    pub counts: Arc<PodCounts>,
    /// What it judges from, listed once: the rules, the namespaces' labels, the digests,
    /// the pods and workloads. Judged before, every mapped pod would look stale.
    pub loaded: Vec<Listed>,
}

/// What the roller remembers of a workload while it leads.
#[derive(Debug, Default)]
struct Memory {
    roll: RollMemory,
    /// No eviction before then (a budget's 429, a refusal, a failure).
    not_before: Option<Instant>,
    backoff: Duration,
    /// The last Event told, so that each is told once.
    told: Option<(&'static str, String)>,
}

/// A labelled pod of a workload, what changed, and the mappings whose rules changed it.
type Group = Vec<(LivePod, Vec<StaleSlot>, BTreeSet<MappingKey>)>;

impl WorkloadRoller {
    /// Each labelled pod's changes, grouped by the workload that rolls it; pods nothing
    /// would recreate are told here.
    async fn group(
        &self,
        rules: &RuleSet,
        told: &mut HashMap<String, (&'static str, String)>,
        counted: &mut Vec<(NamespacedName, ReloadCount)>,
    ) -> BTreeMap<WorkloadKey, Group> {
        let mut groups: BTreeMap<WorkloadKey, Group> = BTreeMap::new();
        let mut present = HashSet::new();
        for (key, pod) in self.state.pods() {
            present.insert(pod.uid.clone());
            let (found, mappings) = self
                .admission
                .view_with(rules, |admission| pod.stale(admission, &key.namespace));
            if !pod.mapped && !mappings.is_empty() {
                let unmapped = ReloadCount {
                    unmapped: mappings.clone(),
                    ..ReloadCount::default()
                };
                counted.push((key.clone(), unmapped));
            }
            let owner = match &pod.owner {
                PodOwner::Workload(kind, name) => {
                    let workload = self.workload_of(*kind, &key.namespace, name);
                    groups
                        .entry(workload)
                        .or_default()
                        .push((pod, found, mappings));
                    continue;
                }
                PodOwner::VirtualMachine => continue,
                PodOwner::Other { kind, name } => format!("its owner {kind} {name}"),
                PodOwner::None => "nothing (it has no controller)".to_string(),
            };
            if found.is_empty() || pod.deleting {
                told.remove(&pod.uid);
                continue;
            }
            let event = roll::restart_required(&owner, &found);
            self.tell_pod(&key, &pod, &event, told).await;
        }
        told.retain(|uid, _| present.contains(uid));
        groups
    }

    /// The workload whose roll a pod of `kind` `name` belongs to: a ReplicaSet's Deployment
    /// when it has one.
    fn workload_of(&self, kind: WorkloadKind, namespace: &str, name: &str) -> WorkloadKey {
        let key = NamespacedName::new(namespace, name);
        if kind == WorkloadKind::ReplicaSet
            && let Some(deployment) = self.state.status(kind, &key).and_then(|s| s.deployment)
        {
            return WorkloadKey {
                kind: WorkloadKind::Deployment,
                namespace: namespace.to_string(),
                name: deployment,
            };
        }
        WorkloadKey {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// Tells `event` on the pod, once.
    async fn tell_pod(
        &self,
        key: &NamespacedName,
        pod: &LivePod,
        event: &Notice,
        told: &mut HashMap<String, (&'static str, String)>,
    ) {
        let said = (event.reason, event.message.clone());
        if told.get(&pod.uid) == Some(&said) {
            return;
        }
        told.insert(pod.uid.clone(), said);
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(key.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectReference::default()
        };
        self.recorder.note(regarding, event).await;
    }

    /// Marks a replacement that came back unmapped on the pod itself, so that no later
    /// leader evicts it either (what this one remembers goes with it).
    async fn mark_unmapped(&self, key: &NamespacedName, pod: &LivePod) {
        let api: Api<Pod> = Api::namespaced(self.evictions.clone(), &key.namespace);
        let marker = json!({"annotations": {UNMAPPED_REPLACEMENT_ANNOTATION: "true"}});
        if let Err(e) = patch_pod_metadata(&api, &pod.name, &pod.uid, &marker).await {
            tracing::warn!(pod = %key, error = %excerpt(&e.to_string()), "could not mark a replacement that came back unmapped: a new leader would evict it once more");
        }
    }

    /// Tells `event` on the workload, once.
    async fn tell(
        &self,
        workload: &WorkloadKey,
        status: Option<&WorkloadStatus>,
        memory: &mut Memory,
        event: &Notice,
    ) {
        let said = (event.reason, event.message.clone());
        if memory.told.as_ref() == Some(&said) {
            return;
        }
        memory.told = Some(said);
        let regarding = ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some(workload.kind.name().into()),
            namespace: Some(workload.namespace.clone()),
            name: Some(workload.name.clone()),
            uid: status.map(|s| s.uid.clone()),
            ..ObjectReference::default()
        };
        self.recorder.note(regarding, event).await;
    }

    /// Takes the next step of `workload`'s roll; whether it waits (to be looked at again
    /// soon).
    async fn roll(
        &self,
        workload: &WorkloadKey,
        group: &Group,
        memory: &mut Memory,
        told: &mut HashMap<String, (&'static str, String)>,
    ) -> bool {
        let status = self.state.status(
            workload.kind,
            &NamespacedName::new(&workload.namespace, &workload.name),
        );
        let pods: Vec<RollPod<'_>> = group
            .iter()
            .map(|(pod, changes, _)| RollPod { pod, changes })
            .collect();
        let step = roll::step(status.as_ref(), &pods, &mut memory.roll, Timestamp::now());
        let left = roll::left(&pods, &memory.roll);
        match step {
            RollStep::Current => {
                if memory.roll.replaced > 0 {
                    let event = roll::finished(memory.roll.replaced);
                    tracing::info!(%workload, replaced = memory.roll.replaced, "live reload finished");
                    self.tell(workload, status.as_ref(), memory, &event).await;
                }
                memory.roll.replaced = 0;
                false
            }
            RollStep::Wait(Wait::Stalled { evicted }) => {
                let event = roll::stalled(&evicted, left);
                self.tell(workload, status.as_ref(), memory, &event).await;
                true
            }
            RollStep::Wait(Wait::UnmappedReplacement { pod }) => {
                if let Some((p, changes, _)) = group.iter().find(|(p, _, _)| p.name == pod) {
                    let key = NamespacedName::new(&workload.namespace, &p.name);
                    if !p.unmapped_replacement {
                        self.mark_unmapped(&key, p).await;
                    }
                    self.tell_pod(&key, p, &roll::not_mapped(changes), told)
                        .await;
                }
                false
            }
            RollStep::Wait(_) => true,
            RollStep::Evict { name, uid } => {
                if memory.not_before.is_some_and(|t| Instant::now() < t) {
                    return true;
                }
                if let Err(wait) = self.budget.take(&workload.namespace) {
                    tracing::debug!(%workload, ?wait, "recreation budget spent; the roll waits");
                    return true;
                }
                self.evict(
                    workload,
                    status.as_ref(),
                    group,
                    &pods,
                    memory,
                    &name,
                    &uid,
                    left,
                )
                .await;
                true
            }
        }
    }

    #[allow(clippy::too_many_arguments)] // One step's evidence, each part read once.
    async fn evict(
        &self,
        workload: &WorkloadKey,
        status: Option<&WorkloadStatus>,
        group: &Group,
        pods: &[RollPod<'_>],
        memory: &mut Memory,
        name: &str,
        uid: &str,
        left: usize,
    ) {
        let backoff = |memory: &mut Memory| {
            memory.backoff = (memory.backoff * 2).clamp(BACKOFF.0, BACKOFF.1);
            memory.not_before = Some(Instant::now() + memory.backoff);
        };
        match evict(&self.evictions, &workload.namespace, name, uid).await {
            Eviction::Done => {
                self.metrics.pod_evicted();
                memory.roll.evicting(name, uid, pods, Timestamp::now());
                memory.backoff = Duration::ZERO;
                memory.not_before = None;
                tracing::info!(%workload, pod = %name, left, "live reload evicted a pod");
                if memory.roll.replaced == 1 {
                    let changes = group
                        .iter()
                        .find(|(p, _, _)| p.uid == uid)
                        .map(|(_, c, _)| c.as_slice())
                        .unwrap_or_default();
                    let event = roll::started(left, changes);
                    self.tell(workload, status, memory, &event).await;
                }
            }
            Eviction::Gone => {}
            Eviction::Budget(cause) => {
                backoff(memory);
                let event = roll::budget_holds(name, &cause, left);
                self.tell(workload, status, memory, &event).await;
            }
            Eviction::Refused(cause) => {
                memory.not_before = Some(Instant::now() + REFUSED);
                let event = roll::refused(name, &cause, left);
                self.tell(workload, status, memory, &event).await;
            }
            Eviction::Failed(error) => {
                backoff(memory);
                tracing::warn!(%workload, pod = %name, %error, "live reload could not evict a pod");
            }
        }
    }
}

/// Counts the pods of `workload` that wait for its roll, and the workload as rolling.
fn count_waiting(
    workload: &WorkloadKey,
    group: &Group,
    rolling: bool,
    counted: &mut Vec<(NamespacedName, ReloadCount)>,
) {
    let name = workload.to_string();
    for (pod, _, mappings) in group.iter().filter(|(_, _, m)| !m.is_empty()) {
        let count = ReloadCount {
            unmapped: BTreeSet::new(),
            waiting: mappings.clone(),
            rolling: rolling.then(|| (name.clone(), mappings.clone())),
        };
        counted.push((NamespacedName::new(&workload.namespace, &pod.name), count));
    }
}

/// One count per pod: what each part said of it, together.
fn merged(counted: Vec<(NamespacedName, ReloadCount)>) -> Vec<(NamespacedName, ReloadCount)> {
    let mut by_pod: BTreeMap<NamespacedName, ReloadCount> = BTreeMap::new();
    for (pod, count) in counted {
        let into = by_pod.entry(pod).or_default();
        into.unmapped.extend(count.unmapped);
        into.waiting.extend(count.waiting);
        if count.rolling.is_some() {
            into.rolling = count.rolling;
        }
    }
    by_pod.into_iter().collect()
}

/// Rolls workloads until the future is dropped.
pub async fn run(roller: WorkloadRoller) {
    for listed in &roller.loaded {
        listed.wait().await;
    }
    let mut rules = roller.admission.rules.changes();
    let mut digests = roller.admission.digests.changes();
    let mut memory: HashMap<WorkloadKey, Memory> = HashMap::new();
    let mut told: HashMap<String, (&'static str, String)> = HashMap::new();
    loop {
        let current = roller.admission.rules.current();
        let mut counted = Vec::new();
        let groups = roller.group(&current, &mut told, &mut counted).await;
        // What is remembered of a workload goes with its last labelled pod.
        memory.retain(|key, _| groups.contains_key(key));
        let (mut waiting, mut rolls) = (false, 0);
        for (workload, group) in &groups {
            let remembered = memory.entry(workload.clone()).or_default();
            waiting |= roller.roll(workload, group, remembered, &mut told).await;
            // Rolling: pods left to roll (held or not), or an eviction under way.
            let rolling = remembered.roll.evicted.is_some()
                || group.iter().any(|(pod, changes, _)| {
                    !changes.is_empty() && !remembered.roll.unmapped.contains(&pod.uid)
                });
            rolls += usize::from(rolling);
            count_waiting(workload, group, rolling, &mut counted);
        }
        roller.metrics.set_rolls(rolls);
        roller.counts.reloads(merged(counted));
        let again = if waiting { WAITING } else { IDLE };
        tokio::select! {
            () = roller.state.changed.notified() => {}
            _ = rules.changed() => {}
            _ = digests.changed() => {}
            () = tokio::time::sleep(again) => {}
        }
    }
}
