//! Finds the pods admission did not map — admitted while no webhook answered, or before a
//! rule existed — that the rules in force would change, for the mapping statuses'
//! `unmappedPods`. A paged LIST ([`PAGE`] pods a page; one page in memory at a time) of the
//! pods without the mapped label, leaving out those live reload watches (labelled
//! `imagemap.dev/live-reload`), NeonVM's runner pods (their labels do not last; NeonVM's live
//! reload finds them) and imagemap's own VMs' pods (their controller maps them). It runs at
//! start, every [`EVERY`], and after a change of rules in the namespaces the changed rules
//! reach, at most once a minute for each (`PodScanner::per_namespace`): a dev loop that
//! changes a rule every build does not list the cluster each time. Namespaces the webhook
//! never sees are skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;

use crate::core::admission::scope::Excluded;
use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::core::pod::records::{LIVE_RELOAD_LABEL, MAPPED, MAPPED_LABEL};
use crate::core::rules::change_reach::ChangeReach;
use crate::core::rules::{MappingKey, RuleSet};
use crate::core::workload_reload::live_pod::LivePod;
use crate::operator::leader::mapping_statuses::pod_counts::PodCounts;
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::replica::watches::caches::namespace_labels;
use crate::operator::watch_toolkit::listed::Listed;

/// Most pods a page of the LIST holds.
pub const PAGE: u32 = 500;
/// How often every namespace is scanned.
pub const EVERY: Duration = Duration::from_mins(10);

/// What the scanner lists, judges with and counts into.
pub struct PodScanner {
    pub client: Client,
    /// The namespaces the operator acts in (empty: all).
    pub namespaces: Vec<String>,
    /// The namespaces the webhook never sees.
    pub excluded: Excluded,
    /// How often one namespace is scanned at most after changes of rules.
    pub per_namespace: Duration,
    /// What admission maps pods from: what the pods found are judged by.
    pub admission: AdmissionSources,
    pub counts: Arc<PodCounts>,
    /// What it judges from, listed once: the rules, the namespaces' labels, the digests.
    pub loaded: Vec<Listed>,
}

/// The label selector of the pods scanned.
#[must_use]
pub fn selector() -> String {
    format!(
        "{MAPPED_LABEL}!={MAPPED},{LIVE_RELOAD_LABEL}!=true,!{},!{}",
        crate::core::neonvm::VM_NAME_LABEL,
        crate::core::runner_pod::VM_LABEL
    )
}

impl PodScanner {
    /// The mappings that would change `pod`, which admission did not map.
    fn judge(&self, rules: &RuleSet, pod: &Pod) -> Option<(NamespacedName, BTreeSet<MappingKey>)> {
        let namespace = pod.namespace()?;
        if self.excluded.contains(&namespace) {
            return None;
        }
        let live = LivePod::read(pod)?;
        let (_, mappings) = self
            .admission
            .view_with(rules, |admission| live.stale(admission, &namespace));
        (!mappings.is_empty()).then(|| (NamespacedName::new(&namespace, &live.name), mappings))
    }

    /// Scans `namespace` (`None`: every namespace in scope); what it found is counted.
    async fn scan(&self, namespace: Option<&str>) {
        let scopes: Vec<Option<&str>> = match namespace {
            Some(ns) => vec![Some(ns)],
            None if self.namespaces.is_empty() => vec![None],
            None => self.namespaces.iter().map(|ns| Some(ns.as_str())).collect(),
        };
        let rules = self.admission.rules.current();
        for scope in scopes {
            let api: Api<Pod> = match scope {
                Some(ns) => Api::namespaced(self.client.clone(), ns),
                None => Api::all(self.client.clone()),
            };
            let mut found = HashMap::new();
            let mut params = ListParams::default().labels(&selector()).limit(PAGE);
            let (mut pages, mut pods) = (0_usize, 0_usize);
            loop {
                let page = match api.list(&params).await {
                    Ok(page) => page,
                    Err(e) => {
                        // Counted again at the next scan; what the last one found stays.
                        tracing::warn!(namespace = ?scope, error = %excerpt(&e.to_string()), "scanning for pods admission did not map");
                        return;
                    }
                };
                pages += 1;
                pods += page.items.len();
                found.extend(page.items.iter().filter_map(|pod| self.judge(&rules, pod)));
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
            tracing::debug!(namespace = ?scope, pages, pods, unmapped = found.len(), "scanned for pods admission did not map");
            self.counts.scanned(scope, found);
        }
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

/// Scans until the future is dropped.
pub async fn run(scanner: PodScanner) {
    for listed in &scanner.loaded {
        listed.wait().await;
    }
    let mut rules = scanner.admission.rules.changes();
    let mut counted_under = scanner.admission.rules.current();
    let mut last_scan: HashMap<String, Instant> = HashMap::new();
    let mut pending: BTreeSet<String> = BTreeSet::new();
    let mut next_full = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_full {
            scanner.scan(None).await;
            let done = Instant::now();
            for ns in scanner.namespaces().into_keys() {
                last_scan.insert(ns, done);
            }
            pending.clear();
            next_full = done + EVERY;
        }
        // The namespaces whose minute is up.
        let due: Vec<String> = pending
            .iter()
            .filter(|ns| {
                last_scan
                    .get(*ns)
                    .is_none_or(|at| *at + scanner.per_namespace <= now)
            })
            .cloned()
            .collect();
        for ns in due {
            pending.remove(&ns);
            scanner.scan(Some(&ns)).await;
            last_scan.insert(ns, Instant::now());
        }
        let wake = pending
            .iter()
            .filter_map(|ns| last_scan.get(ns).map(|at| *at + scanner.per_namespace))
            .min()
            .map_or(next_full, |at| at.min(next_full));
        tokio::select! {
            Ok(()) = rules.changed() => {
                let current = scanner.admission.rules.current();
                let reach = ChangeReach::of_change(&counted_under, &current);
                counted_under = current;
                for (ns, labels) in scanner.namespaces() {
                    if reach.reaches(&ns, &labels) {
                        pending.insert(ns);
                    }
                }
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
