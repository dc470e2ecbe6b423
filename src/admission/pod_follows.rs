//! Which followed tags a pod admitted earlier runs: each recorded original resolved again by
//! the rules in force, as the webhook resolved it. The leader keeps those tags checked while
//! the pod exists, so that later pods asking for them are pinned — that is how a tag only
//! pods follow is asked of the leader: by the pod the webhook admitted unpinned.

use std::collections::BTreeMap;

use crate::admission::records;
use crate::rules::{Mode, RuleRef, RuleSet};
use crate::vm_images::{ImageSlot, resolve_slot};

/// A tag a pod follows, and the rule that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFollows {
    pub reference: String,
    pub rule: Option<RuleRef>,
}

/// The followed tags of a pod of `namespace` with `labels` and `annotations`, in a namespace
/// labelled `namespace_labels`, under `rules`.
#[must_use]
pub fn pod_follows(
    rules: &RuleSet,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Vec<PodFollows> {
    let who = records::pod_requester(namespace, labels, namespace_labels);
    let mut follows: Vec<PodFollows> = Vec::new();
    for (slot, requested) in records::originals(annotations) {
        let resolution = resolve_slot(rules, ImageSlot { slot, requested }, &who, Mode::Live);
        if let (true, Ok(reference)) = (resolution.follow_tag, resolution.outcome) {
            let follows_one = PodFollows {
                reference,
                rule: resolution.rule,
            };
            if !follows.contains(&follows_one) {
                follows.push(follows_one);
            }
        }
    }
    follows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::records::{ORIGINAL_IMAGES, SKIP_LABEL};
    use crate::fixtures::repository_mapping;
    use crate::rules::CompileOptions;

    #[test]
    fn a_pod_follows_the_tags_its_recorded_originals_resolve_to_by_following_rules() {
        let mut followed = repository_mapping("follow", "app", "mirror.io/app:latest", false);
        followed.rules[0].follow_tag = true;
        let plain = repository_mapping("plain", "web", "mirror.io/web", false);
        let rules = RuleSet::compile(&[followed, plain], &CompileOptions::default());
        let annotations = BTreeMap::from([(
            ORIGINAL_IMAGES.to_string(),
            r#"{"app": "app:1", "init:again": "app:2", "web": "web:1"}"#.to_string(),
        )]);
        let none = BTreeMap::new();
        let follows = pod_follows(&rules, "dev", &none, &annotations, &none);
        assert_eq!(follows.len(), 1, "{follows:?}");
        assert_eq!(follows[0].reference, "mirror.io/app:latest");
        assert_eq!(
            follows[0].rule.as_ref().map(|r| r.mapping.name.as_str()),
            Some("follow")
        );
        // Opted out of the namespace's rules, or with no record: nothing.
        let skip = BTreeMap::from([(SKIP_LABEL.to_string(), "true".to_string())]);
        assert!(pod_follows(&rules, "dev", &skip, &annotations, &none).is_empty());
        assert!(pod_follows(&rules, "dev", &none, &none, &none).is_empty());
    }
}
