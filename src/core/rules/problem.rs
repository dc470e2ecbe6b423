//! Problems found in mappings, typed from the engine to the status: which mapping, which
//! rule, what is wrong. Formatted only where a message is written.

use std::fmt;

use super::mapping_input::{MappingKey, RuleRef};

/// Why a rule or mapping is not (fully) usable: the reason of the mapping's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemReason {
    InvalidRule,
    Conflict,
    DisallowedTarget,
    AllowedRegistriesRequired,
}

impl ProblemReason {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemReason::InvalidRule => crate::core::conditions::reason::INVALID_RULE,
            ProblemReason::Conflict => crate::core::conditions::reason::CONFLICT,
            ProblemReason::DisallowedTarget => crate::core::conditions::reason::DISALLOWED_TARGET,
            ProblemReason::AllowedRegistriesRequired => {
                crate::core::conditions::reason::ALLOWED_REGISTRIES_REQUIRED
            }
        }
    }
}

/// What exactly is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProblemDetail {
    /// A selector of the mapping does not parse; none of its rules apply.
    InvalidSelector { field: &'static str, error: String },
    /// The mapping has more rules than allowed; the rest are ignored.
    TooManyRules { count: usize, max: usize },
    /// The rule's `match`, `to`, `tag` or `digest` is invalid; the text says what to write.
    InvalidRule(String),
    /// The rule rewrites to a registry outside the operator's allowed registries.
    DisallowedTarget { registry: String },
    /// The rule follows tags, and the operator was started without `--allowed-registries`.
    FollowWithoutAllowList,
    /// Another rule (and `more` others) has the same match, priority and selectors but a
    /// different result: they conflict for every VM either applies to.
    SameMatch { other: RuleRef, more: usize },
    /// Another rule tied with this one for an image of a VM and gave a different result.
    TiedOnVm {
        other: RuleRef,
        /// Whether this rule is the one used.
        this_wins: bool,
        /// `namespace/name` of the first VM (in name order) where the tie was seen.
        vm: Box<crate::core::namespaced_name::NamespacedName>,
        slot: String,
    },
}

impl ProblemDetail {
    #[must_use]
    pub fn reason(&self) -> ProblemReason {
        match self {
            ProblemDetail::InvalidSelector { .. }
            | ProblemDetail::TooManyRules { .. }
            | ProblemDetail::InvalidRule(_) => ProblemReason::InvalidRule,
            ProblemDetail::DisallowedTarget { .. } => ProblemReason::DisallowedTarget,
            ProblemDetail::FollowWithoutAllowList => ProblemReason::AllowedRegistriesRequired,
            ProblemDetail::SameMatch { .. } | ProblemDetail::TiedOnVm { .. } => {
                ProblemReason::Conflict
            }
        }
    }

    /// The other rule of a conflict.
    #[must_use]
    pub fn conflicting_rule(&self) -> Option<&RuleRef> {
        match self {
            ProblemDetail::SameMatch { other, .. } | ProblemDetail::TiedOnVm { other, .. } => {
                Some(other)
            }
            _ => None,
        }
    }
}

impl fmt::Display for ProblemDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemDetail::InvalidSelector { field, error } => {
                write!(f, "spec.{field} is not a valid label selector: {error}")
            }
            ProblemDetail::TooManyRules { count, max } => write!(
                f,
                "spec.rules has {count} rules; at most {max} are allowed, the rest are ignored"
            ),
            ProblemDetail::InvalidRule(text) => f.write_str(text),
            ProblemDetail::DisallowedTarget { registry } => write!(
                f,
                "rewrites to registry {registry}, which is not in the operator's allowed registries"
            ),
            ProblemDetail::FollowWithoutAllowList => f.write_str(
                "followTag is refused: the operator was started without --allowed-registries, \
                 and asks no registry a rule names until that list names it",
            ),
            ProblemDetail::SameMatch { other, more: 0 } => write!(
                f,
                "conflicts with {other}: same match and priority, different result"
            ),
            ProblemDetail::SameMatch { other, more } => write!(
                f,
                "conflicts with {other} and {more} more: same match and priority, different result"
            ),
            ProblemDetail::TiedOnVm {
                other,
                this_wins,
                vm,
                slot,
            } => {
                write!(
                    f,
                    "conflicts with {other} for {slot} of VirtualMachine {vm}"
                )?;
                if !this_wins {
                    f.write_str(" (that rule wins)")?;
                }
                Ok(())
            }
        }
    }
}

/// A problem of one mapping: of one of its rules, or (`rule: None`) of the whole mapping.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleProblem {
    pub mapping: MappingKey,
    pub rule: Option<usize>,
    pub detail: ProblemDetail,
}

impl RuleProblem {
    #[must_use]
    pub fn reason(&self) -> ProblemReason {
        self.detail.reason()
    }

    /// The problem to show for rule `index` among `problems` (in report order): its own
    /// first, else one of the whole mapping.
    #[must_use]
    pub fn for_rule(problems: &[RuleProblem], index: usize) -> Option<&RuleProblem> {
        problems
            .iter()
            .find(|p| p.rule == Some(index))
            .or_else(|| problems.iter().find(|p| p.rule.is_none()))
    }

    /// The order problems are reported in: by reason, then rule, then detail.
    #[must_use]
    pub fn report_order(&self) -> (ProblemReason, Option<usize>, &ProblemDetail) {
        (self.reason(), self.rule, &self.detail)
    }
}

/// The message as a status or a terminal shows it: "rule 3: …", "rule 0 conflicts with …",
/// or the mapping-wide text.
impl fmt::Display for RuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rule, self.detail.reason()) {
            (None, _) => write!(f, "{}", self.detail),
            (Some(i), ProblemReason::Conflict) => write!(f, "rule {i} {}", self.detail),
            (Some(i), _) => write!(f, "rule {i}: {}", self.detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::mapping_key as key;
    use crate::core::rules::MatchKind;

    #[test]
    fn messages_name_the_rule_once() {
        let other = RuleRef {
            mapping: key("beta"),
            index: 2,
            kind: MatchKind::Repository,
        };
        let same = RuleProblem {
            mapping: key("alpha"),
            rule: Some(0),
            detail: ProblemDetail::SameMatch { other, more: 0 },
        };
        assert_eq!(
            same.to_string(),
            "rule 0 conflicts with ImageMapping dev/beta rule 2: same match and priority, different result"
        );
        assert_eq!(same.reason(), ProblemReason::Conflict);
        let invalid = RuleProblem {
            mapping: key("alpha"),
            rule: Some(3),
            detail: ProblemDetail::InvalidRule("regex \"(\" is not a valid RE2 pattern".into()),
        };
        assert_eq!(
            invalid.to_string(),
            "rule 3: regex \"(\" is not a valid RE2 pattern"
        );
        let whole = RuleProblem {
            mapping: key("alpha"),
            rule: None,
            detail: ProblemDetail::InvalidSelector {
                field: "selector",
                error: "bad".into(),
            },
        };
        assert_eq!(
            whole.to_string(),
            "spec.selector is not a valid label selector: bad"
        );
        // A rule's own problem comes first; a mapping-wide one stands in for the others.
        let problems = [whole.clone(), invalid.clone()];
        assert_eq!(RuleProblem::for_rule(&problems, 3), Some(&invalid));
        assert_eq!(RuleProblem::for_rule(&problems, 0), Some(&whole));
    }
}
