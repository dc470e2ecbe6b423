//! A Pod, or the pod template of a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or
//! CronJob, as `imagemap resolve -f` reads it from a manifest: the object's kind, namespace
//! and name, the labels its pods carry (what a mapping's `selector` sees), and its init
//! containers' and containers' images by slot (`init:NAME`, `NAME`), as admission keys them.
//! Pure.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::core::pod::pod_slots::{SlotKind, pod_slots};
use crate::core::pod::records::string_map;

/// The kinds whose pods `imagemap resolve` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TemplateKind {
    Pod,
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    Job,
    CronJob,
}

impl TemplateKind {
    /// The kind of `api_version` and `kind`, if its pods are read.
    #[must_use]
    pub fn of(api_version: &str, kind: &str) -> Option<TemplateKind> {
        Some(match (api_version, kind) {
            ("v1", "Pod") => TemplateKind::Pod,
            ("apps/v1", "Deployment") => TemplateKind::Deployment,
            ("apps/v1", "StatefulSet") => TemplateKind::StatefulSet,
            ("apps/v1", "DaemonSet") => TemplateKind::DaemonSet,
            ("apps/v1", "ReplicaSet") => TemplateKind::ReplicaSet,
            ("batch/v1", "Job") => TemplateKind::Job,
            ("batch/v1", "CronJob") => TemplateKind::CronJob,
            _ => return None,
        })
    }

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TemplateKind::Pod => "Pod",
            TemplateKind::Deployment => "Deployment",
            TemplateKind::StatefulSet => "StatefulSet",
            TemplateKind::DaemonSet => "DaemonSet",
            TemplateKind::ReplicaSet => "ReplicaSet",
            TemplateKind::Job => "Job",
            TemplateKind::CronJob => "CronJob",
        }
    }

    /// Where the pod (`metadata` and `spec`) is in an object of this kind.
    fn pod_pointer(self) -> &'static str {
        match self {
            TemplateKind::Pod => "",
            TemplateKind::CronJob => "/spec/jobTemplate/spec/template",
            _ => "/spec/template",
        }
    }

    /// Whether imagemap's live reload can roll its pods (their controller recreates what is
    /// evicted).
    #[must_use]
    pub fn rolls(self) -> bool {
        matches!(
            self,
            TemplateKind::Deployment
                | TemplateKind::StatefulSet
                | TemplateKind::DaemonSet
                | TemplateKind::ReplicaSet
        )
    }
}

/// A pod or a workload's pod template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTemplate {
    pub kind: TemplateKind,
    pub namespace: String,
    pub name: String,
    /// The labels its pods carry.
    pub labels: BTreeMap<String, String>,
    /// Slot key → image, in pod order.
    pub images: Vec<(String, String)>,
}

impl PodTemplate {
    /// The pod template of `object` (of `kind`), in `default_namespace` unless it names one;
    /// an error for an object without a name or a pod spec.
    pub fn read(
        kind: TemplateKind,
        object: &Value,
        default_namespace: &str,
    ) -> Result<PodTemplate, String> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{} has no metadata.name", kind.name()))?;
        let pod = object
            .pointer(kind.pod_pointer())
            .ok_or_else(|| format!("{} {name:?} has no pod template", kind.name()))?;
        let spec = pod
            .get("spec")
            .filter(|s| s.is_object())
            .ok_or_else(|| format!("{} {name:?} has no pod spec", kind.name()))?;
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(default_namespace);
        Ok(PodTemplate {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            labels: string_map(pod.pointer("/metadata/labels")),
            images: pod_slots(spec, &[SlotKind::Init, SlotKind::Container])
                .into_iter()
                .map(|slot| (slot.key, slot.image))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_are_read_where_each_kind_keeps_them() {
        let containers = json!({"initContainers": [{"name": "setup", "image": "busybox"}],
                                "containers": [{"name": "app", "image": "nginx:1.27"}]});
        let deployment = json!({"metadata": {"name": "web"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": containers}}});
        let t = PodTemplate::read(TemplateKind::Deployment, &deployment, "dev");
        let t = t.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("dev", "web"));
        assert_eq!(t.labels["app"], "web");
        assert_eq!(
            t.images,
            [
                ("init:setup".to_string(), "busybox".to_string()),
                ("app".to_string(), "nginx:1.27".to_string())
            ]
        );
        let cron = json!({"metadata": {"name": "nightly", "namespace": "ops"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": containers}}}}});
        let t = PodTemplate::read(TemplateKind::CronJob, &cron, "dev");
        assert_eq!(
            t.map(|t| (t.namespace, t.images.len())),
            Ok(("ops".into(), 2))
        );
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": containers});
        let t = PodTemplate::read(TemplateKind::Pod, &pod, "dev");
        assert_eq!(t.map(|t| t.labels["a"].clone()), Ok("b".into()));
        // No template: an error naming the object.
        let empty = json!({"metadata": {"name": "x"}, "spec": {}});
        assert!(
            PodTemplate::read(TemplateKind::Job, &empty, "dev")
                .is_err_and(|e| e.contains("Job \"x\""))
        );
        assert_eq!(
            TemplateKind::of("apps/v1", "DaemonSet"),
            Some(TemplateKind::DaemonSet)
        );
        assert_eq!(TemplateKind::of("v1", "Deployment"), None);
        assert!(TemplateKind::Deployment.rolls() && !TemplateKind::Job.rolls());
    }
}
