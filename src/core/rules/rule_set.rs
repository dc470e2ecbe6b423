//! The rule set: mappings compiled into immutable, indexed rules (invalid ones left out and
//! reported as problems), and what a compiled rule is by its id.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Selector;

use super::compiled_rule::{CompiledMapping, CompiledRule, RefusedRule, RuleId};
use super::index::Index;
use super::mapping_input::{MappingInput, MappingKey, RuleRef};
use super::pattern::Pattern;
use super::problem::{ProblemDetail, RuleProblem};
use super::regex_cost::{RegexBudget, RegexCache};
use super::rewrite::Action;
use crate::core::allowed_registries::AllowedRegistries;
use crate::core::local_registry::LocalRegistry;
use crate::core::reference::Reference;

/// Options that shape compilation.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Registries (`host[:port]` or `*.domain`) that rewrites may point to, and that
    /// followed tags may be checked at.
    pub allowed_registries: AllowedRegistries,
    /// Whether `followTag` needs a list of allowed registries (the operator: it contacts
    /// the registry it follows, and never one a tenant picked freely). `imagemap resolve`,
    /// run on a user's own machine, follows tags anywhere.
    pub follow_needs_list: bool,
    /// The cluster's local registry, when it advertises one: known by all its names,
    /// allowed, and followed without a list.
    pub local_registry: Option<Arc<LocalRegistry>>,
}

/// Most rules a mapping may hold (the CRD enforces it too).
pub const MAX_RULES: usize = 256;

/// The immutable, indexed rules of a set of mappings.
#[derive(Debug, Default)]
pub struct RuleSet {
    pub(super) mappings: Vec<CompiledMapping>,
    pub(super) rules: Vec<CompiledRule>,
    pub(super) index: Index,
    pub(super) problems: Vec<RuleProblem>,
    pub(super) allowed_registries: AllowedRegistries,
    pub(super) follow_needs_list: bool,
    pub(super) local_registry: Option<Arc<LocalRegistry>>,
    /// The regexes this set compiled, for the next one to reuse.
    pub(super) regexes: RegexCache,
    /// Each mapping as given (valid or not), to tell what the next set changed.
    pub(super) inputs: BTreeMap<MappingKey, MappingInput>,
    /// The rules refused whose `match` compiles, and their index: what admission warns of.
    pub(super) refused: Vec<RefusedRule>,
    pub(super) refused_index: Index,
}

impl RuleSet {
    /// Compiles mappings. Invalid rules are left out and reported in [`RuleSet::problems`];
    /// the other rules of the same mapping still apply.
    #[must_use]
    pub fn compile(inputs: &[MappingInput], options: &CompileOptions) -> RuleSet {
        Self::compile_after(inputs, options, &RuleSet::default())
    }

    /// [`RuleSet::compile`], reusing the regexes `previous` compiled: a recompile costs
    /// what changed, not every regex again.
    #[must_use]
    pub fn compile_after(
        inputs: &[MappingInput],
        options: &CompileOptions,
        previous: &RuleSet,
    ) -> RuleSet {
        let mut set = RuleSet {
            allowed_registries: options.allowed_registries.clone(),
            follow_needs_list: options.follow_needs_list,
            local_registry: options.local_registry.clone(),
            regexes: RegexCache::after(&previous.regexes),
            ..RuleSet::default()
        };
        let mut order: Vec<&MappingInput> = inputs.iter().collect();
        order.sort_by(|a, b| {
            (a.scope, &a.namespace, &a.name).cmp(&(b.scope, &b.namespace, &b.name))
        });
        let mut budget = RegexBudget::default();
        for input in order {
            set.add_mapping(input, &mut budget);
        }
        set.index.finish();
        set.refused_index.finish();
        set.regexes.finish();
        set.find_static_conflicts();
        set.problems.sort();
        set.problems.dedup();
        set
    }

    fn add_mapping(&mut self, input: &MappingInput, budget: &mut RegexBudget) {
        budget.next_mapping();
        let key = input.key();
        self.inputs.insert(key.clone(), input.clone());
        let selectors = compile_selector(input.selector.as_ref(), "selector").and_then(|s| {
            compile_selector(input.namespace_selector.as_ref(), "namespaceSelector").map(|n| (s, n))
        });
        let (selector, namespace_selector) = match selectors {
            Ok(s) => s,
            Err(detail) => {
                self.problem(&key, None, detail);
                return;
            }
        };
        let mapping = self.mappings.len();
        self.mappings.push(CompiledMapping {
            key: key.clone(),
            priority: input.priority,
            selector,
            namespace_selector,
            dry_run: input.dry_run,
        });
        if input.rules.len() > MAX_RULES {
            let detail = ProblemDetail::TooManyRules {
                count: input.rules.len(),
                max: MAX_RULES,
            };
            // Reported on the first rule that is ignored.
            self.problem(&key, Some(MAX_RULES), detail);
        }
        for (index, rule) in input.rules.iter().enumerate().take(MAX_RULES) {
            let pattern = match Pattern::compile_with(&rule.match_, &mut self.regexes) {
                Ok(pattern) => pattern,
                Err(message) => {
                    self.problem(&key, Some(index), ProblemDetail::InvalidRule(message));
                    continue;
                }
            };
            let action = Action::compile(rule, &pattern);
            let pattern = self.local_name(pattern);
            let action = match action {
                Ok(action) => action,
                Err(message) => {
                    let detail = ProblemDetail::InvalidRule(message);
                    self.problem(&key, Some(index), detail.clone());
                    // A regex's cost is charged only to the rules that apply: a refused one
                    // is not matched at admission.
                    if !matches!(pattern, Pattern::Regex(..)) {
                        self.refuse(mapping, index, pattern, detail, input.priority);
                    }
                    continue;
                }
            };
            if let Err(message) = budget.charge(key.namespace.as_deref(), pattern.cost()) {
                self.problem(&key, Some(index), ProblemDetail::InvalidRule(message));
                continue;
            }
            // Results at the local registry: rewritten there, or kept there (no `to`).
            let to_local = match action.static_domain() {
                Some(d) => self.is_local(&d),
                None => {
                    action.keeps_registry()
                        && pattern.static_domain().is_some_and(|d| self.is_local(d))
                }
            };
            if action.follows_tag() && self.follow_refused() && !to_local {
                // Kept: its VMs say why their images do not resolve.
                self.problem(&key, Some(index), ProblemDetail::FollowWithoutAllowList);
            }
            if let Some(registry) = action.static_domain()
                && !to_local
                && !self.allowed_registries.allows(&registry)
            {
                let detail = ProblemDetail::DisallowedTarget { registry };
                self.problem(&key, Some(index), detail.clone());
                self.refuse(mapping, index, pattern, detail, input.priority);
                continue;
            }
            let id = RuleId::try_from(self.rules.len()).unwrap_or(RuleId::MAX);
            self.rules.push(CompiledRule {
                mapping,
                index,
                pattern,
                action,
            });
            self.index.insert(
                id,
                &self.rules[id as usize].pattern,
                key.namespace.as_deref(),
                input.priority,
            );
        }
    }

    /// Keeps rule `index` of `mapping`, refused for `problem`, for admission to warn of.
    fn refuse(
        &mut self,
        mapping: usize,
        index: usize,
        pattern: Pattern,
        problem: ProblemDetail,
        priority: i32,
    ) {
        let id = RuleId::try_from(self.refused.len()).unwrap_or(RuleId::MAX);
        let namespace = self.mappings[mapping].key.namespace.clone();
        self.refused_index
            .insert(id, &pattern, namespace.as_deref(), priority);
        self.refused.push(RefusedRule {
            mapping,
            index,
            pattern,
            problem,
        });
    }

    pub(super) fn problem(&mut self, key: &MappingKey, rule: Option<usize>, detail: ProblemDetail) {
        self.problems.push(RuleProblem {
            mapping: key.clone(),
            rule,
            detail,
        });
    }

    /// Whether a dry-run mapping holds rules.
    #[must_use]
    pub fn has_dry_run(&self) -> bool {
        self.mappings.iter().any(|m| m.dry_run)
    }

    /// Problems found while compiling: invalid rules, disallowed targets, and rules that
    /// conflict for every VM they could apply to.
    #[must_use]
    pub fn problems(&self) -> &[RuleProblem] {
        &self.problems
    }

    /// Number of compiled (usable) rules.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// A compiled rule: its mapping, index and match kind.
    #[must_use]
    pub fn rule_ref(&self, id: RuleId) -> RuleRef {
        let rule = &self.rules[id as usize];
        RuleRef {
            mapping: self.mappings[rule.mapping].key.clone(),
            index: rule.index,
            kind: rule.pattern.kind(),
        }
    }

    /// Whether `followTag` rules are refused: the operator may contact no registry (but the
    /// cluster's local registry).
    pub(super) fn follow_refused(&self) -> bool {
        self.follow_needs_list && !self.allowed_registries.is_listed()
    }

    /// Whether `domain` is one of the local registry's names.
    pub(super) fn is_local(&self, domain: &str) -> bool {
        self.local_registry
            .as_ref()
            .is_some_and(|l| l.is_named(domain))
    }

    /// `r` under the local registry's own name when it names it by another.
    pub(super) fn local_reference(&self, r: &Reference) -> Option<Reference> {
        self.local_registry.as_ref().and_then(|l| l.rename(r))
    }

    /// A pattern naming the local registry by another name, under its own.
    fn local_name(&self, pattern: Pattern) -> Pattern {
        let Some(local) = &self.local_registry else {
            return pattern;
        };
        match pattern {
            Pattern::Exact(k) => Pattern::Exact(local.rename_text(&k).unwrap_or(k)),
            Pattern::Repository(k) => Pattern::Repository(local.rename_text(&k).unwrap_or(k)),
            Pattern::Prefix(k) => Pattern::Prefix(local.rename_text(&k).unwrap_or(k)),
            other => other,
        }
    }
}

fn compile_selector(
    selector: Option<&LabelSelector>,
    field: &'static str,
) -> Result<Option<Selector>, ProblemDetail> {
    let Some(selector) = selector else {
        return Ok(None);
    };
    let compiled =
        Selector::try_from(selector.clone()).map_err(|e| ProblemDetail::InvalidSelector {
            field,
            error: e.to_string(),
        })?;
    Ok(if compiled.selects_all() {
        None
    } else {
        Some(compiled)
    })
}
