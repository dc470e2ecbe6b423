//! Kubernetes manifests as `imagemap resolve` reads them, from YAML text (the files are read
//! by `cli::manifest_files`): the kinds it knows, what identifies an object, and one set of
//! objects laid over another. Pure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::Resource;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::core::api::{ClusterImageMapping, GROUP, ImageMapping, VERSION, VirtualMachine};
use crate::core::local_registry::{self, LocalRegistry};
use crate::core::neonvm::{self, NeonVm};
use crate::core::pod_template::{PodTemplate, TemplateKind};

/// What was found in the manifests.
#[derive(Debug, Default)]
pub struct Manifests {
    pub image_mappings: Vec<ImageMapping>,
    pub cluster_image_mappings: Vec<ClusterImageMapping>,
    pub virtual_machines: Vec<VirtualMachine>,
    /// Pods, and the pod templates of workloads (Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets, Jobs, CronJobs).
    pub pod_templates: Vec<PodTemplate>,
    /// NeonVM's VirtualMachines (`vm.neon.tech/v1`).
    pub neonvm_vms: Vec<NeonVm>,
    /// Labels of the Namespace documents found, by name.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// The cluster's local registry, from the ConfigMap
    /// `kube-public/local-registry-hosting`: `None` when no such document was found,
    /// `Some(None)` when one advertises none.
    pub local_registry: Option<Option<LocalRegistry>>,
    /// Documents of other kinds, as `file: kind name` lines.
    pub skipped: Vec<String>,
}

/// What identifies an object across manifests and the cluster: kind, namespace (empty for
/// cluster-scoped kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

/// The kinds `imagemap resolve` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    ImageMapping,
    ClusterImageMapping,
    VirtualMachine,
    Namespace,
    LocalRegistryHosting,
}

impl ObjectKind {
    /// The kind named as `kubectl` names it (`imagemapping`, `imgmap`, `ImageMapping`, …).
    #[must_use]
    pub fn parse(text: &str) -> Option<ObjectKind> {
        let lower = text.to_ascii_lowercase();
        let base = lower.split('.').next().unwrap_or_default();
        Some(match base {
            "imagemapping" | "imagemappings" | "imgmap" => ObjectKind::ImageMapping,
            "clusterimagemapping" | "clusterimagemappings" | "cimgmap" => {
                ObjectKind::ClusterImageMapping
            }
            "virtualmachine" | "virtualmachines" | "imvm" => ObjectKind::VirtualMachine,
            "namespace" | "namespaces" | "ns" => ObjectKind::Namespace,
            _ => return None,
        })
    }

    /// Whether objects of the kind live in a namespace.
    #[must_use]
    pub fn namespaced(self) -> bool {
        matches!(
            self,
            ObjectKind::ImageMapping
                | ObjectKind::VirtualMachine
                | ObjectKind::LocalRegistryHosting
        )
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            ObjectKind::ImageMapping => "ImageMapping",
            ObjectKind::ClusterImageMapping => "ClusterImageMapping",
            ObjectKind::VirtualMachine => "VirtualMachine",
            ObjectKind::Namespace => "Namespace",
            ObjectKind::LocalRegistryHosting => "ConfigMap",
        };
        if self.namespace.is_empty() {
            write!(f, "{kind} {}", self.name)
        } else {
            write!(f, "{kind} {}/{}", self.namespace, self.name)
        }
    }
}

fn key_of<K: Resource>(kind: ObjectKind, object: &K) -> ObjectKey {
    let meta = object.meta();
    ObjectKey {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// A document that is not valid: the file it is in, its place in the stream, and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: document {document}: {message}")]
pub struct DocumentError {
    pub path: PathBuf,
    pub document: usize,
    pub message: String,
}

impl Manifests {
    /// The keys of every object held.
    #[must_use]
    pub fn keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = self
            .image_mappings
            .iter()
            .map(|m| key_of(ObjectKind::ImageMapping, m))
            .chain(
                self.cluster_image_mappings
                    .iter()
                    .map(|m| key_of(ObjectKind::ClusterImageMapping, m)),
            )
            .chain(
                self.virtual_machines
                    .iter()
                    .map(|v| key_of(ObjectKind::VirtualMachine, v)),
            )
            .chain(self.namespaces.keys().map(|name| ObjectKey {
                kind: ObjectKind::Namespace,
                namespace: String::new(),
                name: name.clone(),
            }))
            .collect();
        if self.local_registry.is_some() {
            keys.push(local_registry_key());
        }
        keys
    }

    /// Removes the objects `keys` name (absent ones are no error).
    pub fn remove(&mut self, keys: &[ObjectKey]) {
        let gone = |kind: ObjectKind, k: ObjectKey| keys.contains(&k) && k.kind == kind;
        self.image_mappings.retain(|m| {
            !gone(
                ObjectKind::ImageMapping,
                key_of(ObjectKind::ImageMapping, m),
            )
        });
        self.cluster_image_mappings.retain(|m| {
            !gone(
                ObjectKind::ClusterImageMapping,
                key_of(ObjectKind::ClusterImageMapping, m),
            )
        });
        self.virtual_machines.retain(|v| {
            !gone(
                ObjectKind::VirtualMachine,
                key_of(ObjectKind::VirtualMachine, v),
            )
        });
        for k in keys {
            match k.kind {
                ObjectKind::Namespace => {
                    self.namespaces.remove(&k.name);
                }
                ObjectKind::LocalRegistryHosting => self.local_registry = Some(None),
                _ => {}
            }
        }
    }

    /// Lays `changes` over these objects: an object of the same kind, namespace and name
    /// is replaced, others are added.
    pub fn overlay(&mut self, changes: Manifests) {
        self.remove(&changes.keys());
        self.image_mappings.extend(changes.image_mappings);
        self.cluster_image_mappings
            .extend(changes.cluster_image_mappings);
        self.virtual_machines.extend(changes.virtual_machines);
        self.namespaces.extend(changes.namespaces);
        if changes.local_registry.is_some() {
            self.local_registry = changes.local_registry;
        }
    }

    /// The local registry these objects advertise, if any.
    #[must_use]
    pub fn local_registry(&self) -> Option<&LocalRegistry> {
        self.local_registry.as_ref().and_then(Option::as_ref)
    }

    /// Adds every document of a multi-document YAML stream.
    pub fn add_stream(
        &mut self,
        path: &Path,
        text: &str,
        default_namespace: &str,
    ) -> Result<(), DocumentError> {
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let document = i + 1;
            let err = |message: String| DocumentError {
                path: path.to_path_buf(),
                document,
                message,
            };
            let value = serde_yaml_ng::Value::deserialize(doc)
                .map_err(|e| err(format!("invalid YAML: {e}")))?;
            if value.is_null() {
                continue;
            }
            let value: serde_json::Value = serde_json::to_value(&value)
                .map_err(|e| err(format!("not a Kubernetes object: {e}")))?;
            self.add_object(value, default_namespace).map_err(err)?;
        }
        Ok(())
    }

    fn add_object(
        &mut self,
        value: serde_json::Value,
        default_namespace: &str,
    ) -> Result<(), String> {
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        let kind = value
            .get("kind")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        let name = value
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        if kind.is_empty() || api_version.is_empty() {
            return Err("not a Kubernetes object: apiVersion and kind are required".into());
        }
        if kind == "List" {
            if let Some(items) = value.get("items").and_then(|v| v.as_array()) {
                for item in items.clone() {
                    self.add_object(item, default_namespace)?;
                }
            }
            return Ok(());
        }
        if let Some(template) = TemplateKind::of(&api_version, &kind) {
            self.pod_templates
                .push(PodTemplate::read(template, &value, default_namespace)?);
            return Ok(());
        }
        if kind == "VirtualMachine" && api_version == format!("{}/v1", neonvm::GROUP) {
            let mut value = value;
            if value.pointer("/metadata/namespace").is_none()
                && let Some(metadata) = value.get_mut("metadata").and_then(|m| m.as_object_mut())
            {
                metadata.insert("namespace".into(), default_namespace.into());
            }
            let vm = NeonVm::read(&value)
                .ok_or_else(|| format!("{api_version} {kind} {name:?} has no metadata.name"))?;
            self.neonvm_vms.push(vm);
            return Ok(());
        }
        let ours = api_version == format!("{GROUP}/{VERSION}");
        let described = format!("{kind} {name:?}");
        if ours && name.is_empty() {
            return Err(format!("{described} has no metadata.name"));
        }
        let parse_err = |e: serde_json::Error| format!("{described} is not valid: {e}");
        match kind.as_str() {
            "ImageMapping" if ours => {
                let m = parse_object(value, Some(default_namespace)).map_err(parse_err)?;
                self.image_mappings.push(m);
            }
            "ClusterImageMapping" if ours => {
                let m = parse_object(value, None).map_err(parse_err)?;
                self.cluster_image_mappings.push(m);
            }
            "VirtualMachine" if ours => {
                let vm = parse_object(value, Some(default_namespace)).map_err(parse_err)?;
                self.virtual_machines.push(vm);
            }
            "ConfigMap"
                if api_version == "v1"
                    && name == local_registry::NAME
                    && value
                        .pointer("/metadata/namespace")
                        .and_then(|v| v.as_str())
                        == Some(local_registry::NAMESPACE) =>
            {
                let data = value
                    .get("data")
                    .cloned()
                    .map(serde_json::from_value::<BTreeMap<String, String>>)
                    .transpose()
                    .map_err(parse_err)?
                    .unwrap_or_default();
                let registry = LocalRegistry::from_data(&data)
                    .map_err(|e| format!("{described} in {}: {e}", local_registry::NAMESPACE))?;
                self.local_registry = Some(registry);
            }
            "Namespace" if api_version == "v1" => {
                let labels = value
                    .pointer("/metadata/labels")
                    .cloned()
                    .map(serde_json::from_value::<BTreeMap<String, String>>)
                    .transpose()
                    .map_err(parse_err)?
                    .unwrap_or_default();
                self.namespaces.insert(name, labels);
            }
            _ => self.skipped.push(format!("{api_version} {kind} {name:?}")),
        }
        Ok(())
    }
}

/// Deserializes an object; a namespaced one without namespace gets `default_namespace`.
fn parse_object<K: Resource + DeserializeOwned>(
    value: serde_json::Value,
    default_namespace: Option<&str>,
) -> Result<K, serde_json::Error> {
    let mut object: K = serde_json::from_value(value)?;
    if let Some(ns) = default_namespace {
        object
            .meta_mut()
            .namespace
            .get_or_insert_with(|| ns.to_string());
    }
    Ok(object)
}

/// The key of the ConfigMap `kube-public/local-registry-hosting`.
#[must_use]
pub fn local_registry_key() -> ObjectKey {
    ObjectKey {
        kind: ObjectKind::LocalRegistryHosting,
        namespace: local_registry::NAMESPACE.into(),
        name: local_registry::NAME.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kinds_and_skips_others() {
        let mut m = Manifests::default();
        let text = r"
apiVersion: imagemap.dev/v1alpha1
kind: ImageMapping
metadata: {name: a}
spec:
  rules: [{match: {exact: nginx}, to: mirror.io/nginx}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
---
apiVersion: v1
kind: Namespace
metadata: {name: dev, labels: {team: x}}
---
";
        m.add_stream(Path::new("f.yaml"), text, "ns1").unwrap();
        assert_eq!(
            m.image_mappings[0].metadata.namespace.as_deref(),
            Some("ns1")
        );
        assert_eq!(m.skipped, ["v1 ConfigMap \"c\""]);
        assert_eq!(m.namespaces["dev"]["team"], "x");
    }

    #[test]
    fn malformed_documents_name_file_and_document() {
        let mut m = Manifests::default();
        let text = "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {name: a}\nspec: {rules: 3}\n";
        let err = m
            .add_stream(Path::new("x.yaml"), text, "d")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("x.yaml: document 2: ImageMapping \"a\" is not valid"),
            "{err}"
        );
        let err = m
            .add_stream(Path::new("y.yaml"), "a: [", "d")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("y.yaml: document 1: invalid YAML"), "{err}");
    }
}
