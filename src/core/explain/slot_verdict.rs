//! What `imagemap explain` concludes of one container slot: one verdict from a closed set,
//! each with its evidence. The names are the JSON schema's (`imagemap.dev/explain/v1`):
//! scripts may rely on them.

use serde::Serialize;

/// One slot's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "verdict",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum SlotVerdict {
    /// Admission mapped it, and it runs what the rules make of it now (for a pod template:
    /// the pods it makes are mapped to it).
    MappedCurrent,
    /// Admission mapped it, but the rules make something else of it now: what will happen.
    MappedStale { next: String },
    /// A workload's pod without live reload whose rules changed: only the workload's next
    /// pods get the new image.
    StaleNewPodsOnly,
    /// No rule matches: the nearest rules by repository, so that a typo shows.
    NoRuleMatches { nearest: Vec<String> },
    /// The rule that matches is refused: the rule and the mapping's problem.
    RuleRefused { rule: String, problem: String },
    /// The API server never sends this namespace's pods to the webhook.
    NamespaceNeverSent { why: String },
    /// The pod opts out of its namespace's ImageMappings (`imagemap.dev/skip`): the rules
    /// that escaped.
    OptedOut { escaped: Vec<String> },
    /// A rule matches now, and the pod records no mapping: created before that rule, or
    /// while no replica answered.
    NotMappedAtAdmission { because: String },
    /// Left alone by design: a mirror pod, a runner pod imagemap's VM controller made.
    LeftAloneByDesign { why: String },
    /// The pod could not be mapped whole (more than 512 containers, containers sharing a
    /// name, records over 8 KiB or annotations over 256 KiB).
    NotMappedWhole { why: String },
    /// Only a dry-run mapping would rewrite it.
    DryRun { rule: String, would_run: String },
    /// Mapped to a followed tag, but no digest of it was held at admission: it runs the tag.
    FollowedTagNotPinned { tag: String },
    /// Explain could not read what the verdict needs: what, and the permission to grant.
    Unknown { unread: String, grant: String },
}

impl SlotVerdict {
    /// Every verdict's name, as JSON and the table say it.
    pub const NAMES: [&'static str; 13] = [
        "mapped-current",
        "mapped-stale",
        "stale-new-pods-only",
        "no-rule-matches",
        "rule-refused",
        "namespace-never-sent",
        "opted-out",
        "not-mapped-at-admission",
        "left-alone-by-design",
        "not-mapped-whole",
        "dry-run",
        "followed-tag-not-pinned",
        "unknown",
    ];

    /// The verdict's name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        Self::NAMES[match self {
            SlotVerdict::MappedCurrent => 0,
            SlotVerdict::MappedStale { .. } => 1,
            SlotVerdict::StaleNewPodsOnly => 2,
            SlotVerdict::NoRuleMatches { .. } => 3,
            SlotVerdict::RuleRefused { .. } => 4,
            SlotVerdict::NamespaceNeverSent { .. } => 5,
            SlotVerdict::OptedOut { .. } => 6,
            SlotVerdict::NotMappedAtAdmission { .. } => 7,
            SlotVerdict::LeftAloneByDesign { .. } => 8,
            SlotVerdict::NotMappedWhole { .. } => 9,
            SlotVerdict::DryRun { .. } => 10,
            SlotVerdict::FollowedTagNotPinned { .. } => 11,
            SlotVerdict::Unknown { .. } => 12,
        }]
    }

    /// Whether `--exit-code` counts it: stale, refused, not mapped at admission, unpinned.
    /// (No rule matching is a valid state.)
    #[must_use]
    pub fn needs_attention(&self) -> bool {
        matches!(
            self,
            SlotVerdict::MappedStale { .. }
                | SlotVerdict::StaleNewPodsOnly
                | SlotVerdict::RuleRefused { .. }
                | SlotVerdict::NotMappedAtAdmission { .. }
                | SlotVerdict::FollowedTagNotPinned { .. }
        )
    }

    /// The evidence, as a sentence.
    #[must_use]
    pub fn evidence(&self) -> String {
        match self {
            SlotVerdict::MappedCurrent => {
                "admission mapped it to what its rule makes of it now (a pod template: the \
                 pods it makes get it)"
                    .into()
            }
            SlotVerdict::MappedStale { next } => format!("a rule changed since admission: {next}"),
            SlotVerdict::StaleNewPodsOnly => "a rule changed since admission: the workload's \
                 next pods get the new image (its pods are not labelled \
                 imagemap.dev/live-reload=true)"
                .into(),
            SlotVerdict::NoRuleMatches { nearest } if nearest.is_empty() => {
                "no rule matches".into()
            }
            SlotVerdict::NoRuleMatches { nearest } => {
                format!("no rule matches; nearest: {}", nearest.join("; "))
            }
            SlotVerdict::RuleRefused { rule, problem } => {
                format!("{rule} matches but is refused: {problem}")
            }
            SlotVerdict::NamespaceNeverSent { why } => format!("never sent to the webhook: {why}"),
            SlotVerdict::OptedOut { escaped } => format!(
                "labelled imagemap.dev/skip=true: escapes {}",
                escaped.join(", ")
            ),
            SlotVerdict::NotMappedAtAdmission { because } => {
                format!("a rule matches now and the pod records no mapping: {because}")
            }
            SlotVerdict::LeftAloneByDesign { why } => why.clone(),
            SlotVerdict::NotMappedWhole { why } => format!("the pod is not mapped: {why}"),
            SlotVerdict::DryRun { rule, would_run } => {
                format!("only {rule}, a dry-run mapping's, would run {would_run}")
            }
            SlotVerdict::FollowedTagNotPinned { tag } => format!(
                "runs {tag} unpinned: no digest of it was held at admission (later pods are pinned)"
            ),
            SlotVerdict::Unknown { unread, grant } => {
                format!("cannot tell: {unread} could not be read (grant {grant})")
            }
        }
    }
}
