//! What the rules in force make of a pod admitted earlier: each recorded original resolved
//! again, as the webhook resolved it — the rules that decide its containers (the mapping
//! statuses count the pod for them) and the followed tags among the results (the leader
//! keeps the tags the pods of its last pass use checked, so that later pods asking for them
//! are pinned).

use std::collections::{BTreeMap, BTreeSet};

use crate::core::admission::pod_view::Admission;
use crate::core::rules::RuleRef;

/// A tag a pod follows, and the rule that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFollows {
    pub reference: String,
    pub rule: Option<RuleRef>,
}

/// What the rules make of a pod: the rules that decide its recorded containers, and the
/// followed tags among their results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResolved {
    pub rules: BTreeSet<RuleRef>,
    pub follows: Vec<PodFollows>,
}

/// What `admission` makes of a pod of `namespace` with `labels` and `originals` (its
/// records): the rules that decide its recorded containers, and the followed tags among
/// their results.
#[must_use]
pub fn pod_follows(
    admission: &Admission<'_>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    originals: &BTreeMap<String, String>,
) -> PodResolved {
    let asked = originals.iter().map(|(s, r)| (s.as_str(), r.as_str()));
    let mut out = PodResolved::default();
    for outcome in admission.slots(namespace, labels, asked) {
        let resolution = outcome.resolution;
        if let (Some(rule), Ok(_)) = (&resolution.rule, &resolution.outcome) {
            out.rules.insert(rule.clone());
        }
        if let (true, Ok(reference)) = (resolution.follow_tag, resolution.outcome) {
            let follows_one = PodFollows {
                reference,
                rule: resolution.rule,
            };
            if !out.follows.contains(&follows_one) {
                out.follows.push(follows_one);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::repository_mapping;
    use crate::core::pod::records::{self, ORIGINAL_IMAGES, SKIP_LABEL};
    use crate::core::rules::{CompileOptions, RuleSet};

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
        let unlabelled = |_: &str| BTreeMap::new();
        let admission = Admission::without_digests(&rules, &unlabelled);
        let originals = records::originals(&annotations);
        let resolved = pod_follows(&admission, "dev", &none, &originals);
        let follows = resolved.follows;
        assert_eq!(follows.len(), 1, "{follows:?}");
        // Both mappings decide a container of it.
        assert_eq!(resolved.rules.len(), 2);
        assert_eq!(follows[0].reference, "mirror.io/app:latest");
        assert_eq!(
            follows[0].rule.as_ref().map(|r| r.mapping.name.as_str()),
            Some("follow")
        );
        // Opted out of the namespace's rules, or with no record: nothing.
        let skip = BTreeMap::from([(SKIP_LABEL.to_string(), "true".to_string())]);
        assert_eq!(
            pod_follows(&admission, "dev", &skip, &originals),
            PodResolved::default()
        );
        assert_eq!(
            pod_follows(&admission, "dev", &none, &none),
            PodResolved::default()
        );
    }
}
