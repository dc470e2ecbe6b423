//! A rule as compiled into a [`super::rule_set::RuleSet`]: its id, its mapping's compiled
//! selectors and priority, its pattern and its action; and a rule refused whose `match`
//! compiles, kept so that admission can say it matched.

use kube::core::Selector;

use super::mapping_input::MappingKey;
use super::pattern::Pattern;
use super::problem::ProblemDetail;
use super::rewrite::Action;

/// Index of a compiled rule in a [`RuleSet`].
pub type RuleId = u32;

/// The winning rule first, then the rules tied with it; empty when no rule matched.
pub type Winners = smallvec::SmallVec<[RuleId; 4]>;

#[derive(Debug, Clone)]
pub(super) struct CompiledMapping {
    pub(super) key: MappingKey,
    pub(super) priority: i32,
    pub(super) selector: Option<Selector>,
    pub(super) namespace_selector: Option<Selector>,
    pub(super) dry_run: bool,
}

#[derive(Debug, Clone)]
pub(super) struct CompiledRule {
    pub(super) mapping: usize,
    pub(super) index: usize,
    pub(super) pattern: Pattern,
    pub(super) action: Action,
}

/// A rule refused at compile time — its rewrite is invalid, or it points outside the
/// allowed registries — whose `match` compiles: never applied, but admission warns when it
/// matches a container it would have decided.
#[derive(Debug, Clone)]
pub(super) struct RefusedRule {
    pub(super) mapping: usize,
    pub(super) index: usize,
    pub(super) pattern: Pattern,
    /// Why it is refused, as the mapping's status says it.
    pub(super) problem: ProblemDetail,
}
