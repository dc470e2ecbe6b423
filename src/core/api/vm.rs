//! `VirtualMachine`: a NeonVM-shaped virtual machine whose runner pod the operator owns.

// Several `printcolumn(...)` entries repeat `type_ = ...`; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, LocalObjectReference, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A virtual machine run by a runner pod. Its images (`spec.guest.rootDisk.image`,
/// `spec.guest.kernelImage`, `spec.runnerImage`, `spec.extraInitContainers[].image`) are
/// resolved through ImageMappings and ClusterImageMappings; the result is recorded in
/// `status.resolvedImages` and never written back into the spec.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "imagemap.dev",
    version = "v1alpha1",
    kind = "VirtualMachine",
    namespaced,
    status = "VirtualMachineStatus",
    shortname = "imvm",
    category = "imagemap",
    doc = "A virtual machine run by a runner pod whose images are resolved through ImageMappings.",
    validation = kube::core::Rule::new("self.metadata.name.size() <= 63").message("a VirtualMachine name is at most 63 characters: it labels the runner pod"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".status.podName"),
    printcolumn(name = "LiveReload", type_ = "boolean", json_path = ".spec.liveReload"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "RootDisk",
        type_ = "string",
        priority = 1,
        json_path = ".status.resolvedImages[?(@.slot==\"rootDisk\")].resolved",
        description = "Resolved root disk image"
    ),
    printcolumn(
        name = "Runner",
        type_ = "string",
        priority = 1,
        json_path = ".status.resolvedImages[?(@.slot==\"runner\")].resolved",
        description = "Resolved runner image"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// When true, the runner pod is recreated as soon as the VM's resolved images change.
    /// When false, the VM reports `ImagesCurrent=False` (reason `RestartRequired`) and the new
    /// images apply at the next pod creation.
    #[serde(default)]
    pub live_reload: bool,
    /// What happens when the runner pod finishes or disappears, as in NeonVM:
    /// `Always` (default) starts a new pod, `OnFailure` only after a failure, `Never` never.
    #[serde(default)]
    pub restart_policy: RestartPolicy,
    /// Image of the `runner` container. Absent: the operator's `--default-runner-image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub runner_image: Option<String>,
    /// The guest's disk and kernel.
    pub guest: Guest,
    /// Init containers run after `init` and `init-kernel`; their images are mapped too.
    /// Their names are unique, and none is `init`, `init-kernel` or `runner` (the runner
    /// pod's own containers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = kube::core::Rule::new("self.all(c, !(c.name in ['init', 'init-kernel', 'runner']))").message("extra init containers may not be named init, init-kernel or runner: the runner pod has containers of those names"))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub extra_init_containers: Vec<Container>,
    /// Secrets used to pull the pod's images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Resources of the `runner` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Boxed, as `affinity`: most VMs set neither, and the VM cache keeps every VM.
    pub pod_resources: Option<Box<ResourceRequirements>>,
    /// Scheduler of the runner pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Node selector of the runner pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Affinity of the runner pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<Affinity>>,
    /// Tolerations of the runner pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Service account of the runner pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Grace period of the runner pod, in seconds: from 0 to 86,400. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86_400))]
    pub termination_grace_period_seconds: Option<i64>,
}

/// The guest's images.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Guest {
    /// The root disk.
    pub root_disk: RootDisk,
    /// Image holding `/vmlinuz`, copied by the `init-kernel` init container. Absent: the
    /// kernel inside the runner image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub kernel_image: Option<String>,
}

/// The root disk image.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RootDisk {
    /// Image holding `/disk.qcow2`, copied by the `init` init container. Required.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Pull policy of the `init` and `init-kernel` containers. Default `IfNotPresent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
}

/// A Kubernetes image pull policy.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// When a finished or vanished runner pod is replaced.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum RestartPolicy {
    #[default]
    Always,
    OnFailure,
    Never,
}

/// Lifecycle phase of a VirtualMachine, as in NeonVM.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl VmPhase {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            VmPhase::Pending => "Pending",
            VmPhase::Running => "Running",
            VmPhase::Succeeded => "Succeeded",
            VmPhase::Failed => "Failed",
        }
    }
}

/// What the operator observed and decided for a VirtualMachine.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// `Pending` until the runner container is ready, then `Running`; `Succeeded` or
    /// `Failed` when the pod finished or vanished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VmPhase>,
    /// Name of the current runner pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// How many times a new runner pod replaced a finished one.
    #[serde(default)]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub restart_count: i32,
    /// Restarts in a row after pods that ran less than 10 minutes; the wait before the next
    /// doubles with each, from 10 s to 5 minutes.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub crash_loop_count: i32,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// Every image slot of the VM: what was requested, what runs, and which rule decided it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // Each entry and condition is an `Arc`: the VM cache keeps one copy of equal ones,
    // shared by every VM that holds them.
    pub resolved_images: Vec<Arc<ResolvedImage>>,
    /// `Ready`, `ImagesResolved`, `ImagesCurrent`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::bounded_conditions::schema")]
    pub conditions: Vec<Arc<Condition>>,
}

impl VirtualMachineStatus {
    /// The conditions, as values.
    #[must_use]
    pub fn condition_values(&self) -> Vec<Condition> {
        self.conditions
            .iter()
            .map(|c| Condition::clone(c))
            .collect()
    }

    /// The resolved images, as values.
    #[must_use]
    pub fn resolved_image_values(&self) -> Vec<ResolvedImage> {
        self.resolved_images
            .iter()
            .map(|i| ResolvedImage::clone(i))
            .collect()
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // The signature serde calls.
fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The resolution of one image slot.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    /// `rootDisk`, `kernel`, `runner`, or `extraInitContainers/<name>`.
    pub slot: String,
    /// The image as requested by the spec (or the operator's default runner image).
    pub requested: String,
    /// The image the pod uses. Absent when the slot could not be resolved (see `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// The rule that decided it. Absent: no rule matched and the requested image is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RuleSource>,
    /// Why the slot could not be resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub error: Option<String>,
    /// The deciding rule follows the resolved image's tag (`followTag`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow_tag: bool,
    /// The manifest digest the followed tag pointed to when last verified; the pod runs
    /// `resolved@digest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 135))]
    pub digest: Option<String>,
}

impl ResolvedImage {
    /// The image the pod runs: the resolved reference, pinned to `digest` when a followed
    /// tag's digest is known (`name:tag@sha256:…`).
    #[must_use]
    pub fn pod_image(&self) -> Option<String> {
        let resolved = self.resolved.as_deref()?;
        Some(match &self.digest {
            Some(digest) => format!("{resolved}@{digest}"),
            None => resolved.to_string(),
        })
    }
}

/// A rule of an ImageMapping or ClusterImageMapping.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct RuleSource {
    /// `ImageMapping` or `ClusterImageMapping`.
    pub kind: String,
    /// Namespace of an ImageMapping; absent for a ClusterImageMapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the mapping.
    pub name: String,
    /// Index of the rule in `spec.rules`.
    #[schemars(range(min = 0, max = 255))]
    pub rule: i32,
    /// `exact`, `repository`, `prefix` or `regex`.
    #[serde(rename = "match")]
    pub match_kind: String,
}
