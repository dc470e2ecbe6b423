//! Resolving a reference through a compiled [`RuleSet`]: the candidate rules the index
//! finds (or a linear scan, to check the index against), the winner by precedence, and its
//! rewrite — under the cluster's local registry's own name when it has one.

use kube::core::SelectorExt;

use super::compiled_rule::{RuleId, Winners};
use super::index;
use super::mapping_input::MappingScope;
use super::mapping_input::RuleRef;
use super::precedence::{Best, Rank};
use super::requester::{Mode, Requester};
use super::resolution::{NAMED_CONFLICTS, RefusedMatch, Resolution, ResolveError};
use super::rule_set::RuleSet;
use crate::core::reference::Reference;

impl RuleSet {
    /// Whether the rules of mapping `mapping` (its index here) apply to `who`.
    pub(super) fn mapping_applies(&self, mapping: usize, who: &Requester<'_>, mode: Mode) -> bool {
        let m = &self.mappings[mapping];
        if mode == Mode::Live && m.dry_run {
            return false;
        }
        if let Some(sel) = &m.selector
            && !sel.matches(who.labels)
        {
            return false;
        }
        if let Some(sel) = &m.namespace_selector
            && !sel.matches(who.namespace_labels)
        {
            return false;
        }
        true
    }

    /// The winning rule for `r` and the rules tied with it, without rewriting.
    /// Cost depends on the number of components of `r`, not on the number of rules
    /// (regex rules are matched as one automaton, and only when they could win).
    pub fn find(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Winners {
        self.find_ranked(r, who, mode).0
    }

    /// [`RuleSet::find`], and the winners' rank.
    fn find_ranked(
        &self,
        r: &Reference,
        who: &Requester<'_>,
        mode: Mode,
    ) -> (Winners, Option<Rank>) {
        let mut best = Best::default();
        let ns = who
            .namespace_rules
            .then(|| self.index.namespace(who.namespace))
            .flatten();
        self.index
            .literal_candidates(r, ns, |id, len| best.consider(self, id, len, who, mode));
        let [ns_max, cluster_max] = self.index.regex_max_priority(ns);
        for (max_priority, scope) in [
            (ns_max, MappingScope::Namespaced),
            (cluster_max, MappingScope::Cluster),
        ] {
            let Some(max_priority) = max_priority else {
                continue;
            };
            let floor = Rank::regex_floor(max_priority, scope);
            if best.rank.is_none_or(|b| floor <= b) {
                self.index
                    .regex_candidates(r, ns, scope == MappingScope::Namespaced, |id| {
                        best.consider(self, id, 0, who, mode);
                    });
            }
        }
        best.finish_ranked(self)
    }

    /// Resolves `r` for `who`: the rewritten reference, the rule that decided it, and
    /// any conflicting rules.
    /// A reference naming the cluster's local registry by any of its names is resolved
    /// (and kept) under the registry's own name.
    pub fn resolve(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Resolution {
        let local = self.local_reference(r);
        let r = local.as_ref().unwrap_or(r);
        let (winners, rank) = self.find_ranked(r, who, mode);
        let mut resolution = self.outcome(r, &winners);
        resolution.refused = self.refused_matching(r, who, mode, rank);
        resolution
    }

    /// The refused rules that match `r` for `who` with a rank at least the winners' `rank`
    /// (any, when no rule applies), in rank order: a few hash lookups, as for the rules that
    /// apply; none at all when no rule is refused.
    fn refused_matching(
        &self,
        r: &Reference,
        who: &Requester<'_>,
        mode: Mode,
        rank: Option<Rank>,
    ) -> Vec<RefusedMatch> {
        if self.refused.is_empty() {
            return Vec::new();
        }
        let ns = who
            .namespace_rules
            .then(|| self.refused_index.namespace(who.namespace))
            .flatten();
        let mut found: Vec<(Rank, RuleId)> = Vec::new();
        let mut consider = |id: RuleId, len: usize| {
            let rule = &self.refused[id as usize];
            if !self.mapping_applies(rule.mapping, who, mode) {
                return;
            }
            let of = self.rank_of(rule.mapping, rule.pattern.kind(), len);
            if rank.is_none_or(|winner| of <= winner) {
                found.push((of, id));
            }
        };
        self.refused_index.literal_candidates(r, ns, &mut consider);
        for namespaced in [true, false] {
            self.refused_index
                .regex_candidates(r, ns, namespaced, |id| consider(id, 0));
        }
        found.sort();
        found
            .into_iter()
            .map(|(_, id)| {
                let rule = &self.refused[id as usize];
                RefusedMatch {
                    rule: RuleRef {
                        mapping: self.mappings[rule.mapping].key.clone(),
                        index: rule.index,
                        kind: rule.pattern.kind(),
                    },
                    problem: rule.problem.to_string(),
                }
            })
            .collect()
    }

    fn outcome(&self, r: &Reference, winners: &Winners) -> Resolution {
        let Some((&first, rest)) = winners.split_first() else {
            return Resolution {
                resolved: Ok(r.clone()),
                rule: None,
                conflicts: Vec::new(),
                more_conflicts: 0,
                follow_tag: false,
                refused: Vec::new(),
            };
        };
        let resolved = self.apply(first, r);
        let follows = |id: RuleId| self.rules[id as usize].action.follows_tag();
        let follow_tag = follows(first);
        let mut conflicts = Vec::new();
        let mut more_conflicts = 0;
        for &other in rest {
            // Pinned and unpinned are different images to run.
            if self.apply(other, r) != resolved || follows(other) != follow_tag {
                if conflicts.len() < NAMED_CONFLICTS {
                    conflicts.push(other);
                } else {
                    more_conflicts += 1;
                }
            }
        }
        Resolution {
            resolved,
            rule: Some(first),
            conflicts,
            more_conflicts,
            follow_tag,
            refused: Vec::new(),
        }
    }

    fn apply(&self, id: RuleId, r: &Reference) -> Result<Reference, ResolveError> {
        let rule = &self.rules[id as usize];
        let out = rule
            .action
            .apply(r, &rule.pattern)
            .map_err(ResolveError::InvalidRewrite)?;
        let out = self.local_reference(&out).unwrap_or(out);
        let follows = rule.action.follows_tag();
        let local = self.is_local(out.domain());
        if follows && self.follow_refused() && !local {
            return Err(ResolveError::FollowRefused(format!(
                "{out} is to be followed by tag, but the operator was started without \
                 --allowed-registries: it asks no registry a rule names until that list names it"
            )));
        }
        // A followed result's registry is contacted: it must be allowed even when the
        // rule keeps the requested one.
        if (follows || out.domain() != r.domain())
            && !local
            && !self.allowed_registries.allows(out.domain())
        {
            let what = if follows {
                "following its tag would ask"
            } else {
                "it points to"
            };
            return Err(ResolveError::DisallowedTarget(format!(
                "rewrite to {out}: {what} registry {}, which is not in the operator's allowed registries",
                out.domain()
            )));
        }
        Ok(out)
    }

    /// Matching by scanning every rule: the reference behaviour the index must equal,
    /// and the baseline of the benchmark.
    pub fn find_linear(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Winners {
        let mut best = Best::default();
        for (i, rule) in self.rules.iter().enumerate() {
            let key = &self.mappings[rule.mapping].key;
            if key.scope == MappingScope::Namespaced
                && (!who.namespace_rules || key.namespace.as_deref() != Some(who.namespace))
            {
                continue;
            }
            if let Some(len) = index::matches(&rule.pattern, r) {
                best.consider(
                    self,
                    RuleId::try_from(i).unwrap_or(RuleId::MAX),
                    len,
                    who,
                    mode,
                );
            }
        }
        best.finish(self)
    }

    /// [`RuleSet::resolve`] on top of [`RuleSet::find_linear`].
    pub fn resolve_linear(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Resolution {
        let local = self.local_reference(r);
        let r = local.as_ref().unwrap_or(r);
        let winners = self.find_linear(r, who, mode);
        let rank = winners.first().map(|&id| {
            self.rank(
                id,
                index::matches(&self.rules[id as usize].pattern, r).unwrap_or(0),
            )
        });
        let mut resolution = self.outcome(r, &winners);
        resolution.refused = self.refused_matching(r, who, mode, rank);
        resolution
    }
}
