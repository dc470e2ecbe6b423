//! A followed tag as a key: the reference and whose rule follows it — how the digests every
//! replica holds for admission, and the tags the leader follows, are looked up.

use crate::core::rules::{MappingScope, MatchKind, RuleRef};

/// Whose rule follows a tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FollowedBy {
    /// A ClusterImageMapping's (a cluster administrator wrote it).
    Cluster,
    /// An ImageMapping's, in this namespace.
    Namespace(String),
}

/// A followed tag: the reference (`registry/repository:tag`) and whose rule follows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Followed {
    pub reference: String,
    pub by: FollowedBy,
}

impl Followed {
    /// `reference`, followed by the rule `rule` for a VM of `namespace`: the cluster's
    /// only when a ClusterImageMapping rule fixes the repository (`exact`, `repository`);
    /// otherwise the namespace's (the VM chose what is asked for).
    pub fn of(reference: &str, rule: Option<&RuleRef>, namespace: &str) -> Followed {
        let by = match rule {
            Some(r)
                if r.mapping.scope == MappingScope::Cluster
                    && matches!(r.kind, MatchKind::Exact | MatchKind::Repository) =>
            {
                FollowedBy::Cluster
            }
            Some(r) if r.mapping.scope == MappingScope::Namespaced => {
                FollowedBy::Namespace(r.mapping.namespace.clone().unwrap_or_default())
            }
            _ => FollowedBy::Namespace(namespace.to_string()),
        };
        Followed {
            reference: reference.to_string(),
            by,
        }
    }
}
