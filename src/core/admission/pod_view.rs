//! What admission makes of a pod: the one answer the webhook, the leader's passes over the
//! pods (mapped or not), live reload (workloads' and NeonVM's), `imagemap resolve` and
//! `imagemap status` all take. Each container slot is resolved from what it asked for, by
//! the rules in force, for whoever asks (the pod's labels, its namespace's), a followed tag
//! pinned to the digest the caller holds. Pure: the operator answers from what a replica
//! keeps (`operator::replica::admission_sources`), the command line from its files.
//!
//! What admission then writes on a pod (the patch, its records, the warnings) is
//! [`super::pod_mutation`]'s; which requests it never maps, [`super::scope`]'s.

use std::collections::BTreeMap;

use crate::core::pod::records;
use crate::core::reference::Reference;
use crate::core::rules::{Mode, Requester, RuleRef, RuleSet};
use crate::core::slot_resolution::{ImageSlot, SlotResolution, resolve_slot};

/// The digest a followed tag points to as the caller last verified it: the reference, the
/// rule that follows it, and the namespace asking.
pub type DigestOf<'a> = dyn Fn(&str, Option<&RuleRef>, &str) -> Option<String> + 'a;

/// The images the runner pod of the NeonVM VM (namespace, name) runs now, by slot; `None`:
/// not known.
pub type RunnerImages<'a> = dyn Fn(&str, &str) -> Option<BTreeMap<String, String>> + 'a;

/// The labels of a namespace, with `kubernetes.io/metadata.name`.
pub type NamespaceLabels<'a> = dyn Fn(&str) -> BTreeMap<String, String> + 'a;

/// What admission answers from, besides the pod.
#[derive(Clone, Copy)]
pub struct Admission<'a> {
    /// The rules in force.
    pub rules: &'a RuleSet,
    pub namespace_labels: &'a NamespaceLabels<'a>,
    pub digest_of: &'a DigestOf<'a>,
    /// What a NeonVM migration's target pod takes.
    pub runner_images: &'a RunnerImages<'a>,
}

/// One slot as admission maps it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotOutcome {
    pub slot: String,
    /// What it asked for.
    pub requested: String,
    /// How the rules resolve it, and by which rule.
    pub resolution: SlotResolution,
    /// The image it runs once admitted; `None` when the rules cannot map it (it then runs
    /// what it names).
    pub image: Option<String>,
    /// Whether a followed tag was pinned to a digest held.
    pub pinned: bool,
}

fn no_digest(_: &str, _: Option<&RuleRef>, _: &str) -> Option<String> {
    None
}

fn no_runner_pod(_: &str, _: &str) -> Option<BTreeMap<String, String>> {
    None
}

impl<'a> Admission<'a> {
    /// Admission holding no digest of a followed tag and knowing no NeonVM runner pod: what
    /// the command line answers from files, and what a slot resolves to before pinning.
    #[must_use]
    pub fn without_digests(
        rules: &'a RuleSet,
        namespace_labels: &'a NamespaceLabels<'a>,
    ) -> Admission<'a> {
        Admission {
            rules,
            namespace_labels,
            digest_of: &no_digest,
            runner_images: &no_runner_pod,
        }
    }
}

impl Admission<'_> {
    /// What admission makes of `requested` in `slot` for `who`.
    #[must_use]
    pub fn slot(&self, who: &Requester<'_>, slot: &str, requested: &str) -> SlotOutcome {
        let (resolution, image, pinned) =
            admitted(self.rules, who, slot, requested, self.digest_of);
        SlotOutcome {
            slot: slot.to_string(),
            requested: requested.to_string(),
            resolution,
            image,
            pinned,
        }
    }

    /// What admission makes of the `slots` (slot, requested) of a pod — or a pod template,
    /// or the VM NeonVM makes a runner pod for — of `namespace` labelled `labels`.
    #[must_use]
    pub fn slots<'s>(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        slots: impl IntoIterator<Item = (&'s str, &'s str)>,
    ) -> Vec<SlotOutcome> {
        let namespace_labels = (self.namespace_labels)(namespace);
        let who = records::pod_requester(namespace, labels, &namespace_labels);
        slots
            .into_iter()
            .map(|(slot, requested)| self.slot(&who, slot, requested))
            .collect()
    }
}

/// What admission makes of `requested` in `slot` for `who`: the resolution, and the image
/// the container runs after it — `None` when the rules cannot map it (it then runs what it
/// names) — and whether a followed tag was pinned.
#[must_use]
fn admitted(
    rules: &RuleSet,
    who: &Requester<'_>,
    slot: &str,
    requested: &str,
    digest_of: &DigestOf<'_>,
) -> (SlotResolution, Option<String>, bool) {
    let image_slot = ImageSlot {
        slot: slot.to_string(),
        requested: requested.to_string(),
    };
    let mut resolution = resolve_slot(rules, image_slot, who, Mode::Live);
    let mut pinned = false;
    if let (Ok(resolved), true) = (&resolution.outcome, resolution.follow_tag) {
        resolution.digest = digest_of(resolved, resolution.rule.as_ref(), who.namespace);
        pinned = resolution.digest.is_some();
    }
    // A reference the rules leave as it is keeps the requester's spelling.
    let unchanged = |resolved: &str| {
        resolution.digest.is_none()
            && Reference::parse_normalized(requested).is_ok_and(|r| r.to_string() == resolved)
    };
    let image = match &resolution.outcome {
        Ok(resolved) if resolution.rule.is_none() || unchanged(resolved) => {
            Some(requested.to_string())
        }
        Ok(_) => Some(
            resolution
                .image()
                .pod_image()
                .unwrap_or_else(|| requested.to_string()),
        ),
        Err(_) => None,
    };
    (resolution, image, pinned)
}
