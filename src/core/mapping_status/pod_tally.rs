//! What pods show about each mapping, kept pod by pod: the pods admission mapped whose
//! containers each rule decides (from the leader's watch of mapped pods), and, from live
//! reload, the pods a mapping would change that admission did not map, the pods waiting for
//! a roll, and the workloads rolling. A pod whose count changed costs its own entries, not a
//! count of every pod. Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// The sums over the pods.
#[derive(Debug, Default)]
pub struct PodTally {
    admitted: HashMap<NamespacedName, BTreeSet<RuleRef>>,
    reloads: HashMap<NamespacedName, ReloadCount>,
    /// Pods the scan found that admission did not map, and the mappings that would change
    /// them.
    scanned: HashMap<NamespacedName, BTreeSet<MappingKey>>,
    by_mapping: BTreeMap<MappingKey, usize>,
    by_rule: BTreeMap<(MappingKey, usize), usize>,
    unmapped: BTreeMap<MappingKey, usize>,
    waiting: BTreeMap<MappingKey, usize>,
    /// Per mapping: the workloads rolling, with how many of their pods count.
    rolling: BTreeMap<MappingKey, BTreeMap<String, usize>>,
}

impl PodTally {
    /// Puts in force the rules that decide the containers of `pod`, which admission mapped
    /// (`None` or empty: none, or the pod is gone). Whether anything changed.
    pub fn set_admitted(&mut self, pod: NamespacedName, rules: Option<BTreeSet<RuleRef>>) -> bool {
        let rules = rules.filter(|r| !r.is_empty());
        if self.admitted.get(&pod) == rules.as_ref() {
            return false;
        }
        if let Some(old) = self.admitted.remove(&pod) {
            self.apply_rules(&old, -1);
        }
        if let Some(new) = rules {
            self.apply_rules(&new, 1);
            self.admitted.insert(pod, new);
        }
        true
    }

    fn apply_rules(&mut self, rules: &BTreeSet<RuleRef>, by: isize) {
        let mappings: BTreeSet<&MappingKey> = rules.iter().map(|r| &r.mapping).collect();
        for mapping in mappings {
            add_to(&mut self.by_mapping, mapping, by);
        }
        for rule in rules {
            add_to(&mut self.by_rule, &(rule.mapping.clone(), rule.index), by);
        }
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

    /// Puts in force what a scan of `namespace` (`None`: every namespace) found: the pods
    /// admission did not map, and the mappings that would change each; what it no longer
    /// found there is forgotten. Whether anything changed.
    pub fn set_scanned(
        &mut self,
        namespace: Option<&str>,
        found: HashMap<NamespacedName, BTreeSet<MappingKey>>,
    ) -> bool {
        let before = self.scanned.len();
        let mut changed = false;
        let gone: Vec<NamespacedName> = self
            .scanned
            .keys()
            .filter(|k| namespace.is_none_or(|ns| k.namespace == ns) && !found.contains_key(*k))
            .cloned()
            .collect();
        for pod in gone {
            if let Some(old) = self.scanned.remove(&pod) {
                for mapping in &old {
                    add_to(&mut self.unmapped, mapping, -1);
                }
            }
        }
        for (pod, mappings) in found {
            if self.scanned.get(&pod) == Some(&mappings) {
                continue;
            }
            changed = true;
            if let Some(old) = self.scanned.remove(&pod) {
                for mapping in &old {
                    add_to(&mut self.unmapped, mapping, -1);
                }
            }
            for mapping in &mappings {
                add_to(&mut self.unmapped, mapping, 1);
            }
            if !mappings.is_empty() {
                self.scanned.insert(pod, mappings);
            }
        }
        changed || self.scanned.len() != before
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

    #[test]
    fn pods_are_counted_per_rule_and_mapping_and_forgotten_one_by_one() {
        let mut tally = PodTally::default();
        let both = BTreeSet::from([rule("m", 0), rule("m", 1)]);
        assert!(tally.set_admitted(pod("a"), Some(both.clone())));
        assert!(!tally.set_admitted(pod("a"), Some(both)));
        tally.set_admitted(pod("b"), Some(BTreeSet::from([rule("m", 1)])));
        let m = mapping("m");
        assert_eq!(tally.pods_of(&m), 2);
        assert_eq!(
            (tally.pods_of_rule(&m, 0), tally.pods_of_rule(&m, 1)),
            (1, 2)
        );
        tally.set_admitted(pod("a"), None);
        assert_eq!((tally.pods_of(&m), tally.pods_of_rule(&m, 0)), (1, 0));
        tally.set_admitted(pod("b"), Some(BTreeSet::new()));
        assert_eq!(tally.pods_of(&m), 0);
    }

    #[test]
    fn a_scan_replaces_what_it_found_in_its_namespace_only() {
        let mut tally = PodTally::default();
        let m = mapping("m");
        let found = |pods: &[NamespacedName]| {
            pods.iter()
                .map(|p| (p.clone(), BTreeSet::from([m.clone()])))
                .collect::<HashMap<_, _>>()
        };
        let other = NamespacedName::new("prod", "x");
        assert!(tally.set_scanned(None, found(&[pod("a"), pod("b"), other.clone()])));
        assert_eq!(tally.unmapped(&m), 3);
        assert!(!tally.set_scanned(None, found(&[pod("a"), pod("b"), other.clone()])));
        // A scan of dev no longer finds b; prod's pod stays.
        assert!(tally.set_scanned(Some("dev"), found(&[pod("a")])));
        assert_eq!(tally.unmapped(&m), 2);
        assert!(tally.set_scanned(None, HashMap::new()));
        assert_eq!(tally.unmapped(&m), 0);
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
