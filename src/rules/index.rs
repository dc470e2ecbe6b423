//! Hash indexes over the rules of one scope (one namespace, or the cluster).
//!
//! A reference is looked up by its exact key, its repository name, each of its
//! component-boundary prefixes and each parent domain of its host: a handful of
//! hash lookups whatever the number of rules. Regex rules are compiled into one
//! `RegexSet`.

use regex::{Regex, RegexSet};

use crate::reference::Reference;

use super::{CompiledRule, RuleId, pattern::Pattern};

type Map = foldhash::HashMap<String, Vec<RuleId>>;

#[derive(Debug, Default)]
pub(crate) struct Index {
    exact: Map,
    repository: Map,
    prefix: Map,
    wildcard: Map,
    regex_ids: Vec<RuleId>,
    regexes: Vec<Regex>,
    regex_set: Option<RegexSet>,
    regex_max_priority: Option<i32>,
}

impl Index {
    pub(crate) fn insert(&mut self, id: RuleId, rule: &CompiledRule, priority: i32) {
        let (map, key) = match &rule.pattern {
            Pattern::Exact(k) => (&mut self.exact, k),
            Pattern::Repository(k) => (&mut self.repository, k),
            Pattern::Prefix(k) => (&mut self.prefix, k),
            Pattern::Wildcard(k) => (&mut self.wildcard, k),
            Pattern::Regex(re) => {
                self.regex_ids.push(id);
                self.regexes.push(re.clone());
                self.regex_max_priority = Some(
                    self.regex_max_priority
                        .map_or(priority, |p| p.max(priority)),
                );
                return;
            }
        };
        map.entry(key.clone()).or_default().push(id);
    }

    /// Builds the regex automaton once every rule is inserted.
    pub(crate) fn finish(&mut self) {
        if self.regexes.is_empty() {
            return;
        }
        // A set too large for the regex size limit falls back to matching one by one.
        self.regex_set = RegexSet::new(self.regexes.iter().map(Regex::as_str)).ok();
    }

    pub(crate) fn regex_max_priority(&self) -> Option<i32> {
        self.regex_max_priority
    }

    /// Calls `f(rule, matched prefix length)` for every exact, repository and prefix rule
    /// matching `r`. The length is 0 except for prefix rules.
    pub(crate) fn literal_candidates(&self, r: &Reference, mut f: impl FnMut(RuleId, usize)) {
        let s = r.as_str();
        if !self.exact.is_empty()
            && let Some(ids) = self.exact.get(r.exact_key().as_ref())
        {
            ids.iter().for_each(|&id| f(id, 0));
        }
        if !self.repository.is_empty()
            && let Some(ids) = self.repository.get(r.name())
        {
            ids.iter().for_each(|&id| f(id, 0));
        }
        if !self.prefix.is_empty() {
            for_each_boundary(r, |n| {
                if let Some(ids) = self.prefix.get(&s[..n]) {
                    ids.iter().for_each(|&id| f(id, n));
                }
            });
        }
        if !self.wildcard.is_empty() {
            let host = r.host();
            if !host.starts_with('[') {
                for (i, _) in host.match_indices('.') {
                    if i > 0
                        && let Some(ids) = self.wildcard.get(&host[i..])
                    {
                        ids.iter().for_each(|&id| f(id, host.len()));
                    }
                }
            }
        }
    }

    /// Calls `f(rule)` for every regex rule matching `r`.
    pub(crate) fn regex_candidates(&self, r: &Reference, mut f: impl FnMut(RuleId)) {
        match &self.regex_set {
            Some(set) => set
                .matches(r.as_str())
                .iter()
                .for_each(|i| f(self.regex_ids[i])),
            None => {
                for (re, &id) in self.regexes.iter().zip(&self.regex_ids) {
                    if re.is_match(r.as_str()) {
                        f(id);
                    }
                }
            }
        }
    }

    /// Groups of rules with the same pattern.
    pub(crate) fn buckets(&self) -> Vec<Vec<RuleId>> {
        let mut out: Vec<Vec<RuleId>> =
            [&self.exact, &self.repository, &self.prefix, &self.wildcard]
                .into_iter()
                .flat_map(|m| m.values())
                .filter(|ids| ids.len() > 1)
                .cloned()
                .collect();
        let mut by_pattern: foldhash::HashMap<&str, Vec<RuleId>> = Default::default();
        for (re, &id) in self.regexes.iter().zip(&self.regex_ids) {
            by_pattern.entry(re.as_str()).or_default().push(id);
        }
        out.extend(by_pattern.into_values().filter(|ids| ids.len() > 1));
        out
    }
}

/// Calls `f(n)` for each length `n` such that `r.as_str()[..n]` ends on a component
/// boundary: after the registry (`host:port` is one component), after each path
/// component, after the tag, and at the end.
fn for_each_boundary(r: &Reference, mut f: impl FnMut(usize)) {
    let s = r.as_str();
    let domain_len = r.domain().len();
    let name_len = r.name_len();
    let path_start = if domain_len > 0 {
        f(domain_len);
        domain_len + 1
    } else {
        0
    };
    for (i, _) in s[path_start..name_len].match_indices('/') {
        f(path_start + i);
    }
    f(name_len);
    if let Some(tag) = r.tag() {
        f(name_len + 1 + tag.len());
    }
    if r.digest().is_some() {
        f(s.len());
    }
}

/// Whether `pattern` matches `r`, and the matched prefix length: the one-rule test the
/// linear scan uses.
pub(crate) fn matches(pattern: &Pattern, r: &Reference) -> Option<usize> {
    match pattern {
        Pattern::Exact(k) => (r.exact_key().as_ref() == k).then_some(0),
        Pattern::Repository(k) => (r.name() == k).then_some(0),
        Pattern::Prefix(p) => {
            let mut hit = None;
            for_each_boundary(r, |n| {
                if &r.as_str()[..n] == p {
                    hit = Some(n);
                }
            });
            hit
        }
        Pattern::Wildcard(suffix) => {
            let host = r.host();
            (!host.starts_with('[') && host.len() > suffix.len() && host.ends_with(suffix.as_str()))
                .then_some(host.len())
        }
        Pattern::Regex(re) => re.is_match(r.as_str()).then_some(0),
    }
}
