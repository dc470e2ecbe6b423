//! An AdmissionReview of a pod, read from its bytes once and only as far as admission
//! looks: the request's own fields, and of its pods the metadata (without `managedFields`)
//! and each container's name and image, in place. Every other field of a pod — env, volumes,
//! probes, most of a large pod's bytes — is skipped as it is read, never built into memory.
//! Called by the handler; calls nothing.

use std::fmt;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The pods of a review, as the pure core reads them: `{"metadata": …, "spec": {…}}`.
pub struct ReviewPods {
    /// The pod admitted.
    pub object: Option<Value>,
    /// For an update, the pod before it.
    pub old_object: Option<Value>,
}

/// Why a body is not a review of a pod.
#[derive(Debug, thiserror::Error)]
#[error("not an AdmissionReview: {0}")]
pub struct UnreadableReview(String);

/// The review's request (its pods taken out) and its pods; `Ok(None)`: a review without a
/// request.
pub fn parse(
    body: &[u8],
) -> Result<Option<(AdmissionRequest<DynamicObject>, ReviewPods)>, UnreadableReview> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| UnreadableReview(e.to_string()))?;
    let Some(parts) = review.request else {
        return Ok(None);
    };
    let rest = serde_json::json!({
        "apiVersion": review.api_version,
        "kind": review.kind,
        "request": Value::Object(parts.rest),
    });
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(rest).map_err(|e| UnreadableReview(e.to_string()))?;
    let Ok(request) = review.try_into() else {
        return Ok(None);
    };
    Ok(Some((
        request,
        ReviewPods {
            object: parts.object.map(SlimPod::into_value),
            old_object: parts.old_object.map(SlimPod::into_value),
        },
    )))
}

/// The review's envelope.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    api_version: Value,
    #[serde(default)]
    kind: Value,
    request: Option<RequestParts>,
}

/// The request: its pods, and every other field as it came.
struct RequestParts {
    object: Option<SlimPod>,
    old_object: Option<SlimPod>,
    rest: Map<String, Value>,
}

impl<'de> Deserialize<'de> for RequestParts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Parts;
        impl<'de> Visitor<'de> for Parts {
            type Value = RequestParts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an admission request")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestParts, A::Error> {
                let mut parts = RequestParts {
                    object: None,
                    old_object: None,
                    rest: Map::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "object" => parts.object = map.next_value()?,
                        "oldObject" => parts.old_object = map.next_value()?,
                        _ => {
                            let value = map.next_value()?;
                            parts.rest.insert(key, value);
                        }
                    }
                }
                Ok(parts)
            }
        }
        deserializer.deserialize_map(Parts)
    }
}

/// What admission reads of a pod.
#[derive(Deserialize, Default)]
#[serde(default)]
struct SlimPod {
    metadata: Metadata,
    spec: Spec,
}

impl SlimPod {
    fn into_value(self) -> Value {
        let mut spec = Map::new();
        for (field, containers) in [
            ("initContainers", self.spec.init_containers),
            ("containers", self.spec.containers),
            ("ephemeralContainers", self.spec.ephemeral_containers),
        ] {
            if let Some(containers) = containers {
                let list = containers.into_iter().map(Container::into_value).collect();
                spec.insert(field.to_string(), Value::Array(list));
            }
        }
        serde_json::json!({"metadata": Value::Object(self.metadata.0), "spec": spec})
    }
}

/// A pod's metadata but its `managedFields`.
#[derive(Default)]
struct Metadata(Map<String, Value>);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Metadata;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a pod's metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
                let mut fields = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "managedFields" {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        let value = map.next_value()?;
                        fields.insert(key, value);
                    }
                }
                Ok(Metadata(fields))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Metadata, E> {
                Ok(Metadata::default())
            }
        }
        deserializer.deserialize_any(Fields)
    }
}

/// A pod's containers, each list where the pod has it.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Spec {
    init_containers: Option<Vec<Container>>,
    containers: Option<Vec<Container>>,
    ephemeral_containers: Option<Vec<Container>>,
}

/// A container's name and image, where it has them.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Container {
    name: Option<Value>,
    image: Option<Value>,
}

impl Container {
    fn into_value(self) -> Value {
        let mut fields = Map::new();
        if let Some(name) = self.name {
            fields.insert("name".into(), name);
        }
        if let Some(image) = self.image {
            fields.insert("image".into(), image);
        }
        Value::Object(fields)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn review(object: &Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0c9a6f2e-0000-4000-8000-000000000001",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "dev",
                "operation": "CREATE",
                "userInfo": {"username": "test"},
                "object": object,
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_read_as_far_as_admission_looks() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": "web-", "labels": {"app": "web"},
                "annotations": {"a": "b"}, "ownerReferences": [{"kind": "ReplicaSet", "name": "web"}],
                "managedFields": [{"manager": "kube-controller-manager"}],
            },
            "spec": {
                "initContainers": [{"name": "init", "image": "busybox:1", "env": [{"name": "X", "value": "1"}]}],
                "containers": [{"name": "app", "image": "nginx:1"}, {"name": "noimage"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
            },
        });
        let (request, pods) = parse(&review(&pod)).unwrap().unwrap();
        assert_eq!(request.namespace.as_deref(), Some("dev"));
        assert!(request.object.is_none(), "the pod is taken out");
        assert_eq!(
            pods.object.unwrap(),
            json!({
                "metadata": {
                    "generateName": "web-", "labels": {"app": "web"},
                    "annotations": {"a": "b"}, "ownerReferences": [{"kind": "ReplicaSet", "name": "web"}],
                },
                "spec": {
                    "initContainers": [{"name": "init", "image": "busybox:1"}],
                    "containers": [{"name": "app", "image": "nginx:1"}, {"name": "noimage"}],
                },
            })
        );
        assert!(pods.old_object.is_none());
    }

    #[test]
    fn what_is_not_a_review_is_told_apart_from_a_review_without_a_request() {
        assert!(parse(b"{").is_err());
        assert!(parse(b"[1]").is_err());
        assert!(parse(&review(&json!({"metadata": 5}))).is_err());
        let no_request = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
        assert!(
            parse(&serde_json::to_vec(&no_request).unwrap())
                .unwrap()
                .is_none()
        );
    }
}
