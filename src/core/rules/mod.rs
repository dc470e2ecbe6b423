//! The mapping engine: ImageMappings and ClusterImageMappings compiled into an
//! immutable, indexed rule set that resolves image references.
//!
//! Precedence when several rules match one reference: higher `priority`; then
//! namespaced before cluster-scoped; then `exact` > `repository` > longest `prefix`
//! (its length as written, `*.` included, as registries.conf compares them) > `regex`;
//! then mapping name and rule index. Rules tied on everything but name and index that
//! give different results are a conflict. Mapping is single pass.

pub mod change_reach;
mod compiled_rule;
mod conflicts;
mod index;
mod lookup;
mod mapping_input;
mod nearest;
mod pattern;
mod precedence;
mod problem;
mod regex_cost;
mod requester;
mod resolution;
mod rewrite;
mod rule_set;

pub use compiled_rule::{RuleId, Winners};
pub use mapping_input::{MappingInput, MappingKey, MappingScope, RuleRef};
pub use pattern::{MatchKind, Pattern};
pub use problem::{ProblemDetail, ProblemReason, RuleProblem};
pub use requester::{Mode, Requester};
pub use resolution::{NAMED_CONFLICTS, RefusedMatch, Resolution, ResolveError};
pub use rewrite::Action;
pub use rule_set::{CompileOptions, MAX_RULES, RuleSet};

#[cfg(test)]
mod tests;
