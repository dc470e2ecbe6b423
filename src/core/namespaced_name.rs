//! An object's namespace and name — what kubectl writes `namespace/name` — as one value,
//! formatted only where it is shown.

use std::fmt;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

/// A namespaced object's namespace and name (the namespace is empty for cluster-scoped
/// objects).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl NamespacedName {
    /// The object `name` in `namespace` (empty: a cluster-scoped object).
    #[must_use]
    pub fn new(namespace: &str, name: &str) -> NamespacedName {
        NamespacedName {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The same object as kube's caches and controllers key it.
    #[must_use]
    pub fn object_ref<K: kube::Resource<DynamicType = ()>>(&self) -> ObjectRef<K> {
        let r = ObjectRef::new(&self.name);
        if self.namespace.is_empty() {
            r
        } else {
            r.within(&self.namespace)
        }
    }

    /// The namespace and name of `object`.
    #[must_use]
    pub fn of<K: ResourceExt>(object: &K) -> NamespacedName {
        NamespacedName {
            namespace: object.namespace().unwrap_or_default(),
            name: object.name_any(),
        }
    }
}

impl<K: kube::Resource> From<&ObjectRef<K>> for NamespacedName {
    fn from(r: &ObjectRef<K>) -> Self {
        NamespacedName {
            namespace: r.namespace.clone().unwrap_or_default(),
            name: r.name.clone(),
        }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::api::{VirtualMachine, VirtualMachineSpec};

    #[test]
    fn shown_as_kubectl_writes_it_and_the_same_from_an_object_or_a_reference() {
        let mut vm = VirtualMachine::new("db", VirtualMachineSpec::default());
        vm.metadata.namespace = Some("dev".into());
        let key = NamespacedName::of(&vm);
        assert_eq!(key.to_string(), "dev/db");
        assert_eq!(NamespacedName::from(&ObjectRef::from_obj(&vm)), key);
        let cluster = NamespacedName {
            namespace: String::new(),
            name: "mirror".into(),
        };
        assert_eq!(cluster.to_string(), "mirror");
    }
}
