//! Static conflicts: rules that share a pattern, priority, scope and selectors with another
//! rule but rewrite differently conflict for every VM either applies to, so they are found
//! at compile time. (Rules whose selectors merely overlap are found when VMs resolve.)
//!
//! Linear in the rules: each rule is reported once, naming one rule it conflicts with and
//! counting the others, however many rules collide.

use std::collections::HashMap;

use super::compiled_rule::RuleId;
use super::problem::ProblemDetail;
use super::rewrite::Action;
use super::rule_set::RuleSet;

impl RuleSet {
    pub(super) fn find_static_conflicts(&mut self) {
        let mut found: Vec<(RuleId, RuleId, usize)> = Vec::new();
        for bucket in self.index.buckets() {
            for class in self.conflict_classes(&bucket) {
                found.extend(self.conflicts_within(&class));
            }
        }
        for (this, other, more) in found {
            let this = self.rule_ref(this);
            let other = self.rule_ref(other);
            self.problem(
                &this.mapping,
                Some(this.index),
                ProblemDetail::SameMatch { other, more },
            );
        }
    }

    /// The rules of `bucket` (same pattern) that could conflict: same priority, dry run and
    /// selectors. Each class in bucket order.
    fn conflict_classes(&self, bucket: &[RuleId]) -> Vec<Vec<RuleId>> {
        let mut classes: Vec<Vec<RuleId>> = Vec::new();
        for &id in bucket {
            match classes.iter_mut().find(|c| self.same_class(c[0], id)) {
                Some(class) => class.push(id),
                None => classes.push(vec![id]),
            }
        }
        classes.retain(|c| c.len() > 1);
        classes
    }

    fn same_class(&self, a: RuleId, b: RuleId) -> bool {
        let (ra, rb) = (&self.rules[a as usize], &self.rules[b as usize]);
        let (ma, mb) = (&self.mappings[ra.mapping], &self.mappings[rb.mapping]);
        ma.priority == mb.priority
            && ma.dry_run == mb.dry_run
            && ma.selector == mb.selector
            && ma.namespace_selector == mb.namespace_selector
    }

    /// In one class, every rule whose result differs from another's: the rule, one rule it
    /// conflicts with, and how many more it conflicts with.
    fn conflicts_within(&self, class: &[RuleId]) -> Vec<(RuleId, RuleId, usize)> {
        let action = |id: RuleId| &self.rules[id as usize].action;
        let first = class[0];
        let Some(&first_other) = class.iter().find(|&&id| action(id) != action(first)) else {
            return Vec::new();
        };
        // How many rules of the class share each result.
        let mut counts: HashMap<&Action, usize> = HashMap::new();
        for &id in class {
            *counts.entry(action(id)).or_default() += 1;
        }
        class
            .iter()
            .map(|&id| {
                let same = counts.get(action(id)).copied().unwrap_or(1);
                let other = if action(id) == action(first) {
                    first_other
                } else {
                    first
                };
                (id, other, class.len() - same - 1)
            })
            .collect()
    }
}
