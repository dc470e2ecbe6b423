//! A mapping as the engine sees it (from either kind), and the keys that name mappings
//! and their rules.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

use crate::core::api::{ClusterImageMapping, ImageMapping, MappingRule, RuleSource};

use super::pattern::MatchKind;

/// Whether a mapping is an ImageMapping or a ClusterImageMapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MappingScope {
    Namespaced,
    Cluster,
}

impl MappingScope {
    /// The kind of the mappings of this scope.
    #[must_use]
    pub fn kind(self) -> &'static str {
        match self {
            MappingScope::Namespaced => "ImageMapping",
            MappingScope::Cluster => "ClusterImageMapping",
        }
    }
}

/// A mapping as the engine sees it, from either kind.
#[derive(Debug, Clone, PartialEq)]
pub struct MappingInput {
    pub scope: MappingScope,
    /// Namespace of an ImageMapping; `None` for a ClusterImageMapping.
    pub namespace: Option<String>,
    pub name: String,
    pub priority: i32,
    pub selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
    pub dry_run: bool,
    pub rules: Vec<MappingRule>,
}

impl MappingInput {
    /// The mapping's key: its scope, its namespace (none for a ClusterImageMapping) and name.
    #[must_use]
    pub fn key(&self) -> MappingKey {
        MappingKey {
            scope: self.scope,
            namespace: match self.scope {
                MappingScope::Namespaced => self.namespace.clone(),
                MappingScope::Cluster => None,
            },
            name: self.name.clone(),
        }
    }
}

impl From<&ImageMapping> for MappingInput {
    fn from(m: &ImageMapping) -> Self {
        MappingInput {
            scope: MappingScope::Namespaced,
            namespace: Some(m.namespace().unwrap_or_default()),
            name: m.name_any(),
            priority: m.spec.priority,
            selector: m.spec.selector.clone(),
            namespace_selector: None,
            dry_run: m.spec.dry_run,
            rules: m.spec.rules.clone(),
        }
    }
}

impl From<&ClusterImageMapping> for MappingInput {
    fn from(m: &ClusterImageMapping) -> Self {
        MappingInput {
            scope: MappingScope::Cluster,
            namespace: None,
            name: m.name_any(),
            priority: m.spec.priority,
            selector: m.spec.selector.clone(),
            namespace_selector: m.spec.namespace_selector.clone(),
            dry_run: m.spec.dry_run,
            rules: m.spec.rules.clone(),
        }
    }
}

/// Identifies a mapping: kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingKey {
    pub scope: MappingScope,
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for MappingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.scope.kind(), self.name),
            None => write!(f, "{} {}", self.scope.kind(), self.name),
        }
    }
}

/// One rule of one mapping: its mapping, its index in `spec.rules` and its match kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleRef {
    pub mapping: MappingKey,
    pub index: usize,
    pub kind: MatchKind,
}

impl RuleRef {
    /// The rule as a VM's status records it.
    #[must_use]
    pub fn source(&self) -> RuleSource {
        RuleSource {
            kind: self.mapping.scope.kind().to_string(),
            namespace: self.mapping.namespace.clone(),
            name: self.mapping.name.clone(),
            rule: i32::try_from(self.index).unwrap_or(i32::MAX),
            match_kind: self.kind.as_str().to_string(),
        }
    }
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rule {}", self.mapping, self.index)
    }
}
