//! What regex rules may cost: each regex is compiled within a size limit and its memory
//! measured, and the regexes of one mapping, and of one namespace (or of every
//! ClusterImageMapping), share a budget. A pattern past a limit is a rule problem naming
//! the limit, found without building the automaton past it. Pure.

use std::collections::HashMap;

use regex::{Regex, RegexBuilder};
use regex_automata::meta;

/// Most memory one compiled regex may take.
pub const REGEX_LIMIT: usize = 256 << 10;
/// Most memory the regex rules of one mapping may take together.
pub const MAPPING_LIMIT: usize = 4 << 20;
/// Most memory the regex rules of one namespace's mappings (or of all ClusterImageMappings)
/// may take together.
pub const SCOPE_LIMIT: usize = 16 << 20;
/// Most memory of the lazy DFA cache a regex (or a set of them) grows while matching.
pub const DFA_CACHE_LIMIT: usize = 256 << 10;

/// Compiles `anchored` (a rule's pattern, wrapped in `^(?:…)$`) within [`REGEX_LIMIT`]:
/// the regex and the memory it takes. The error (to follow the pattern in a message) says
/// what to write instead.
pub fn compile(anchored: &str) -> Result<(Regex, usize), String> {
    let too_large = || {
        format!(
            "compiles to more than {} KiB, the operator's limit per regex (a Unicode class such as \\w or . repeated many times is large: write [a-z0-9_] or a shorter repetition)",
            REGEX_LIMIT >> 10
        )
    };
    // Far past the limit by its shape (a large class repeated many times): refused before
    // any automaton is built for it.
    if let Ok(hir) = regex_syntax::Parser::new().parse(anchored)
        && shape_cost(&hir) > REGEX_LIMIT.saturating_mul(4)
    {
        return Err(too_large());
    }
    // regex's own errors say what is wrong with a pattern; the meta engine it is built on
    // measures what the result takes.
    let regex = RegexBuilder::new(anchored)
        .size_limit(REGEX_LIMIT)
        .dfa_size_limit(DFA_CACHE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => too_large(),
            other => format!(
                "is not a valid RE2 expression: {}",
                crate::core::excerpt::excerpt(&other.to_string())
            ),
        })?;
    let cost = meta::Builder::new()
        .configure(
            meta::Config::new()
                .nfa_size_limit(Some(REGEX_LIMIT))
                .onepass_size_limit(Some(REGEX_LIMIT))
                .dfa_size_limit(Some(REGEX_LIMIT))
                .hybrid_cache_capacity(DFA_CACHE_LIMIT),
        )
        .build(anchored)
        .map_err(|_| too_large())?
        .memory_usage();
    if cost > REGEX_LIMIT {
        return Err(too_large());
    }
    Ok((regex, cost))
}

/// A lower estimate of what `hir` compiles to, in bytes: each class range and literal byte
/// costs at least a state, repeated as often as a bounded repetition repeats it.
fn shape_cost(hir: &regex_syntax::hir::Hir) -> usize {
    use regex_syntax::hir::{Class, HirKind};
    const STATE: usize = 16;
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        HirKind::Literal(lit) => lit.0.len().saturating_mul(STATE),
        HirKind::Class(Class::Unicode(c)) => c.ranges().len().saturating_mul(STATE),
        HirKind::Class(Class::Bytes(c)) => c.ranges().len().saturating_mul(STATE),
        HirKind::Repetition(r) => {
            let times = r.max.unwrap_or(r.min).max(r.min).max(1);
            shape_cost(&r.sub).saturating_mul(usize::try_from(times).unwrap_or(usize::MAX))
        }
        HirKind::Capture(c) => shape_cost(&c.sub),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => {
            subs.iter().map(shape_cost).fold(0, usize::saturating_add)
        }
    }
}

/// Regexes compiled for one rule set, and those of the set before it: a recompile (every
/// mapping event brings one) compiles only the patterns that are new.
#[derive(Debug, Default, Clone)]
pub struct RegexCache {
    previous: HashMap<String, Result<(Regex, usize), String>>,
    current: HashMap<String, Result<(Regex, usize), String>>,
}

impl RegexCache {
    /// A cache that reuses what `previous` compiled (and keeps only what is used again).
    #[must_use]
    pub fn after(previous: &RegexCache) -> RegexCache {
        RegexCache {
            previous: previous.current.clone(),
            current: HashMap::new(),
        }
    }

    /// [`compile`], or what an earlier compile of the same pattern gave.
    pub fn compile(&mut self, anchored: &str) -> Result<(Regex, usize), String> {
        if let Some(done) = self.current.get(anchored) {
            return done.clone();
        }
        let done = self
            .previous
            .remove(anchored)
            .unwrap_or_else(|| compile(anchored));
        self.current.insert(anchored.to_string(), done.clone());
        done
    }

    /// Drops what the set before compiled and this one did not use.
    pub fn finish(&mut self) {
        self.previous = HashMap::new();
    }
}

/// What the regex rules compiled so far cost, by mapping and by scope.
#[derive(Debug, Default)]
pub struct RegexBudget {
    /// By namespace (`None`: the ClusterImageMappings).
    scopes: HashMap<Option<String>, usize>,
    mapping: usize,
}

impl RegexBudget {
    /// A new mapping starts: its own budget is whole.
    pub fn next_mapping(&mut self) {
        self.mapping = 0;
    }

    /// Charges `cost` to the current mapping and to `scope`; `Err` says which limit it
    /// would pass (and nothing is charged).
    pub fn charge(&mut self, scope: Option<&str>, cost: usize) -> Result<(), String> {
        if self.mapping + cost > MAPPING_LIMIT {
            return Err(format!(
                "match.regex is left out: the mapping's regex rules together would take more than {} MiB, the operator's limit per mapping",
                MAPPING_LIMIT >> 20
            ));
        }
        let used = self.scopes.entry(scope.map(str::to_string)).or_default();
        if *used + cost > SCOPE_LIMIT {
            let whose = match scope {
                Some(ns) => format!("namespace {ns}'s mappings"),
                None => "the ClusterImageMappings".to_string(),
            };
            return Err(format!(
                "match.regex is left out: the regex rules of {whose} together would take more than {} MiB, the operator's limit",
                SCOPE_LIMIT >> 20
            ));
        }
        *used += cost;
        self.mapping += cost;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_patterns_compile_and_huge_ones_are_refused_with_the_limit() {
        for ok in [
            r"^(?:ghcr\.io/acme/(.*))$",
            r"^(?:docker\.io/library/[a-z0-9]+(?:[._-][a-z0-9]+)*:.*)$",
            r"^(?:\w+)$",
        ] {
            let (re, cost) = compile(ok).unwrap();
            assert!(cost > 0 && cost <= REGEX_LIMIT, "{ok}: {cost}");
            assert_eq!(re.as_str(), ok);
        }
        for huge in [r"^(?:\w{200})$", r"^(?:.{1000})$", r"^(?:\pL{50})$"] {
            let e = compile(huge).unwrap_err();
            assert!(
                e.contains("256 KiB, the operator's limit per regex"),
                "{huge}: {e}"
            );
        }
        let e = compile("^(?:(a)\\1)$").unwrap_err();
        assert!(e.contains("backreference"), "{e}");
    }

    #[test]
    fn the_shape_refuses_only_what_is_far_past_the_limit() {
        let cost = |p: &str| shape_cost(&regex_syntax::Parser::new().parse(p).unwrap());
        assert!(cost(r"\w{200}") > REGEX_LIMIT * 4);
        for ordinary in [
            r"ghcr\.io/acme/(.*)",
            r"[a-z]{1000}",
            r"\w+",
            r"(a|b|c){50}",
        ] {
            assert!(
                cost(ordinary) < REGEX_LIMIT,
                "{ordinary}: {}",
                cost(ordinary)
            );
        }
    }

    #[test]
    fn a_recompile_compiles_only_new_patterns_and_keeps_only_used_ones() {
        let mut first = RegexCache::default();
        let (a, _) = first.compile("^(?:a.*)$").unwrap();
        assert!(first.compile("^(?:\\w{200})$").is_err());
        first.finish();
        let mut second = RegexCache::after(&first);
        let (again, _) = second.compile("^(?:a.*)$").unwrap();
        // The same compiled regex (its memory shared), not a new one.
        assert_eq!(format!("{a:?}"), format!("{again:?}"));
        second.compile("^(?:b)$").unwrap();
        second.finish();
        assert_eq!(second.current.len(), 2);
        assert!(second.previous.is_empty());
        let third = RegexCache::after(&second);
        assert!(!third.previous.contains_key("^(?:\\w{200})$"));
    }

    #[test]
    fn mappings_and_scopes_share_budgets() {
        let mut budget = RegexBudget::default();
        let per = REGEX_LIMIT;
        for _ in 0..MAPPING_LIMIT / per {
            budget.charge(Some("dev"), per).unwrap();
        }
        let e = budget.charge(Some("dev"), per).unwrap_err();
        assert!(e.contains("4 MiB, the operator's limit per mapping"), "{e}");
        // The namespace's other mappings share what is left of 16 MiB.
        for _ in 0..3 {
            budget.next_mapping();
            for _ in 0..MAPPING_LIMIT / per {
                budget.charge(Some("dev"), per).unwrap();
            }
        }
        budget.next_mapping();
        let e = budget.charge(Some("dev"), per).unwrap_err();
        assert!(
            e.contains("namespace dev's mappings") && e.contains("16 MiB"),
            "{e}"
        );
        // Another namespace, and the cluster scope, have their own.
        budget.charge(Some("other"), per).unwrap();
        budget.charge(None, per).unwrap();
    }
}
