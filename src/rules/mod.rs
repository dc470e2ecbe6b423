//! The mapping engine: ImageMappings and ClusterImageMappings compiled into an
//! immutable, indexed rule set that resolves image references.
//!
//! Precedence when several rules match one reference: higher `priority`; then
//! namespaced before cluster-scoped; then `exact` > `repository` > longest `prefix`
//! (a literal prefix before a `*.` wildcard of the same length) > `regex`; then
//! mapping name and rule index. Rules tied on everything but name and index that
//! give different results are a conflict. Mapping is single pass.

mod index;
mod pattern;
mod rewrite;

use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use crate::api::{ClusterImageMapping, ImageMapping, MappingRule, RuleSource};
use crate::reference::{self, Reference};

pub use pattern::{MatchKind, Pattern};
pub use rewrite::Action;

use index::Index;

/// Whether a mapping is an ImageMapping or a ClusterImageMapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Namespaced,
    Cluster,
}

impl Scope {
    pub fn kind(self) -> &'static str {
        match self {
            Scope::Namespaced => "ImageMapping",
            Scope::Cluster => "ClusterImageMapping",
        }
    }
}

/// A mapping as the engine sees it, from either kind.
#[derive(Debug, Clone)]
pub struct MappingInput {
    pub scope: Scope,
    /// Namespace of an ImageMapping; `None` for a ClusterImageMapping.
    pub namespace: Option<String>,
    pub name: String,
    pub priority: i32,
    pub selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
    pub dry_run: bool,
    pub rules: Vec<MappingRule>,
}

impl From<&ImageMapping> for MappingInput {
    fn from(m: &ImageMapping) -> Self {
        MappingInput {
            scope: Scope::Namespaced,
            namespace: Some(m.namespace().unwrap_or_default()),
            name: m.name_any(),
            priority: m.spec.priority,
            selector: m.spec.selector.clone(),
            namespace_selector: None,
            dry_run: m.spec.dry_run,
            rules: m.spec.rules.clone(),
        }
    }
}

impl From<&ClusterImageMapping> for MappingInput {
    fn from(m: &ClusterImageMapping) -> Self {
        MappingInput {
            scope: Scope::Cluster,
            namespace: None,
            name: m.name_any(),
            priority: m.spec.priority,
            selector: m.spec.selector.clone(),
            namespace_selector: m.spec.namespace_selector.clone(),
            dry_run: m.spec.dry_run,
            rules: m.spec.rules.clone(),
        }
    }
}

/// Identifies a mapping: kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingKey {
    pub scope: Scope,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for MappingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.scope.kind(), self.name),
            None => write!(f, "{} {}", self.scope.kind(), self.name),
        }
    }
}

/// Why a rule or mapping is not (fully) usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemReason {
    InvalidRule,
    Conflict,
    DisallowedTarget,
}

impl ProblemReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemReason::InvalidRule => "InvalidRule",
            ProblemReason::Conflict => "Conflict",
            ProblemReason::DisallowedTarget => "DisallowedTarget",
        }
    }
}

/// A problem found while compiling, attached to one rule of one mapping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleProblem {
    pub mapping: MappingKey,
    pub rule: usize,
    pub reason: ProblemReason,
    pub message: String,
}

/// Options that shape compilation.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Registries (`host[:port]` or `*.domain`) that rewrites may point to. `None`: any.
    pub allowed_registries: Option<Vec<String>>,
}

/// Who requests an image: the VM's namespace, its labels and its namespace's labels.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub namespace_labels: &'a BTreeMap<String, String>,
}

/// Whether dry-run mappings take part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// What actually applies: dry-run mappings are ignored.
    Live,
    /// What would apply if every dry-run mapping were live.
    Preview,
}

/// Most rules a mapping may hold (the CRD enforces it too).
pub const MAX_RULES: usize = 256;

/// Index of a compiled rule in a [`RuleSet`].
pub type RuleId = u32;

/// The winning rule first, then the rules tied with it; empty when no rule matched.
pub type Winners = smallvec::SmallVec<[RuleId; 4]>;

#[derive(Debug, Clone)]
struct CompiledMapping {
    key: MappingKey,
    priority: i32,
    selector: Option<Selector>,
    namespace_selector: Option<Selector>,
    dry_run: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct CompiledRule {
    mapping: usize,
    index: usize,
    pattern: Pattern,
    action: Action,
}

/// The precedence of one candidate; smaller sorts first and wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    priority: Reverse<i32>,
    scope: Scope,
    kind: MatchKind,
    prefix_len: Reverse<usize>,
    wildcard: bool,
}

/// The immutable, indexed rules of a set of mappings.
#[derive(Debug, Default)]
pub struct RuleSet {
    mappings: Vec<CompiledMapping>,
    rules: Vec<CompiledRule>,
    index: Index,
    problems: Vec<RuleProblem>,
    allowed_registries: Option<Vec<String>>,
}

/// Why the winning rule produced no usable reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The rewrite's result is not an image reference.
    #[error("{0}")]
    InvalidRewrite(String),
    /// The result lies outside the operator's allowed registries.
    #[error("{0}")]
    DisallowedTarget(String),
}

/// The outcome of resolving one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The reference to use, or why the winning rule could not produce one.
    pub resolved: Result<Reference, ResolveError>,
    /// The winning rule; `None` when no rule matched.
    pub rule: Option<RuleId>,
    /// Rules tied with the winner that give a different result.
    pub conflicts: Vec<RuleId>,
}

impl RuleSet {
    /// Compiles mappings. Invalid rules are left out and reported in [`RuleSet::problems`];
    /// the other rules of the same mapping still apply.
    pub fn compile(inputs: &[MappingInput], options: &CompileOptions) -> RuleSet {
        let mut set = RuleSet {
            allowed_registries: options.allowed_registries.clone(),
            ..RuleSet::default()
        };
        let mut order: Vec<&MappingInput> = inputs.iter().collect();
        order.sort_by(|a, b| {
            (a.scope, &a.namespace, &a.name).cmp(&(b.scope, &b.namespace, &b.name))
        });
        for input in order {
            let key = MappingKey {
                scope: input.scope,
                namespace: match input.scope {
                    Scope::Namespaced => input.namespace.clone(),
                    Scope::Cluster => None,
                },
                name: input.name.clone(),
            };
            let selector = match compile_selector(input.selector.as_ref(), "selector") {
                Ok(s) => s,
                Err(message) => {
                    set.problem_all(
                        &key,
                        input.rules.len(),
                        ProblemReason::InvalidRule,
                        &message,
                    );
                    continue;
                }
            };
            let namespace_selector =
                match compile_selector(input.namespace_selector.as_ref(), "namespaceSelector") {
                    Ok(s) => s,
                    Err(message) => {
                        set.problem_all(
                            &key,
                            input.rules.len(),
                            ProblemReason::InvalidRule,
                            &message,
                        );
                        continue;
                    }
                };
            let mapping = set.mappings.len();
            set.mappings.push(CompiledMapping {
                key: key.clone(),
                priority: input.priority,
                selector,
                namespace_selector,
                dry_run: input.dry_run,
            });
            if input.rules.len() > MAX_RULES {
                set.problem(
                    &key,
                    MAX_RULES,
                    ProblemReason::InvalidRule,
                    format!(
                        "spec.rules has {} rules; at most {MAX_RULES} are allowed, the rest are ignored",
                        input.rules.len()
                    ),
                );
            }
            for (index, rule) in input.rules.iter().enumerate().take(MAX_RULES) {
                let compiled = Pattern::compile(&rule.match_).and_then(|pattern| {
                    let action = Action::compile(rule, &pattern)?;
                    Ok((pattern, action))
                });
                let (pattern, action) = match compiled {
                    Ok(c) => c,
                    Err(message) => {
                        set.problem(&key, index, ProblemReason::InvalidRule, message);
                        continue;
                    }
                };
                if let Some(domain) = action.static_domain()
                    && !set.registry_allowed(&domain)
                {
                    set.problem(
                        &key,
                        index,
                        ProblemReason::DisallowedTarget,
                        format!("rewrites to registry {domain}, which is not in the operator's allowed registries"),
                    );
                    continue;
                }
                let id = set.rules.len() as RuleId;
                set.rules.push(CompiledRule {
                    mapping,
                    index,
                    pattern,
                    action,
                });
                set.index.insert(
                    id,
                    &set.rules[id as usize],
                    key.namespace.as_deref(),
                    input.priority,
                );
            }
        }
        set.index.finish();
        set.find_static_conflicts();
        set.problems.sort();
        set.problems.dedup();
        set
    }

    fn problem(&mut self, key: &MappingKey, rule: usize, reason: ProblemReason, message: String) {
        self.problems.push(RuleProblem {
            mapping: key.clone(),
            rule,
            reason,
            message,
        });
    }

    fn problem_all(
        &mut self,
        key: &MappingKey,
        rules: usize,
        reason: ProblemReason,
        message: &str,
    ) {
        for rule in 0..rules.max(1) {
            self.problem(key, rule, reason, message.to_string());
        }
    }

    /// Problems found while compiling: invalid rules, disallowed targets, and rules that
    /// conflict for every VM they could apply to.
    pub fn problems(&self) -> &[RuleProblem] {
        &self.problems
    }

    /// Number of compiled (usable) rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Where a rule comes from, as recorded in a VM's status.
    pub fn source(&self, id: RuleId) -> RuleSource {
        let rule = &self.rules[id as usize];
        let key = &self.mappings[rule.mapping].key;
        RuleSource {
            kind: key.scope.kind().to_string(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            rule: rule.index as i32,
            match_kind: rule.pattern.kind().as_str().to_string(),
        }
    }

    /// The mapping a rule belongs to and its index there.
    pub fn rule_location(&self, id: RuleId) -> (&MappingKey, usize) {
        let rule = &self.rules[id as usize];
        (&self.mappings[rule.mapping].key, rule.index)
    }

    /// Whether the rule belongs to a dry-run mapping.
    pub fn is_dry_run(&self, id: RuleId) -> bool {
        self.mappings[self.rules[id as usize].mapping].dry_run
    }

    fn registry_allowed(&self, domain: &str) -> bool {
        let Some(allowed) = &self.allowed_registries else {
            return true;
        };
        let host = reference::host_of(domain);
        allowed.iter().any(|a| match a.strip_prefix("*.") {
            Some(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix)
                    && host[..host.len() - suffix.len()].ends_with('.')
            }
            None => a == domain || a == host,
        })
    }

    fn applies(&self, id: RuleId, who: &Requester<'_>, mode: Mode) -> bool {
        let m = &self.mappings[self.rules[id as usize].mapping];
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

    fn rank(&self, id: RuleId, prefix_len: usize) -> Rank {
        let rule = &self.rules[id as usize];
        let m = &self.mappings[rule.mapping];
        Rank {
            priority: Reverse(m.priority),
            scope: m.key.scope,
            kind: rule.pattern.kind(),
            prefix_len: Reverse(prefix_len),
            wildcard: matches!(rule.pattern, Pattern::Wildcard(_)),
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

    /// The winning rule for `r` and the rules tied with it, without rewriting.
    /// Cost depends on the number of components of `r`, not on the number of rules
    /// (regex rules are matched as one automaton, and only when they could win).
    pub fn find(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Winners {
        let mut best = Best::default();
        let ns = self.index.namespace(who.namespace);
        self.index
            .literal_candidates(r, ns, |id, len| best.consider(self, id, len, who, mode));
        let [ns_max, cluster_max] = self.index.regex_max_priority(ns);
        for (max_priority, scope) in [(ns_max, Scope::Namespaced), (cluster_max, Scope::Cluster)] {
            let Some(max_priority) = max_priority else {
                continue;
            };
            let floor = Rank {
                priority: Reverse(max_priority),
                scope,
                kind: MatchKind::Regex,
                prefix_len: Reverse(0),
                wildcard: false,
            };
            if best.rank.is_none_or(|b| floor <= b) {
                self.index
                    .regex_candidates(r, ns, scope == Scope::Namespaced, |id| {
                        best.consider(self, id, 0, who, mode)
                    });
            }
        }
        best.finish(self)
    }

    /// Resolves `r` for `who`: the rewritten reference, the rule that decided it, and
    /// any conflicting rules.
    pub fn resolve(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Resolution {
        let winners = self.find(r, who, mode);
        self.outcome(r, winners)
    }

    fn outcome(&self, r: &Reference, winners: Winners) -> Resolution {
        let Some((&first, rest)) = winners.split_first() else {
            return Resolution {
                resolved: Ok(r.clone()),
                rule: None,
                conflicts: Vec::new(),
            };
        };
        let resolved = self.apply(first, r);
        let conflicts = rest
            .iter()
            .copied()
            .filter(|&other| self.apply(other, r) != resolved)
            .collect();
        Resolution {
            resolved,
            rule: Some(first),
            conflicts,
        }
    }

    fn apply(&self, id: RuleId, r: &Reference) -> Result<Reference, ResolveError> {
        let rule = &self.rules[id as usize];
        let out = rule
            .action
            .apply(r, &rule.pattern)
            .map_err(ResolveError::InvalidRewrite)?;
        if out.domain() != r.domain() && !self.registry_allowed(out.domain()) {
            return Err(ResolveError::DisallowedTarget(format!(
                "rewrite to {out} points to registry {}, which is not in the operator's allowed registries",
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
            if key.scope == Scope::Namespaced && key.namespace.as_deref() != Some(who.namespace) {
                continue;
            }
            if let Some(len) = index::matches(&rule.pattern, r) {
                best.consider(self, i as RuleId, len, who, mode);
            }
        }
        best.finish(self)
    }

    /// [`RuleSet::resolve`] on top of [`RuleSet::find_linear`].
    pub fn resolve_linear(&self, r: &Reference, who: &Requester<'_>, mode: Mode) -> Resolution {
        let winners = self.find_linear(r, who, mode);
        self.outcome(r, winners)
    }

    /// Rules that share a pattern, priority, scope and selectors with another rule but
    /// rewrite differently: they conflict for every VM either applies to.
    fn find_static_conflicts(&mut self) {
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
                let (key, index) = self.rule_location(this);
                let (other_key, other_index) = self.rule_location(other);
                let message = format!(
                    "rule {index} conflicts with rule {other_index} of {other_key}: same match and priority, different result"
                );
                self.problem(&key.clone(), index, ProblemReason::Conflict, message);
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

/// The best-ranked candidates seen so far.
#[derive(Default)]
struct Best {
    rank: Option<Rank>,
    winners: Winners,
}

impl Best {
    fn consider(
        &mut self,
        set: &RuleSet,
        id: RuleId,
        prefix_len: usize,
        who: &Requester<'_>,
        mode: Mode,
    ) {
        if !set.applies(id, who, mode) {
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

    fn finish(mut self, set: &RuleSet) -> Winners {
        if self.winners.len() > 1 {
            self.winners.sort_by(|&a, &b| set.tie_order(a, b));
        }
        self.winners
    }
}

fn compile_selector(
    selector: Option<&LabelSelector>,
    field: &str,
) -> Result<Option<Selector>, String> {
    let Some(selector) = selector else {
        return Ok(None);
    };
    let compiled = Selector::try_from(selector.clone())
        .map_err(|e| format!("spec.{field} is not a valid label selector: {e}"))?;
    Ok(if compiled.selects_all() {
        None
    } else {
        Some(compiled)
    })
}

#[cfg(test)]
mod tests;
