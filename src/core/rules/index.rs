//! Hash indexes over the rules of one scope (one namespace, or the cluster).
//!
//! A reference is looked up by its exact key, its repository name, each of its
//! component-boundary prefixes and each parent domain of its host: a handful of
//! hash lookups whatever the number of rules. Regex rules are grouped by the first
//! component every match must start with (read from the pattern's literal prefix, e.g.
//! `ghcr.io` for `ghcr\.io/acme/.*`), and each group is compiled into one `RegexSet`.

use std::collections::BTreeMap;

use regex::{Regex, RegexSet, RegexSetBuilder};

use crate::core::reference::Reference;

use super::compiled_rule::RuleId;
use super::pattern::Pattern;

/// Rules of one key, sorted by scope: cluster rules (scope 0) first, then each
/// namespace's, so that a namespace's rules are found by binary search.
#[derive(Debug, Default)]
struct Bucket {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// 0: cluster-scoped; otherwise the interned namespace.
    scope: u32,
    kind: LiteralKind,
    id: RuleId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LiteralKind {
    Exact,
    Repository,
    Prefix,
    Wildcard,
}

impl Bucket {
    /// Entries of the cluster scope and of namespace scope `ns`.
    fn visible(&self, ns: Option<u32>) -> impl Iterator<Item = &Entry> {
        let cluster_end = self.entries.partition_point(|e| e.scope == 0);
        let (start, end) = match ns {
            Some(ns) => (
                self.entries.partition_point(|e| e.scope < ns),
                self.entries.partition_point(|e| e.scope <= ns),
            ),
            None => (0, 0),
        };
        self.entries[..cluster_end]
            .iter()
            .chain(&self.entries[start..end])
    }
}

type Map = foldhash::HashMap<String, Bucket>;

/// The compiled size of one group's regex set; a larger group matches regex by regex.
const SET_LIMIT: usize = 4 << 20;

/// Every rule of a rule set, indexed.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Interned namespaces (1-based).
    namespaces: foldhash::HashMap<String, u32>,
    /// Exact keys, repository names and literal prefixes: all are strings that end on a
    /// component boundary of the references they match, so one table serves the three.
    literal: Map,
    /// `*.domain` wildcards, by `.domain`.
    wildcard: Map,
    /// Regex rules by scope (index 0: cluster; i: the i-th interned namespace).
    regex: Vec<Option<RegexScope>>,
}

#[derive(Debug, Default)]
struct RegexScope {
    /// Regex rules whose matches all start with a known first component, by that component.
    by_host: foldhash::HashMap<String, RegexGroup>,
    /// Regex rules that may match under any first component.
    any: RegexGroup,
    max_priority: i32,
}

#[derive(Debug, Default)]
struct RegexGroup {
    ids: Vec<RuleId>,
    regexes: Vec<Regex>,
    set: Option<RegexSet>,
}

impl RegexGroup {
    fn finish(&mut self) {
        if !self.regexes.is_empty() {
            // A set past its size limit falls back to matching one by one.
            self.set = RegexSetBuilder::new(self.regexes.iter().map(Regex::as_str))
                .size_limit(SET_LIMIT)
                .dfa_size_limit(super::regex_cost::DFA_CACHE_LIMIT)
                .build()
                .ok();
        }
    }

    fn matches(&self, s: &str, f: &mut impl FnMut(RuleId)) {
        match &self.set {
            Some(set) => set.matches(s).iter().for_each(|i| f(self.ids[i])),
            None => {
                for (re, &id) in self.regexes.iter().zip(&self.ids) {
                    if re.is_match(s) {
                        f(id);
                    }
                }
            }
        }
    }
}

/// The first component (up to the first `/`) that every match of `re` starts with, when
/// its literal prefixes determine one.
fn required_first_component(re: &Regex) -> Option<String> {
    let hir = regex_syntax::Parser::new().parse(re.as_str()).ok()?;
    let seq = regex_syntax::hir::literal::Extractor::new().extract(&hir);
    let mut found: Option<&[u8]> = None;
    for lit in seq.literals()? {
        let bytes = lit.as_bytes();
        let slash = bytes.iter().position(|&b| b == b'/')?;
        match found {
            None => found = Some(&bytes[..slash]),
            Some(prev) if prev == &bytes[..slash] => {}
            Some(_) => return None,
        }
    }
    String::from_utf8(found?.to_vec()).ok()
}

impl Index {
    /// The interned scope of a namespace, 0 for the cluster scope.
    fn scope_of(&mut self, namespace: Option<&str>) -> u32 {
        let Some(ns) = namespace else { return 0 };
        // At most one scope per mapping, and a rule set holds far fewer than 2^32 mappings.
        let next = u32::try_from(self.namespaces.len() + 1).unwrap_or(u32::MAX);
        *self.namespaces.entry(ns.to_string()).or_insert(next)
    }

    /// The interned scope of a requesting namespace, if any rule lives there.
    pub(crate) fn namespace(&self, namespace: &str) -> Option<u32> {
        self.namespaces.get(namespace).copied()
    }

    pub(crate) fn insert(
        &mut self,
        id: RuleId,
        pattern: &Pattern,
        namespace: Option<&str>,
        priority: i32,
    ) {
        let scope = self.scope_of(namespace);
        let (map, key, kind) = match pattern {
            Pattern::Exact(k) => (&mut self.literal, k, LiteralKind::Exact),
            Pattern::Repository(k) => (&mut self.literal, k, LiteralKind::Repository),
            Pattern::Prefix(k) => (&mut self.literal, k, LiteralKind::Prefix),
            Pattern::Wildcard(k) => (&mut self.wildcard, k, LiteralKind::Wildcard),
            Pattern::Regex(re, _) => {
                let slot = scope as usize;
                if self.regex.len() <= slot {
                    self.regex.resize_with(slot + 1, || None);
                }
                let regexes = self.regex[slot].get_or_insert_with(|| RegexScope {
                    max_priority: priority,
                    ..RegexScope::default()
                });
                regexes.max_priority = regexes.max_priority.max(priority);
                let group = match required_first_component(re) {
                    Some(host) => regexes.by_host.entry(host).or_default(),
                    None => &mut regexes.any,
                };
                group.ids.push(id);
                group.regexes.push(re.clone());
                return;
            }
        };
        let bucket = map.entry(key.clone()).or_default();
        let at = bucket.entries.partition_point(|e| e.scope <= scope);
        bucket.entries.insert(at, Entry { scope, kind, id });
    }

    /// Builds the regex automata once every rule is inserted.
    pub(crate) fn finish(&mut self) {
        for scope in self.regex.iter_mut().flatten() {
            scope.any.finish();
            scope.by_host.values_mut().for_each(RegexGroup::finish);
        }
    }

    /// Highest priority of the regex rules visible from namespace scope `ns`, with whether
    /// it is namespaced.
    pub(crate) fn regex_max_priority(&self, ns: Option<u32>) -> [Option<i32>; 2] {
        let of = |scope: u32| {
            self.regex
                .get(scope as usize)
                .and_then(Option::as_ref)
                .map(|r| r.max_priority)
        };
        [ns.and_then(of), of(0)]
    }

    /// Calls `f(rule, prefix length)` for every exact, repository and prefix rule visible
    /// from namespace scope `ns` that matches `r`. The length is 0 except for prefix rules,
    /// whose length is that of the prefix as written (`*.example.com`: 13).
    pub(crate) fn literal_candidates(
        &self,
        r: &Reference,
        ns: Option<u32>,
        mut f: impl FnMut(RuleId, usize),
    ) {
        let s = r.as_str();
        if !self.literal.is_empty() {
            let exact_len = r.exact_key().len();
            let name_len = r.name_len();
            r.for_each_boundary(|n| {
                let Some(bucket) = self.literal.get(&s[..n]) else {
                    return;
                };
                for e in bucket.visible(ns) {
                    match e.kind {
                        LiteralKind::Exact if n == exact_len => f(e.id, 0),
                        LiteralKind::Repository if n == name_len => f(e.id, 0),
                        LiteralKind::Prefix => f(e.id, n),
                        _ => {}
                    }
                }
            });
        }
        if !self.wildcard.is_empty() {
            let host = r.host();
            if !host.starts_with('[') {
                for (i, _) in host.match_indices('.') {
                    if i > 0
                        && let Some(bucket) = self.wildcard.get(&host[i..])
                    {
                        // As written: `*.` and the domain (containers/image's
                        // FindRegistry compares the prefix strings' lengths).
                        let written = host.len() - i + 1;
                        bucket.visible(ns).for_each(|e| f(e.id, written));
                    }
                }
            }
        }
    }

    /// Calls `f(rule)` for every regex rule of the namespace scope (`namespaced`) or of
    /// the cluster scope that matches `r`.
    pub(crate) fn regex_candidates(
        &self,
        r: &Reference,
        ns: Option<u32>,
        namespaced: bool,
        mut f: impl FnMut(RuleId),
    ) {
        let scope = if namespaced { ns } else { Some(0) };
        let Some(regexes) = scope
            .and_then(|s| self.regex.get(s as usize))
            .and_then(Option::as_ref)
        else {
            return;
        };
        let s = r.as_str();
        if let Some(group) = regexes
            .by_host
            .get(crate::core::reference::domain_of_normalized(s))
        {
            group.matches(s, &mut f);
        }
        regexes.any.matches(s, &mut f);
    }

    /// Groups of rules of one scope with the same pattern.
    pub(crate) fn buckets(&self) -> Vec<Vec<RuleId>> {
        let mut out = Vec::new();
        for bucket in self.literal.values().chain(self.wildcard.values()) {
            let mut groups: BTreeMap<(u32, u8), Vec<RuleId>> = BTreeMap::new();
            for e in &bucket.entries {
                groups
                    .entry((e.scope, e.kind as u8))
                    .or_default()
                    .push(e.id);
            }
            out.extend(groups.into_values().filter(|ids| ids.len() > 1));
        }
        for scope in self.regex.iter().flatten() {
            let mut by_pattern: BTreeMap<&str, Vec<RuleId>> = BTreeMap::new();
            for group in scope.by_host.values().chain(std::iter::once(&scope.any)) {
                for (re, &id) in group.regexes.iter().zip(&group.ids) {
                    by_pattern.entry(re.as_str()).or_default().push(id);
                }
            }
            out.extend(by_pattern.into_values().filter(|ids| ids.len() > 1));
        }
        out
    }
}

/// Whether `pattern` matches `r`, and the matched prefix length: the one-rule test the
/// linear scan uses.
pub(crate) fn matches(pattern: &Pattern, r: &Reference) -> Option<usize> {
    match pattern {
        Pattern::Exact(k) => (r.exact_key() == k).then_some(0),
        Pattern::Repository(k) => (r.name() == k).then_some(0),
        Pattern::Prefix(p) => {
            let mut hit = None;
            r.for_each_boundary(|n| {
                if &r.as_str()[..n] == p {
                    hit = Some(n);
                }
            });
            hit
        }
        Pattern::Wildcard(suffix) => {
            let host = r.host();
            (!host.starts_with('[') && host.len() > suffix.len() && host.ends_with(suffix.as_str()))
                .then_some(suffix.len() + 1)
        }
        Pattern::Regex(re, _) => re.is_match(r.as_str()).then_some(0),
    }
}
