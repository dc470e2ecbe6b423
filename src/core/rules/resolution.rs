//! The outcome of resolving one reference: the reference to use or why the winning rule
//! could not give one, the winning rule and the rules in conflict with it.

use super::compiled_rule::RuleId;
use super::mapping_input::RuleRef;
use crate::core::reference::Reference;

/// Why the winning rule produced no usable reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The rewrite's result is not an image reference.
    #[error("{0}")]
    InvalidRewrite(String),
    /// The result lies outside the operator's allowed registries.
    #[error("{0}")]
    DisallowedTarget(String),
    /// The rule follows a tag, and the operator has no list of registries it may ask.
    #[error("{0}")]
    FollowRefused(String),
}

/// The outcome of resolving one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The reference to use, or why the winning rule could not produce one.
    pub resolved: Result<Reference, ResolveError>,
    /// The winning rule; `None` when no rule matched.
    pub rule: Option<RuleId>,
    /// Rules tied with the winner that give a different result: the first
    /// [`NAMED_CONFLICTS`] in tie order.
    pub conflicts: Vec<RuleId>,
    /// How many more rules tied with the winner give a different result.
    pub more_conflicts: usize,
    /// Whether the winning rule follows the result's tag (`followTag`).
    pub follow_tag: bool,
    /// Rules refused at compile time that match and would have outranked the winner (or
    /// matched where no rule applies): what admission warns of.
    pub refused: Vec<RefusedMatch>,
}

/// A refused rule that matched: the rule, and why it is refused (as the mapping's status
/// says it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedMatch {
    pub rule: RuleRef,
    pub problem: String,
}

/// The most conflicting rules a resolution names; the others are counted.
pub const NAMED_CONFLICTS: usize = 4;
