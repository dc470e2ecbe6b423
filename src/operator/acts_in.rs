//! The namespaces the operator acts in (`--namespace`, repeatable; none given: every
//! namespace), as every task that filters by namespace takes them.

/// The namespaces the operator acts in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActsIn(Vec<String>);

impl ActsIn {
    /// `namespaces`; empty: every namespace.
    #[must_use]
    pub fn new(namespaces: Vec<String>) -> ActsIn {
        ActsIn(namespaces)
    }

    /// Whether the operator acts in `namespace`.
    #[must_use]
    pub fn contains(&self, namespace: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|n| n == namespace)
    }

    /// The namespaces it names; empty: every namespace.
    #[must_use]
    pub fn named(&self) -> &[String] {
        &self.0
    }

    /// Whether it acts in every namespace (and so writes ClusterImageMapping statuses,
    /// which count VMs of every namespace).
    #[must_use]
    pub fn everywhere(&self) -> bool {
        self.0.is_empty()
    }
}
