//! Static conflicts: rules that share a pattern, priority, scope and selectors with another
//! rule but rewrite differently conflict for every VM either applies to, so they are found
//! at compile time. (Rules whose selectors merely overlap are found when VMs resolve.)

use super::{ProblemDetail, RuleId, RuleSet};

impl RuleSet {
    pub(super) fn find_static_conflicts(&mut self) {
        let mut found = Vec::new();
        for bucket in self.index.buckets() {
            for (i, &a) in bucket.iter().enumerate() {
                for &b in &bucket[i + 1..] {
                    if self.statically_conflict(a, b) {
                        found.push((a, b));
                    }
                }
            }
        }
        for (a, b) in found {
            for (this, other) in [(a, b), (b, a)] {
                let this = self.rule_ref(this);
                let other = self.rule_ref(other);
                self.problem(
                    &this.mapping,
                    Some(this.index),
                    ProblemDetail::SameMatch { other },
                );
            }
        }
    }

    fn statically_conflict(&self, a: RuleId, b: RuleId) -> bool {
        let (ra, rb) = (&self.rules[a as usize], &self.rules[b as usize]);
        let (ma, mb) = (&self.mappings[ra.mapping], &self.mappings[rb.mapping]);
        ma.priority == mb.priority
            && ma.dry_run == mb.dry_run
            && ra.action != rb.action
            && ma.selector == mb.selector
            && ma.namespace_selector == mb.namespace_selector
    }
}
