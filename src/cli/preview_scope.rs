//! Which namespaces `imagemap resolve --cluster` looks at. As kubectl does, the objects of
//! `-f` are previewed in their own namespaces: the scope is the default namespace (`-n`, else
//! the context's) and every namespace the change names — the namespaces of its ImageMappings
//! and VirtualMachines, its Namespace documents (their labels decide which
//! ClusterImageMappings their VMs get) and what `--delete` names — or every namespace with
//! `-A`. With `-n`, an ImageMapping or VirtualMachine of a file that names another namespace
//! is an error, as `kubectl apply -n` and `kubectl delete -n` give. Pure.

use std::collections::BTreeSet;

use crate::core::manifests::{ObjectKey, ObjectKind};

/// The namespaces a preview looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviewScope {
    /// Every namespace (`-A`).
    All,
    /// These, sorted.
    Namespaces(BTreeSet<String>),
}

impl PreviewScope {
    /// The namespaces, `None` for every namespace.
    #[must_use]
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        match self {
            PreviewScope::All => None,
            PreviewScope::Namespaces(set) => Some(set),
        }
    }
}

impl std::fmt::Display for PreviewScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PreviewScope::All => write!(f, "all namespaces"),
            PreviewScope::Namespaces(set) => {
                let names: Vec<&str> = set.iter().map(String::as_str).collect();
                write!(f, "namespaces: {}", names.join(", "))
            }
        }
    }
}

/// What the scope is decided from.
#[derive(Debug, Clone, Copy)]
pub struct ScopeRequest<'a> {
    /// `-n`, else the context's namespace: the namespace of objects that name none.
    pub default_namespace: &'a str,
    /// Whether `-n` was given: then no object of a file may name another namespace.
    pub namespace_given: bool,
    /// `-A`.
    pub all_namespaces: bool,
    /// The objects of files: of `-f`, and of the files `--delete` names.
    pub from_files: &'a [ObjectKey],
    /// The objects `--delete` names on the command line (`KIND/NAME`, `KIND/NAMESPACE/NAME`):
    /// a namespace named there is meant, whatever `-n` says.
    pub named: &'a [ObjectKey],
}

/// An object of a file in another namespace than `-n`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{object}: the namespace from the provided object \"{ns}\" does not match the namespace \
     \"{namespace}\". You must pass '--namespace={ns}' to perform this operation.",
    ns = object.namespace
)]
pub struct NamespaceMismatch {
    pub object: ObjectKey,
    /// The namespace `-n` gave.
    pub namespace: String,
}

/// The scope of a preview, or the first object (in key order) that names another
/// namespace than `-n`.
pub fn scope(request: &ScopeRequest<'_>) -> Result<PreviewScope, NamespaceMismatch> {
    if request.all_namespaces {
        return Ok(PreviewScope::All);
    }
    if request.namespace_given {
        let mismatch = request
            .from_files
            .iter()
            .filter(|k| in_namespace(k.kind) && k.namespace != request.default_namespace)
            .min();
        if let Some(object) = mismatch {
            return Err(NamespaceMismatch {
                object: object.clone(),
                namespace: request.default_namespace.to_string(),
            });
        }
    }
    let named = request
        .from_files
        .iter()
        .chain(request.named)
        .filter_map(namespace_named);
    let mut set: BTreeSet<String> = named.map(str::to_string).collect();
    set.insert(request.default_namespace.to_string());
    Ok(PreviewScope::Namespaces(set))
}

/// Whether objects of `kind` are previewed in their namespace. Not the local registry
/// ConfigMap: its namespace is always `kube-public`, and it applies in every namespace, so
/// `-n` never disagrees with it.
fn in_namespace(kind: ObjectKind) -> bool {
    matches!(kind, ObjectKind::ImageMapping | ObjectKind::VirtualMachine)
}

/// The namespace whose VMs an object's change may affect: an ImageMapping's or a VM's own,
/// a Namespace's name (its labels); none for ClusterImageMappings (they apply in the
/// scope) and the local registry ConfigMap (it applies everywhere).
fn namespace_named(key: &ObjectKey) -> Option<&str> {
    match key.kind {
        ObjectKind::ImageMapping | ObjectKind::VirtualMachine => Some(&key.namespace),
        ObjectKind::Namespace => Some(&key.name),
        ObjectKind::ClusterImageMapping | ObjectKind::LocalRegistryHosting => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::core::manifests::local_registry_key;

    fn key(kind: ObjectKind, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn request<'a>(
        default_namespace: &'a str,
        namespace_given: bool,
        from_files: &'a [ObjectKey],
        named: &'a [ObjectKey],
    ) -> ScopeRequest<'a> {
        ScopeRequest {
            default_namespace,
            namespace_given,
            all_namespaces: false,
            from_files,
            named,
        }
    }

    fn namespaces(names: &[&str]) -> PreviewScope {
        PreviewScope::Namespaces(names.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn files_add_the_namespaces_they_name_to_the_contexts() {
        let files = [
            key(ObjectKind::ImageMapping, "e2e-preview", "tilt"),
            key(ObjectKind::VirtualMachine, "default", "db"),
            key(ObjectKind::VirtualMachine, "prod", "web"),
        ];
        assert_eq!(
            scope(&request("default", false, &files, &[])).unwrap(),
            namespaces(&["default", "e2e-preview", "prod"])
        );
        // Nothing named: the default namespace alone.
        assert_eq!(
            scope(&request("dev", false, &[], &[])).unwrap(),
            namespaces(&["dev"])
        );
    }

    #[test]
    fn namespace_documents_and_deletions_are_in_scope() {
        let files = [
            key(ObjectKind::Namespace, "", "labelled"),
            key(ObjectKind::ClusterImageMapping, "", "mirror"),
            local_registry_key(),
        ];
        let named = [
            key(ObjectKind::ImageMapping, "old", "tilt"),
            key(ObjectKind::Namespace, "", "gone"),
        ];
        assert_eq!(
            scope(&request("dev", false, &files, &named)).unwrap(),
            namespaces(&["dev", "gone", "labelled", "old"]),
            "ClusterImageMappings and the local registry name no namespace"
        );
    }

    #[test]
    fn with_n_an_object_of_another_namespace_is_an_error_naming_both() {
        let files = [
            key(ObjectKind::ImageMapping, "dev", "ok"),
            key(ObjectKind::VirtualMachine, "prod", "web"),
            key(ObjectKind::ImageMapping, "stage", "tilt"),
        ];
        let err = scope(&request("dev", true, &files, &[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ImageMapping stage/tilt: the namespace from the provided object \"stage\" does \
             not match the namespace \"dev\". You must pass '--namespace=stage' to perform \
             this operation."
        );
        // The same files without -n: all previewed.
        assert_eq!(
            scope(&request("dev", false, &files, &[])).unwrap(),
            namespaces(&["dev", "prod", "stage"])
        );
    }

    #[test]
    fn with_n_cluster_scoped_objects_the_local_registry_and_named_deletions_pass() {
        let files = [
            key(ObjectKind::ImageMapping, "dev", "tilt"),
            key(ObjectKind::Namespace, "", "other"),
            key(ObjectKind::ClusterImageMapping, "", "mirror"),
        ];
        let named = [key(ObjectKind::VirtualMachine, "prod", "web")];
        assert_eq!(
            scope(&request("dev", true, &files, &named)).unwrap(),
            namespaces(&["dev", "other", "prod"])
        );
        // The local registry ConfigMap is always in kube-public, and applies everywhere.
        assert_eq!(
            scope(&request("dev", true, &[local_registry_key()], &[])).unwrap(),
            namespaces(&["dev"])
        );
    }

    #[test]
    fn all_namespaces_looks_everywhere() {
        let files = [key(ObjectKind::ImageMapping, "prod", "tilt")];
        let all = ScopeRequest {
            all_namespaces: true,
            ..request("dev", false, &files, &[])
        };
        assert_eq!(scope(&all).unwrap(), PreviewScope::All);
        assert_eq!(PreviewScope::All.to_string(), "all namespaces");
        assert_eq!(PreviewScope::All.namespaces(), None);
        assert_eq!(
            namespaces(&["prod", "dev"]).to_string(),
            "namespaces: dev, prod"
        );
    }
}
