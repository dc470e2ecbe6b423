//! Who requests an image, and whether dry-run mappings take part: what a resolution depends on
//! besides the reference.

use std::collections::BTreeMap;

/// Who requests an image: the namespace, the requester's labels (a VM's, a pod's) and its
/// namespace's labels.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// Whether the namespace's ImageMappings apply: `false` for a pod that opts out of them
    /// (`imagemap.dev/skip`); ClusterImageMappings apply whatever it says.
    pub namespace_rules: bool,
}

/// Whether dry-run mappings take part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// What actually applies: dry-run mappings are ignored.
    Live,
    /// What would apply if every dry-run mapping were live.
    Preview,
}
