//! Which of several matching rules wins: the rank of a candidate, and the running best.

use std::cmp::{Ordering, Reverse};

use super::compiled_rule::{RuleId, Winners};
use super::mapping_input::MappingScope;
use super::pattern::MatchKind;
use super::requester::{Mode, Requester};
use super::rule_set::RuleSet;

/// The precedence of one candidate; smaller sorts first and wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    priority: Reverse<i32>,
    scope: MappingScope,
    kind: MatchKind,
    prefix_len: Reverse<usize>,
}

impl Rank {
    /// The best rank any regex rule of `scope` with at most `max_priority` can have.
    pub(super) fn regex_floor(max_priority: i32, scope: MappingScope) -> Rank {
        Rank {
            priority: Reverse(max_priority),
            scope,
            kind: MatchKind::Regex,
            prefix_len: Reverse(0),
        }
    }
}

impl RuleSet {
    pub(super) fn rank(&self, id: RuleId, prefix_len: usize) -> Rank {
        let rule = &self.rules[id as usize];
        self.rank_of(rule.mapping, rule.pattern.kind(), prefix_len)
    }

    /// The rank of a rule of mapping `mapping` (its index here) matching as `kind`.
    pub(super) fn rank_of(&self, mapping: usize, kind: MatchKind, prefix_len: usize) -> Rank {
        let m = &self.mappings[mapping];
        Rank {
            priority: Reverse(m.priority),
            scope: m.key.scope,
            kind,
            prefix_len: Reverse(prefix_len),
        }
    }

    /// Orders two candidates of equal rank: mapping name, then rule index.
    fn tie_order(&self, a: RuleId, b: RuleId) -> Ordering {
        let (ra, rb) = (&self.rules[a as usize], &self.rules[b as usize]);
        let (ma, mb) = (
            &self.mappings[ra.mapping].key,
            &self.mappings[rb.mapping].key,
        );
        // The rule id settles inputs that repeat a mapping name, which a cluster never holds.
        (&ma.name, ra.index, a).cmp(&(&mb.name, rb.index, b))
    }
}

/// The best-ranked candidates seen so far.
#[derive(Default)]
pub(super) struct Best {
    pub(super) rank: Option<Rank>,
    winners: Winners,
}

impl Best {
    pub(super) fn consider(
        &mut self,
        set: &RuleSet,
        id: RuleId,
        prefix_len: usize,
        who: &Requester<'_>,
        mode: Mode,
    ) {
        if !set.mapping_applies(set.rules[id as usize].mapping, who, mode) {
            return;
        }
        let rank = set.rank(id, prefix_len);
        match self.rank.map(|b| rank.cmp(&b)) {
            Some(Ordering::Greater) => {}
            Some(Ordering::Equal) => self.winners.push(id),
            Some(Ordering::Less) | None => {
                self.rank = Some(rank);
                self.winners.clear();
                self.winners.push(id);
            }
        }
    }

    pub(super) fn finish(self, set: &RuleSet) -> Winners {
        self.finish_ranked(set).0
    }

    /// The winners, and their rank.
    pub(super) fn finish_ranked(mut self, set: &RuleSet) -> (Winners, Option<Rank>) {
        if self.winners.len() > 1 {
            self.winners.sort_by(|&a, &b| set.tie_order(a, b));
        }
        (self.winners, self.rank)
    }
}
