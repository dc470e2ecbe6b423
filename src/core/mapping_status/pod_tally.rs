//! What pods show about each mapping: from the leader's passes over the pods, namespace by
//! namespace, the pods admission mapped whose containers each rule decides and the pods a
//! mapping would change that admission did not map; from live reload, pod by pod, the pods
//! a mapping would change that it sees unmapped, the pods waiting for a roll and the
//! workloads rolling. A pass costs the namespaces it counted, not a count of every pod, and
//! what is kept per namespace is a count per mapping and rule, whatever its pods number.
//! Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::vm_tally::add_to;
use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::{MappingKey, RuleRef};

/// What live reload adds for one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadCount {
    /// The mappings whose rules would change it, when admission did not map it.
    pub unmapped: BTreeSet<MappingKey>,
    /// The mappings whose change it waits to be rolled for.
    pub waiting: BTreeSet<MappingKey>,
    /// The workload rolling it now (`Kind namespace/name`), and the mappings behind the roll.
    pub rolling: Option<(String, BTreeSet<MappingKey>)>,
}

/// What one pass counted in one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespacePods {
    /// Pods admission mapped, per mapping whose rules decide some of their containers.
    by_mapping: BTreeMap<MappingKey, usize>,
    /// Pods admission mapped, per rule that decides some of their containers.
    by_rule: BTreeMap<(MappingKey, usize), usize>,
    /// Pods admission did not map, per mapping whose rules would change them.
    unmapped: BTreeMap<MappingKey, usize>,
}

impl NamespacePods {
    /// Counts a pod admission mapped, whose containers `rules` decide.
    pub fn add_mapped(&mut self, rules: &BTreeSet<RuleRef>) {
        let mappings: BTreeSet<&MappingKey> = rules.iter().map(|r| &r.mapping).collect();
        for mapping in mappings {
            add_to(&mut self.by_mapping, mapping, 1);
        }
        for rule in rules {
            add_to(&mut self.by_rule, &(rule.mapping.clone(), rule.index), 1);
        }
    }

    /// Counts a pod admission did not map, which `mappings` would change.
    pub fn add_unmapped(&mut self, mappings: &BTreeSet<MappingKey>) {
        for mapping in mappings {
            add_to(&mut self.unmapped, mapping, 1);
        }
    }

    /// Whether it counts no pod.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_mapping.is_empty() && self.unmapped.is_empty()
    }
}

/// Adds `by` times each count of `from` to `to`.
fn add_all<K: Ord + Clone>(to: &mut BTreeMap<K, usize>, from: &BTreeMap<K, usize>, by: isize) {
    for (key, n) in from {
        add_to(
            to,
            key,
            by.saturating_mul(isize::try_from(*n).unwrap_or(isize::MAX)),
        );
    }
}

/// What a pass covered: every namespace in scope, or one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassScope<'a> {
    All,
    Namespace(&'a str),
}

/// The sums over the pods.
#[derive(Debug, Default)]
pub struct PodTally {
    /// What the last pass of each namespace counted (namespaces with no pod counted left
    /// out).
    counted: HashMap<String, NamespacePods>,
    /// When the last pass of every namespace ended; `None`: none has yet.
    all_counted_at: Option<Time>,
    /// When the passes of one namespace since then ended.
    namespace_counted_at: HashMap<String, Time>,
    reloads: HashMap<NamespacedName, ReloadCount>,
    by_mapping: BTreeMap<MappingKey, usize>,
    by_rule: BTreeMap<(MappingKey, usize), usize>,
    unmapped: BTreeMap<MappingKey, usize>,
    waiting: BTreeMap<MappingKey, usize>,
    /// Per mapping: the workloads rolling, with how many of their pods count.
    rolling: BTreeMap<MappingKey, BTreeMap<String, usize>>,
}

impl PodTally {
    /// Puts in force what a pass over `scope` counted at `at`, per namespace; what it no
    /// longer found there is forgotten. Whether a count changed, or this is the first pass
    /// of every namespace.
    pub fn set_counted(
        &mut self,
        scope: PassScope<'_>,
        found: HashMap<String, NamespacePods>,
        at: Time,
    ) -> bool {
        let mut changed = false;
        let gone: Vec<String> = self
            .counted
            .keys()
            .filter(|ns| match scope {
                PassScope::All => !found.contains_key(*ns),
                PassScope::Namespace(only) => *ns == only && !found.contains_key(*ns),
            })
            .cloned()
            .collect();
        for ns in gone {
            if let Some(old) = self.counted.remove(&ns) {
                self.apply(&old, -1);
                changed = true;
            }
        }
        for (ns, pods) in found {
            if let PassScope::Namespace(only) = scope
                && ns != only
            {
                continue;
            }
            if self.counted.get(&ns) == Some(&pods) {
                continue;
            }
            changed = true;
            if let Some(old) = self.counted.remove(&ns) {
                self.apply(&old, -1);
            }
            if !pods.is_empty() {
                self.apply(&pods, 1);
                self.counted.insert(ns, pods);
            }
        }
        match scope {
            PassScope::All => {
                changed |= self.all_counted_at.is_none();
                self.all_counted_at = Some(at);
                self.namespace_counted_at.clear();
            }
            PassScope::Namespace(ns) => {
                self.namespace_counted_at.insert(ns.to_string(), at);
            }
        }
        changed
    }

    fn apply(&mut self, pods: &NamespacePods, by: isize) {
        add_all(&mut self.by_mapping, &pods.by_mapping, by);
        add_all(&mut self.by_rule, &pods.by_rule, by);
        add_all(&mut self.unmapped, &pods.unmapped, by);
    }

    /// When the pods `mapping` counts were last counted: for an ImageMapping, the last pass
    /// of its namespace; for a ClusterImageMapping, the last pass, of every namespace or of
    /// one. `None`: no pass of every namespace has ended yet, and the counts are not known.
    #[must_use]
    pub fn counted_at(&self, mapping: &MappingKey) -> Option<&Time> {
        let all = self.all_counted_at.as_ref()?;
        let since = match &mapping.namespace {
            Some(ns) => self.namespace_counted_at.get(ns),
            None => self.namespace_counted_at.values().max_by_key(|t| t.0),
        };
        Some(since.filter(|t| t.0 > all.0).unwrap_or(all))
    }

    /// Puts in force what live reload says of `pod` (`None`: nothing, or the pod is gone).
    /// Whether anything changed.
    pub fn set_reload(&mut self, pod: NamespacedName, count: Option<ReloadCount>) -> bool {
        let count = count.filter(|c| *c != ReloadCount::default());
        if self.reloads.get(&pod) == count.as_ref() {
            return false;
        }
        if let Some(old) = self.reloads.remove(&pod) {
            self.apply_reload(&old, -1);
        }
        if let Some(new) = count {
            self.apply_reload(&new, 1);
            self.reloads.insert(pod, new);
        }
        true
    }

    fn apply_reload(&mut self, count: &ReloadCount, by: isize) {
        for mapping in &count.unmapped {
            add_to(&mut self.unmapped, mapping, by);
        }
        for mapping in &count.waiting {
            add_to(&mut self.waiting, mapping, by);
        }
        if let Some((workload, mappings)) = &count.rolling {
            for mapping in mappings {
                let workloads = self.rolling.entry(mapping.clone()).or_default();
                add_to(workloads, workload, by);
                if workloads.is_empty() {
                    self.rolling.remove(mapping);
                }
            }
        }
    }

    /// The pods of live reload's count, for forgetting those it no longer sees.
    pub fn reloaded_pods(&self) -> impl Iterator<Item = &NamespacedName> {
        self.reloads.keys()
    }

    /// Pods admission mapped whose containers a rule of `mapping` decides.
    #[must_use]
    pub fn pods_of(&self, mapping: &MappingKey) -> usize {
        self.by_mapping.get(mapping).copied().unwrap_or(0)
    }

    /// Pods admission mapped whose containers rule `index` of `mapping` decides.
    #[must_use]
    pub fn pods_of_rule(&self, mapping: &MappingKey, index: usize) -> usize {
        let key = (mapping.clone(), index);
        self.by_rule.get(&key).copied().unwrap_or(0)
    }

    /// Pods `mapping` would change that admission did not map.
    #[must_use]
    pub fn unmapped(&self, mapping: &MappingKey) -> usize {
        self.unmapped.get(mapping).copied().unwrap_or(0)
    }

    /// Pods waiting to be rolled for a change of `mapping`.
    #[must_use]
    pub fn waiting(&self, mapping: &MappingKey) -> usize {
        self.waiting.get(mapping).copied().unwrap_or(0)
    }

    /// The workloads rolling for a change of `mapping`, in name order.
    pub fn rolling(&self, mapping: &MappingKey) -> impl ExactSizeIterator<Item = &String> {
        self.rolling
            .get(mapping)
            .map(BTreeMap::keys)
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rules::{MappingScope, MatchKind};

    fn mapping(name: &str) -> MappingKey {
        MappingKey {
            scope: MappingScope::Namespaced,
            namespace: Some("dev".into()),
            name: name.into(),
        }
    }

    fn rule(name: &str, index: usize) -> RuleRef {
        RuleRef {
            mapping: mapping(name),
            index,
            kind: MatchKind::Repository,
        }
    }

    fn pod(name: &str) -> NamespacedName {
        NamespacedName::new("dev", name)
    }

    fn at(second: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
    }

    fn counted(namespaces: &[(&str, NamespacePods)]) -> HashMap<String, NamespacePods> {
        namespaces
            .iter()
            .map(|(ns, pods)| ((*ns).to_string(), pods.clone()))
            .collect()
    }

    #[test]
    fn a_pass_counts_pods_per_rule_and_mapping_and_replaces_what_it_covered_only() {
        let mut tally = PodTally::default();
        let m = mapping("m");
        assert_eq!(tally.counted_at(&m), None, "nothing counted yet");
        let mut dev = NamespacePods::default();
        dev.add_mapped(&BTreeSet::from([rule("m", 0), rule("m", 1)]));
        dev.add_mapped(&BTreeSet::from([rule("m", 1)]));
        dev.add_unmapped(&BTreeSet::from([m.clone()]));
        let mut prod = NamespacePods::default();
        prod.add_mapped(&BTreeSet::from([rule("m", 1)]));
        assert!(tally.set_counted(
            PassScope::All,
            counted(&[("dev", dev.clone()), ("prod", prod.clone())]),
            at(100)
        ));
        assert_eq!(tally.pods_of(&m), 3);
        assert_eq!(
            (tally.pods_of_rule(&m, 0), tally.pods_of_rule(&m, 1)),
            (1, 3)
        );
        assert_eq!(tally.unmapped(&m), 1);
        assert_eq!(tally.counted_at(&m), Some(&at(100)));
        // The same counts again: nothing changed, but the time moves.
        assert!(!tally.set_counted(
            PassScope::All,
            counted(&[("dev", dev), ("prod", prod)]),
            at(200)
        ));
        assert_eq!(tally.counted_at(&m), Some(&at(200)));
        // A pass of dev finds nothing there now; prod's pods stay.
        assert!(tally.set_counted(
            PassScope::Namespace("dev"),
            counted(&[("prod", NamespacePods::default())]),
            at(300)
        ));
        assert_eq!((tally.pods_of(&m), tally.unmapped(&m)), (1, 0));
        // The ImageMapping of dev was counted at dev's pass.
        assert_eq!(tally.counted_at(&m), Some(&at(300)));
        let cluster = MappingKey {
            scope: MappingScope::Cluster,
            namespace: None,
            name: "c".into(),
        };
        assert_eq!(tally.counted_at(&cluster), Some(&at(300)));
        assert!(tally.set_counted(PassScope::All, HashMap::new(), at(400)));
        assert_eq!(tally.pods_of(&m), 0);
        assert_eq!(tally.counted_at(&m), Some(&at(400)));
    }

    #[test]
    fn live_reload_counts_unmapped_waiting_and_rolling() {
        let mut tally = PodTally::default();
        let m = mapping("m");
        let rolling = |workload: &str| ReloadCount {
            unmapped: BTreeSet::new(),
            waiting: BTreeSet::from([m.clone()]),
            rolling: Some((workload.to_string(), BTreeSet::from([m.clone()]))),
        };
        tally.set_reload(pod("a"), Some(rolling("Deployment dev/web")));
        tally.set_reload(pod("b"), Some(rolling("Deployment dev/web")));
        tally.set_reload(
            pod("c"),
            Some(ReloadCount {
                unmapped: BTreeSet::from([m.clone()]),
                ..ReloadCount::default()
            }),
        );
        assert_eq!((tally.waiting(&m), tally.unmapped(&m)), (2, 1));
        assert_eq!(
            tally.rolling(&m).collect::<Vec<_>>(),
            ["Deployment dev/web"]
        );
        tally.set_reload(pod("a"), None);
        assert_eq!(tally.rolling(&m).len(), 1);
        tally.set_reload(pod("b"), None);
        tally.set_reload(pod("c"), Some(ReloadCount::default()));
        assert_eq!(
            (
                tally.waiting(&m),
                tally.unmapped(&m),
                tally.rolling(&m).len()
            ),
            (0, 0, 0)
        );
        assert_eq!(tally.reloaded_pods().count(), 0);
    }
}
