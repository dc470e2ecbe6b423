//! What the VMs show about each mapping — VMs per rule, VMs awaiting a restart, followed
//! tags, ties — kept up to date VM by VM: a VM whose resolution changed costs its own entry,
//! not a count of every VM. Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::{MappingKey, Mode, RuleRef, RuleSet};
use crate::core::vm_images::{Resolutions, VmResolution, VmView};

/// A tie between two rules seen on a VM: the first VM and slot (in name order) it was seen on.
pub type Ties = BTreeMap<(RuleRef, RuleRef), (NamespacedName, String)>;

/// What one VM adds to the mapping statuses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VmCount {
    /// The rules that decide one of its slots (or, for dry-run mappings, would).
    rules: BTreeSet<RuleRef>,
    /// The references those rules' results follow by tag.
    followed: BTreeSet<(RuleRef, String)>,
    /// `(winner, loser, slot)`: ties seen on its slots.
    ties: BTreeSet<(RuleRef, RuleRef, String)>,
    /// The mappings whose live rules decide a slot of it, when its pod waits for a restart.
    awaiting: BTreeSet<MappingKey>,
}

impl VmCount {
    /// Live mappings count from what the VM runs (dry-run rules never win there), dry-run
    /// mappings from what their rules would decide (`preview`, given when there are dry-run
    /// mappings), so that one that would outrank a live mapping does not take that mapping's
    /// VM away from its count. A dry run changes no pod: no VM waits for a restart because
    /// of one.
    #[must_use]
    pub fn of(
        live: &VmResolution,
        preview: Option<&VmResolution>,
        dry_runs: &BTreeSet<&MappingKey>,
        awaiting_restart: bool,
    ) -> VmCount {
        let mut count = VmCount::default();
        count.add(live, |_| true, awaiting_restart);
        if let Some(preview) = preview {
            count.add(preview, |rule| dry_runs.contains(&rule.mapping), false);
        }
        count
    }

    fn add(&mut self, res: &VmResolution, counts: impl Fn(&RuleRef) -> bool, awaiting: bool) {
        for slot in &res.slots {
            let Some(rule) = slot.rule.as_ref().filter(|r| counts(r)) else {
                continue;
            };
            self.rules.insert(rule.clone());
            if let (true, Ok(reference)) = (slot.follow_tag, &slot.outcome) {
                self.followed.insert((rule.clone(), reference.clone()));
            }
            if awaiting {
                self.awaiting.insert(rule.mapping.clone());
            }
            for loser in &slot.conflicts {
                self.ties
                    .insert((rule.clone(), loser.clone(), slot.slot.clone()));
            }
        }
    }

    fn mappings(&self) -> BTreeSet<&MappingKey> {
        self.rules.iter().map(|r| &r.mapping).collect()
    }
}

/// The counts of every VM, and their sums by mapping and rule.
#[derive(Debug, Default)]
pub struct VmTally {
    counts: HashMap<NamespacedName, Arc<VmCount>>,
    /// The distinct counts, shared by the VMs that have them: VMs that ask for the same
    /// images in the same place have equal counts, so ten thousand VMs hold a few.
    distinct: HashSet<Arc<VmCount>>,
    /// VMs per mapping (each once, whatever number of its rules decide it).
    by_mapping: BTreeMap<MappingKey, usize>,
    /// VMs per rule (by mapping and index).
    by_rule: BTreeMap<(MappingKey, usize), usize>,
    awaiting: BTreeMap<MappingKey, BTreeSet<NamespacedName>>,
    /// How many VMs follow each reference through each rule.
    followed: BTreeMap<(MappingKey, usize), BTreeMap<String, usize>>,
    /// The VMs and slots each `(winner, loser)` pair was seen on.
    ties: BTreeMap<(RuleRef, RuleRef), BTreeSet<(NamespacedName, String)>>,
}

/// Adds `by` to the entry `key` of `map`, removing it when it reaches zero.
pub(super) fn add_to<K: Ord + Clone>(map: &mut BTreeMap<K, usize>, key: &K, by: isize) {
    let n = map.get(key).copied().unwrap_or(0).saturating_add_signed(by);
    if n == 0 {
        map.remove(key);
    } else {
        map.insert(key.clone(), n);
    }
}

/// Inserts or removes `item` in the set at `key` of `map`, removing the set once empty.
fn toggle<K: Ord + Clone, T: Ord>(map: &mut BTreeMap<K, BTreeSet<T>>, key: &K, item: T, on: bool) {
    if on {
        map.entry(key.clone()).or_default().insert(item);
    } else if let Some(set) = map.get_mut(key) {
        set.remove(&item);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl VmTally {
    /// The tally of `vms` under `set` (a full count; see [`VmCount::of`]).
    #[must_use]
    pub fn count<'a>(
        set: &'a RuleSet,
        vms: &[VmView<'a>],
        awaiting_restart: &BTreeSet<NamespacedName>,
        default_runner_image: &'a str,
        dry_runs: &BTreeSet<&MappingKey>,
    ) -> VmTally {
        let mut live = Resolutions::new(set, default_runner_image, Mode::Live);
        let mut preview = Resolutions::new(set, default_runner_image, Mode::Preview);
        let mut tally = VmTally::default();
        for v in vms {
            let name = NamespacedName::of(v.vm);
            let awaiting = awaiting_restart.contains(&name);
            let preview = (!dry_runs.is_empty()).then(|| preview.of(*v));
            let count = VmCount::of(live.of(*v), preview, dry_runs, awaiting);
            tally.set(name, Some(count));
        }
        tally
    }

    /// Puts `count` in force for `vm` (`None`: the VM is gone or out of scope). Costs the
    /// VM's old and new entries only; nothing when they are equal.
    pub fn set(&mut self, vm: NamespacedName, count: Option<VmCount>) {
        let count = count.filter(|c| *c != VmCount::default());
        if self.counts.get(&vm).map(AsRef::as_ref) == count.as_ref() {
            return;
        }
        if let Some(old) = self.counts.remove(&vm) {
            self.apply(&vm, &old, false);
            // Held by the set of distinct counts and here only: no other VM has it.
            if Arc::strong_count(&old) == 2 {
                self.distinct.remove(&old);
            }
        }
        if let Some(new) = count {
            let new = if let Some(shared) = self.distinct.get(&new) {
                Arc::clone(shared)
            } else {
                let new = Arc::new(new);
                self.distinct.insert(Arc::clone(&new));
                new
            };
            self.apply(&vm, &new, true);
            self.counts.insert(vm, new);
        }
    }

    /// How many distinct counts the VMs share.
    #[must_use]
    pub fn distinct(&self) -> usize {
        self.distinct.len()
    }

    /// The VMs counted.
    pub fn vms(&self) -> impl Iterator<Item = &NamespacedName> {
        self.counts.keys()
    }

    fn apply(&mut self, vm: &NamespacedName, count: &VmCount, on: bool) {
        let by = if on { 1 } else { -1 };
        for mapping in count.mappings() {
            add_to(&mut self.by_mapping, mapping, by);
        }
        for rule in &count.rules {
            add_to(&mut self.by_rule, &(rule.mapping.clone(), rule.index), by);
        }
        for (rule, reference) in &count.followed {
            let key = (rule.mapping.clone(), rule.index);
            let refs = self.followed.entry(key.clone()).or_default();
            add_to(refs, reference, by);
            if refs.is_empty() {
                self.followed.remove(&key);
            }
        }
        for mapping in &count.awaiting {
            toggle(&mut self.awaiting, mapping, vm.clone(), on);
        }
        for (winner, loser, slot) in &count.ties {
            let pair = (winner.clone(), loser.clone());
            toggle(&mut self.ties, &pair, (vm.clone(), slot.clone()), on);
        }
    }

    /// VMs whose images a rule of `mapping` decides.
    #[must_use]
    pub fn vms_of(&self, mapping: &MappingKey) -> usize {
        self.by_mapping.get(mapping).copied().unwrap_or(0)
    }

    /// VMs whose image rule `index` of `mapping` decides.
    #[must_use]
    pub fn vms_of_rule(&self, mapping: &MappingKey, index: usize) -> usize {
        // (The key is built only to look up: a status pass asks once per rule.)
        let key = (mapping.clone(), index);
        self.by_rule.get(&key).copied().unwrap_or(0)
    }

    /// The VMs, in name order, whose pod waits for a restart to run what `mapping` decides.
    #[must_use]
    pub fn awaiting(&self, mapping: &MappingKey) -> &BTreeSet<NamespacedName> {
        static NONE: BTreeSet<NamespacedName> = BTreeSet::new();
        self.awaiting.get(mapping).unwrap_or(&NONE)
    }

    /// The references rule `index` of `mapping` follows by tag, in order.
    pub fn followed(&self, mapping: &MappingKey, index: usize) -> impl Iterator<Item = &String> {
        let key = (mapping.clone(), index);
        self.followed.get(&key).into_iter().flat_map(BTreeMap::keys)
    }

    /// Each tie seen on a VM, with the first VM and slot (in name order) it was seen on.
    #[must_use]
    pub fn ties(&self) -> Ties {
        self.ties
            .iter()
            .filter_map(|(pair, seen)| Some((pair.clone(), seen.first()?.clone())))
            .collect()
    }
}
