//! What a mapped pod records of its mapping, where it lasts: the images its containers asked
//! for (`imagemap.dev/original-images`: slot key → reference as requested, for the rewritten
//! containers only), the rule that changed each (`imagemap.dev/image-rules`), and the label
//! that lets the operator watch exactly the pods it mapped (`imagemap.dev/mapped`).
//!
//! Records are bounded: never past [`RECORDS_LIMIT`] bytes, and never an original cut out (a
//! reinvocation resolves each container from its original, so every one is needed). A pod
//! whose records would not fit is admitted unchanged.

use std::collections::BTreeMap;

use serde_json::Value;

/// The annotation holding each rewritten container's image as requested.
pub const ORIGINAL_IMAGES: &str = "imagemap.dev/original-images";
/// The annotation naming the rule that rewrote each container.
pub const IMAGE_RULES: &str = "imagemap.dev/image-rules";
/// The label of a pod imagemap mapped: [`MAPPED`], or [`DRY_RUN`] for a pod that only a
/// dry-run mapping would change.
pub const MAPPED_LABEL: &str = "imagemap.dev/mapped";
/// [`MAPPED_LABEL`]'s value on a pod whose images were rewritten.
pub const MAPPED: &str = "true";
/// [`MAPPED_LABEL`]'s value on a pod a dry-run mapping would change (its images are not).
pub const DRY_RUN: &str = "dry-run";
/// The label by which a pod opts out of its namespace's ImageMappings.
pub const SKIP_LABEL: &str = "imagemap.dev/skip";
/// The label (`"true"`) by which a pod of a workload, or a NeonVM VM, opts into live reload.
pub const LIVE_RELOAD_LABEL: &str = "imagemap.dev/live-reload";

/// Most bytes the two annotations may take together (keys and values).
pub const RECORDS_LIMIT: usize = 8 * 1024;
/// Most bytes a pod's annotations may take (Kubernetes refuses more).
pub const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// Who asks for a pod's images: a pod of `namespace` with `labels`, in a namespace labelled
/// `namespace_labels`; labelled `imagemap.dev/skip: "true"`, it opts out of its namespace's
/// ImageMappings.
#[must_use]
pub fn pod_requester<'a>(
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    namespace_labels: &'a BTreeMap<String, String>,
) -> crate::core::rules::Requester<'a> {
    crate::core::rules::Requester {
        namespace,
        labels,
        namespace_labels,
        namespace_rules: labels.get(SKIP_LABEL).map(String::as_str) != Some("true"),
    }
}

/// The originals a pod records: empty when it records none, or a record that is not a JSON
/// object of strings within the bound (a record the pod was created with is the requester's
/// word, as an image it names would be).
#[must_use]
pub fn originals(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    annotations
        .get(ORIGINAL_IMAGES)
        .filter(|text| text.len() <= RECORDS_LIMIT)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The records of a mapped pod: slot key → original image, and slot key → rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    pub originals: BTreeMap<String, String>,
    pub rules: BTreeMap<String, String>,
}

/// Why records cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    #[error(
        "the records of its {containers} rewritten containers would take {bytes} bytes, over \
         the {RECORDS_LIMIT}-byte bound"
    )]
    TooLarge { containers: usize, bytes: usize },
    #[error(
        "its annotations would take {bytes} bytes with the records, over Kubernetes' \
         {ANNOTATIONS_LIMIT}-byte limit"
    )]
    AnnotationsFull { bytes: usize },
}

impl Records {
    /// The two annotations' values, if they fit beside the pod's other `annotations`.
    pub fn annotations(
        &self,
        annotations: &BTreeMap<String, String>,
    ) -> Result<[(&'static str, String); 2], RecordsError> {
        let text = |map: &BTreeMap<String, String>| {
            serde_json::to_string(map).unwrap_or_else(|_| "{}".to_string())
        };
        let (originals, rules) = (text(&self.originals), text(&self.rules));
        let bytes = ORIGINAL_IMAGES.len() + originals.len() + IMAGE_RULES.len() + rules.len();
        if bytes > RECORDS_LIMIT {
            return Err(RecordsError::TooLarge {
                containers: self.originals.len(),
                bytes,
            });
        }
        let others: usize = annotations
            .iter()
            .filter(|(k, _)| *k != ORIGINAL_IMAGES && *k != IMAGE_RULES)
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if others + bytes > ANNOTATIONS_LIMIT {
            return Err(RecordsError::AnnotationsFull {
                bytes: others + bytes,
            });
        }
        Ok([(ORIGINAL_IMAGES, originals), (IMAGE_RULES, rules)])
    }
}

/// A pod's annotations or labels as a map of strings (others are not the pod's, and are
/// left to the API server's validation).
#[must_use]
pub fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn originals_are_read_back_and_a_bad_record_is_none() {
        let mut annotations = BTreeMap::new();
        assert!(originals(&annotations).is_empty());
        annotations.insert(
            ORIGINAL_IMAGES.into(),
            r#"{"app":"nginx","init:x":"busybox"}"#.into(),
        );
        assert_eq!(originals(&annotations)["init:x"], "busybox");
        annotations.insert(ORIGINAL_IMAGES.into(), r#"{"app": 3}"#.into());
        assert!(originals(&annotations).is_empty());
        annotations.insert(
            ORIGINAL_IMAGES.into(),
            format!(r#"{{"app":"{}"}}"#, "a".repeat(9000)),
        );
        assert!(originals(&annotations).is_empty());
    }

    #[test]
    fn records_are_bounded_whole_or_not_at_all() {
        let mut records = Records::default();
        records.originals.insert("app".into(), "nginx".into());
        records
            .rules
            .insert("app".into(), "ImageMapping dev/m rule 0".into());
        let [(k1, v1), (k2, v2)] = records.annotations(&BTreeMap::new()).unwrap();
        assert_eq!((k1, v1.as_str()), (ORIGINAL_IMAGES, r#"{"app":"nginx"}"#));
        assert_eq!(k2, IMAGE_RULES);
        assert!(v2.contains("rule 0"));

        for i in 0..300 {
            records
                .originals
                .insert(format!("c{i}"), format!("registry.example/image-{i}:tag"));
        }
        assert!(matches!(
            records.annotations(&BTreeMap::new()),
            Err(RecordsError::TooLarge {
                containers: 301,
                ..
            })
        ));

        let small = Records {
            originals: BTreeMap::from([("a".into(), "b".into())]),
            rules: BTreeMap::new(),
        };
        let full = BTreeMap::from([("big".to_string(), "x".repeat(ANNOTATIONS_LIMIT - 10))]);
        assert!(matches!(
            small.annotations(&full),
            Err(RecordsError::AnnotationsFull { .. })
        ));
    }
}
