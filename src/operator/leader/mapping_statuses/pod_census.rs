//! The leader's passes over the pods, for the mapping statuses' pod counts and the tags
//! pods follow — no watch of pods: a pass costs the API server one paged LIST per scope
//! ([`PAGE`] pods a page, one page in memory at a time), not an event per pod. Per
//! namespace it counts:
//!
//! - the pods admission mapped (labelled `imagemap.dev/mapped=true`, metadata only): each
//!   pod's recorded originals resolved by the rules in force through the one admission
//!   view (`admission::pod_follows`) — the rules that decide its containers (`affectedPods`)
//!   and the followed tags among the results, which the leader keeps checked for the
//!   namespace's pods ([`Follower::PodsIn`]) so that later pods are pinned;
//! - the pods admission did not map — admitted while no webhook answered, or before a rule
//!   existed — that the rules would change (`unmappedPods`), leaving out those live reload
//!   watches (labelled `imagemap.dev/live-reload`), NeonVM's runner pods (their labels do
//!   not last; NeonVM's live reload finds them) and imagemap's own VMs' pods (their
//!   controller maps them).
//!
//! What is kept is a count per namespace, mapping and rule (`PodTally`), whatever the pods
//! number. A pass of every namespace runs at start and every `--pod-count-seconds`; after a
//! change of rules, the namespaces it reaches are counted again, each at most once per
//! `--pod-scan-namespace-seconds` (a minute by default): a dev loop that changes a rule
//! every build does not list the cluster each time. A pass of every namespace also answers
//! the replicas' asks ([`AskedTags::passed`]). A LIST that fails leaves the last counts.
//! Namespaces the webhook never sees are skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, ObjectList};
use kube::core::PartialObjectMeta;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;

use crate::core::admission::pod_follows::pod_follows;
use crate::core::admission::scope::Excluded;
use crate::core::conditions;
use crate::core::excerpt::excerpt;
use crate::core::mapping_status::{NamespacePods, PassScope};
use crate::core::pod::records::{self, LIVE_RELOAD_LABEL, MAPPED, MAPPED_LABEL};
use crate::core::rules::RuleSet;
use crate::core::rules::change_reach::ChangeReach;
use crate::core::workload_reload::live_pod::LivePod;
use crate::operator::leader::followed_tags::asked_tags::AskedTags;
use crate::operator::leader::followed_tags::{FollowedTags, Follower};
use crate::operator::leader::mapping_statuses::pod_counts::PodCounts;
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::replica::digests::followed::Followed;
use crate::operator::replica::watches::caches::namespace_labels;
use crate::operator::watch_toolkit::listed::Listed;

/// Most pods a page of a LIST holds.
pub const PAGE: u32 = 500;

/// What the census lists, judges with, counts into and follows tags in.
pub struct PodCensus {
    pub client: Client,
    /// The namespaces the operator acts in (empty: all).
    pub namespaces: Vec<String>,
    /// The namespaces the webhook never sees.
    pub excluded: Excluded,
    /// How often every namespace is counted.
    pub every: Duration,
    /// How often one namespace is counted at most after changes of rules.
    pub per_namespace: Duration,
    /// What admission maps pods from: what the pods found are judged by.
    pub admission: AdmissionSources,
    pub counts: Arc<PodCounts>,
    pub followed: Arc<FollowedTags>,
    /// The replicas' asks, answered by each pass of every namespace.
    pub asked: Arc<AskedTags>,
    /// What it judges from, listed once: the rules, the namespaces' labels, the digests.
    pub loaded: Vec<Listed>,
}

/// The label selector of the pods admission did not map that a pass judges.
#[must_use]
fn unmapped_selector() -> String {
    format!(
        "{MAPPED_LABEL}!={MAPPED},{LIVE_RELOAD_LABEL}!=true,!{},!{}",
        crate::core::neonvm::VM_NAME_LABEL,
        crate::core::runner_pod::VM_LABEL
    )
}

/// What one pass found, per namespace.
#[derive(Default)]
struct Found {
    pods: HashMap<String, NamespacePods>,
    follows: HashMap<String, BTreeSet<Followed>>,
    /// Pages and pods listed.
    pages: usize,
    listed: usize,
}

/// Lists every page of `list` from `params`, handing each page's items to `each`: how many
/// pages.
async fn each_page<T, L, F>(
    mut list: L,
    mut params: ListParams,
    mut each: impl FnMut(Vec<T>),
) -> Result<usize, kube::Error>
where
    T: Clone,
    L: FnMut(ListParams) -> F,
    F: Future<Output = Result<ObjectList<T>, kube::Error>>,
{
    let mut pages = 0;
    loop {
        let page = list(params.clone()).await?;
        pages += 1;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        each(page.items);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(pages),
        }
    }
}

impl PodCensus {
    /// Counts a pod admission mapped, and the tags it follows.
    fn count_mapped(&self, rules: &RuleSet, pod: &PartialObjectMeta<Pod>, found: &mut Found) {
        let Some(namespace) = pod.metadata.namespace.as_deref() else {
            return;
        };
        if self.excluded.contains(namespace) {
            return;
        }
        let none = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&none);
        let originals = records::originals(pod.metadata.annotations.as_ref().unwrap_or(&none));
        let resolved = self.admission.view_with(rules, |admission| {
            pod_follows(admission, namespace, labels, &originals)
        });
        let counted = found.pods.entry(namespace.to_string()).or_default();
        counted.add_mapped(&resolved.rules);
        if !resolved.follows.is_empty() {
            let follows = found.follows.entry(namespace.to_string()).or_default();
            for f in resolved.follows {
                follows.insert(Followed::of(&f.reference, f.rule.as_ref(), namespace));
            }
        }
    }

    /// Counts a pod admission did not map, when the rules would change it.
    fn count_unmapped(&self, rules: &RuleSet, pod: &Pod, found: &mut Found) {
        let Some(namespace) = pod.metadata.namespace.as_deref() else {
            return;
        };
        if self.excluded.contains(namespace) {
            return;
        }
        let Some(live) = LivePod::read(pod) else {
            return;
        };
        let (_, mappings) = self
            .admission
            .view_with(rules, |admission| live.stale(admission, namespace));
        if !mappings.is_empty() {
            found
                .pods
                .entry(namespace.to_string())
                .or_default()
                .add_unmapped(&mappings);
        }
    }

    /// Counts `scope`'s pods under `rules`; `None` when a LIST failed.
    async fn count(&self, scope: PassScope<'_>, rules: &RuleSet) -> Option<Found> {
        let lists: Vec<Option<&str>> = match scope {
            PassScope::Namespace(ns) => vec![Some(ns)],
            PassScope::All if self.namespaces.is_empty() => vec![None],
            PassScope::All => self.namespaces.iter().map(|ns| Some(ns.as_str())).collect(),
        };
        let mut found = Found::default();
        for list in lists {
            let api: Api<Pod> = match list {
                Some(ns) => Api::namespaced(self.client.clone(), ns),
                None => Api::all(self.client.clone()),
            };
            let mapped = ListParams::default()
                .labels(&format!("{MAPPED_LABEL}={MAPPED}"))
                .limit(PAGE);
            let mut listed = 0;
            let pages = each_page(
                |params| {
                    let api = api.clone();
                    async move { api.list_metadata(&params).await }
                },
                mapped,
                |pods| {
                    listed += pods.len();
                    for pod in &pods {
                        self.count_mapped(rules, pod, &mut found);
                    }
                },
            )
            .await;
            let unmapped = ListParams::default()
                .labels(&unmapped_selector())
                .limit(PAGE);
            let pages = match pages {
                Ok(mapped_pages) => each_page(
                    |params| {
                        let api = api.clone();
                        async move { api.list(&params).await }
                    },
                    unmapped,
                    |pods| {
                        listed += pods.len();
                        for pod in &pods {
                            self.count_unmapped(rules, pod, &mut found);
                        }
                    },
                )
                .await
                .map(|pages| pages + mapped_pages),
                Err(e) => Err(e),
            };
            match pages {
                Ok(pages) => {
                    found.pages += pages;
                    found.listed += listed;
                }
                Err(e) => {
                    // Counted again at the next pass; what the last one found stays.
                    tracing::warn!(namespace = ?list, error = %excerpt(&e.to_string()), "counting the pods");
                    return None;
                }
            }
        }
        Some(found)
    }

    /// The namespaces in scope, with their labels.
    fn namespaces(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let names: Vec<String> = if self.namespaces.is_empty() {
            self.admission
                .namespaces
                .state()
                .iter()
                .map(|ns| ns.name_any())
                .collect()
        } else {
            self.namespaces.clone()
        };
        names
            .into_iter()
            .filter(|ns| !self.excluded.contains(ns))
            .map(|ns| {
                let labels = namespace_labels(&self.admission.namespaces, &ns);
                (ns, labels)
            })
            .collect()
    }
}

/// What the census follows tags for: the namespaces whose pods follow some.
#[derive(Default)]
struct Following(HashSet<String>);

impl Following {
    /// Puts in force the tags `found` says the pods of `scope` follow.
    fn follow(&mut self, census: &PodCensus, scope: PassScope<'_>, found: &Found) {
        let now = std::time::Instant::now();
        let gone: Vec<String> = self
            .0
            .iter()
            .filter(|ns| match scope {
                PassScope::All => !found.follows.contains_key(*ns),
                PassScope::Namespace(only) => *ns == only && !found.follows.contains_key(*ns),
            })
            .cloned()
            .collect();
        for ns in gone {
            census
                .followed
                .forget_follower(&Follower::PodsIn(ns.clone()));
            self.0.remove(&ns);
        }
        for (ns, follows) in &found.follows {
            if let PassScope::Namespace(only) = scope
                && ns != only
            {
                continue;
            }
            census.followed.follow_as(
                &Follower::PodsIn(ns.clone()),
                follows.iter().cloned().collect(),
                now,
            );
            self.0.insert(ns.clone());
        }
    }
}

/// One pass over `scope`: counted, followed and, over every namespace, the asks answered.
async fn pass(census: &PodCensus, following: &mut Following, scope: PassScope<'_>) {
    let began = std::time::Instant::now();
    let rules = census.admission.rules.current();
    let Some(found) = census.count(scope, &rules).await else {
        return;
    };
    tracing::debug!(namespace = ?scope, pages = found.pages, pods = found.listed, namespaces = found.pods.len(), "counted the pods");
    following.follow(census, scope, &found);
    if scope == PassScope::All {
        let used: HashSet<Followed> = found.follows.values().flatten().cloned().collect();
        census.asked.passed(began, &used);
    }
    census.counts.counted(scope, found.pods, conditions::now());
}

/// Counts until the future is dropped.
pub async fn run(census: PodCensus) {
    for listed in &census.loaded {
        listed.wait().await;
    }
    let mut following = Following::default();
    let mut rules = census.admission.rules.changes();
    let mut counted_under = census.admission.rules.current();
    let mut last_pass: HashMap<String, Instant> = HashMap::new();
    let mut pending: BTreeSet<String> = BTreeSet::new();
    let mut next_full = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_full {
            pass(&census, &mut following, PassScope::All).await;
            let done = Instant::now();
            for ns in census.namespaces().into_keys() {
                last_pass.insert(ns, done);
            }
            pending.clear();
            next_full = done + census.every;
        }
        // The namespaces whose interval is up.
        let due: Vec<String> = pending
            .iter()
            .filter(|ns| {
                last_pass
                    .get(*ns)
                    .is_none_or(|at| *at + census.per_namespace <= now)
            })
            .cloned()
            .collect();
        for ns in due {
            pending.remove(&ns);
            pass(&census, &mut following, PassScope::Namespace(&ns)).await;
            last_pass.insert(ns, Instant::now());
        }
        let wake = pending
            .iter()
            .filter_map(|ns| last_pass.get(ns).map(|at| *at + census.per_namespace))
            .min()
            .map_or(next_full, |at| at.min(next_full));
        tokio::select! {
            Ok(()) = rules.changed() => {
                let current = census.admission.rules.current();
                let reach = ChangeReach::of_change(&counted_under, &current);
                counted_under = current;
                for (ns, labels) in census.namespaces() {
                    if reach.reaches(&ns, &labels) {
                        pending.insert(ns);
                    }
                }
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
