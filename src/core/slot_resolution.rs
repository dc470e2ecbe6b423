//! One image slot — a container's, a VM's — resolved through a [`RuleSet`] for whoever asks:
//! the image to run or why there is none, the rule behind it and the rules in conflict with
//! it. Every resolution of the engine goes through here (admission's view, a VM's slots, the
//! previews). Pure.

use std::collections::BTreeMap;

use crate::core::api::ResolvedImage;
use crate::core::reference::Reference;
use crate::core::rules::{Mode, RefusedMatch, Requester, ResolveError, RuleRef, RuleSet};

/// Most bytes of a slot's `error` in the VM's status.
const ERROR_LIMIT: usize = 1024;

/// One image a VM asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSlot {
    pub slot: String,
    pub requested: String,
}

/// Why a slot has no image to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotError {
    /// The requested image is not a reference.
    InvalidReference { requested: String, error: String },
    /// The winning rule's result is not a reference.
    InvalidRewrite(String),
    /// The winning rule's result lies outside the operator's allowed registries.
    DisallowedTarget(String),
    /// The winning rule follows tags, and the operator may ask no registry.
    FollowRefused(String),
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotError::InvalidReference { requested, error } => {
                write!(
                    f,
                    "requested image {requested:?} is not a valid reference: {error}"
                )
            }
            SlotError::InvalidRewrite(e)
            | SlotError::DisallowedTarget(e)
            | SlotError::FollowRefused(e) => f.write_str(e),
        }
    }
}

/// The resolution of one image slot, with the rules behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotResolution {
    pub slot: String,
    pub requested: String,
    /// The image to run, or why there is none.
    pub outcome: Result<String, SlotError>,
    /// The winning rule; `None` when no rule matched.
    pub rule: Option<RuleRef>,
    /// Rules tied with the winner that rewrite differently (the first few; see
    /// [`crate::core::rules::NAMED_CONFLICTS`]).
    pub conflicts: Vec<RuleRef>,
    /// How many more rules tied with the winner rewrite differently.
    pub more_conflicts: usize,
    /// Whether the winning rule follows the result's tag (`followTag`).
    pub follow_tag: bool,
    /// The digest the followed tag points to, when known ([`VmResolution::pin`]).
    pub digest: Option<String>,
    /// Why the followed tag's digest could not be verified (the last check failed).
    pub digest_error: Option<String>,
    /// Refused rules that match and would have decided the slot (outranking the winner, or
    /// where no rule applies): what admission warns of, and `imagemap explain` shows.
    pub refused: Vec<RefusedMatch>,
}

impl SlotResolution {
    /// The image a pod runs under this resolution — the rewritten one (pinned when its
    /// digest is known), or as asked — or why the rules cannot map it.
    pub fn image_to_run(&self) -> Result<String, String> {
        self.outcome
            .as_ref()
            .map(|_| {
                self.image()
                    .pod_image()
                    .unwrap_or_else(|| self.requested.clone())
            })
            .map_err(ToString::to_string)
    }

    /// The slot as the VM's status records it.
    #[must_use]
    pub fn image(&self) -> ResolvedImage {
        ResolvedImage {
            slot: self.slot.clone(),
            requested: self.requested.clone(),
            resolved: self.outcome.as_ref().ok().cloned(),
            source: self.rule.as_ref().map(RuleRef::source),
            error: self
                .outcome
                .as_ref()
                .err()
                .map(|e| crate::core::excerpt::cut_bytes(&e.to_string(), ERROR_LIMIT)),
            follow_tag: self.follow_tag,
            digest: self.digest.clone(),
        }
    }
}

/// Resolves one image slot for `who`.
#[must_use]
pub fn resolve_slot(
    set: &RuleSet,
    slot: ImageSlot,
    who: &Requester<'_>,
    mode: Mode,
) -> SlotResolution {
    let reference = match Reference::parse_normalized(&slot.requested) {
        Ok(r) => r,
        Err(e) => {
            return SlotResolution {
                outcome: Err(SlotError::InvalidReference {
                    requested: slot.requested.clone(),
                    error: e.to_string(),
                }),
                slot: slot.slot,
                requested: slot.requested,
                rule: None,
                conflicts: Vec::new(),
                more_conflicts: 0,
                follow_tag: false,
                digest: None,
                digest_error: None,
                refused: Vec::new(),
            };
        }
    };
    let res = set.resolve(&reference, who, mode);
    let follow_tag = res.follow_tag && res.resolved.is_ok();
    SlotResolution {
        slot: slot.slot,
        requested: slot.requested,
        outcome: res.resolved.map(|r| r.to_string()).map_err(|e| match e {
            ResolveError::InvalidRewrite(m) => SlotError::InvalidRewrite(m),
            ResolveError::DisallowedTarget(m) => SlotError::DisallowedTarget(m),
            ResolveError::FollowRefused(m) => SlotError::FollowRefused(m),
        }),
        rule: res.rule.map(|id| set.rule_ref(id)),
        conflicts: res.conflicts.iter().map(|&id| set.rule_ref(id)).collect(),
        more_conflicts: res.more_conflicts,
        follow_tag,
        digest: None,
        digest_error: None,
        refused: res.refused,
    }
}

/// The labels every namespace carries in a cluster (`kubernetes.io/metadata.name`), merged
/// with `labels`.
pub fn namespace_labels(
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    out.insert("kubernetes.io/metadata.name".into(), namespace.into());
    out
}
