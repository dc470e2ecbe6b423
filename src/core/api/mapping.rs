//! `ImageMapping` (namespaced) and `ClusterImageMapping` (cluster-scoped).

// Several `printcolumn(...)` entries repeat `type_ = ...`; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Rewrite rules for the images that Pods, imagemap's VirtualMachines and NeonVM's
/// VirtualMachines in this namespace request.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "imagemap.dev",
    version = "v1alpha1",
    kind = "ImageMapping",
    namespaced,
    status = "ImageMappingStatus",
    shortname = "imgmap",
    category = "imagemap",
    doc = "Rewrite rules for the images requested in this namespace by Pods (at admission), imagemap's VirtualMachines and NeonVM's (vm.neon.tech): \"when image X is requested, use image Y\".",
    printcolumn(
        name = "Rules",
        type_ = "integer",
        json_path = ".status.ruleCount",
        description = "Number of rules"
    ),
    printcolumn(
        name = "Affected-VMs",
        type_ = "integer",
        json_path = ".status.affectedVMs",
        description = "VirtualMachines (imagemap's and NeonVM's) whose images at least one rule rewrites"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ImageMappingSpec {
    /// Higher priority wins when rules of several mappings match the same image. Default 0;
    /// from -1,000,000 to 1,000,000.
    #[serde(default)]
    #[schemars(range(min = -1_000_000, max = 1_000_000))]
    pub priority: i32,
    /// Which Pods and VirtualMachines (imagemap's and NeonVM's) of this namespace the rules
    /// apply to, by their labels; a pod labelled `imagemap.dev/skip: "true"` opts out. Empty
    /// or absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// When true, nothing is rewritten: the mapping's status reports what its rules would change.
    #[serde(default)]
    pub dry_run: bool,
    /// The rewrite rules, at most 256. See `rules[].match` for how an image is matched.
    #[schemars(length(max = 256))]
    pub rules: Vec<MappingRule>,
}

/// Rewrite rules for the images that Pods, imagemap's VirtualMachines and NeonVM's
/// VirtualMachines in any namespace request.
/// Writable by cluster administrators only.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "imagemap.dev",
    version = "v1alpha1",
    kind = "ClusterImageMapping",
    status = "ImageMappingStatus",
    shortname = "cimgmap",
    category = "imagemap",
    doc = "Cluster-wide rewrite rules for the images requested by Pods (at admission), imagemap's VirtualMachines and NeonVM's (vm.neon.tech). Namespaced ImageMappings of equal priority win over these.",
    printcolumn(
        name = "Rules",
        type_ = "integer",
        json_path = ".status.ruleCount",
        description = "Number of rules"
    ),
    printcolumn(
        name = "Affected-VMs",
        type_ = "integer",
        json_path = ".status.affectedVMs",
        description = "VirtualMachines (imagemap's and NeonVM's) whose images at least one rule rewrites"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterImageMappingSpec {
    /// Higher priority wins when rules of several mappings match the same image. Default 0;
    /// from -1,000,000 to 1,000,000.
    #[serde(default)]
    #[schemars(range(min = -1_000_000, max = 1_000_000))]
    pub priority: i32,
    /// Which namespaces the rules apply to, by namespace label
    /// (every namespace carries `kubernetes.io/metadata.name`). Empty or absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Which Pods and VirtualMachines (imagemap's and NeonVM's) the rules apply to, by
    /// their labels. Empty or absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// When true, nothing is rewritten: the mapping's status reports what its rules would change.
    #[serde(default)]
    pub dry_run: bool,
    /// The rewrite rules, at most 256. See `rules[].match` for how an image is matched.
    #[schemars(length(max = 256))]
    pub rules: Vec<MappingRule>,
}

/// One rewrite rule: which images it matches and what they become.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!(has(self.followTag) && self.followTag && has(self.digest))").message("followTag cannot be combined with digest: a pinned digest never moves"))]
pub struct MappingRule {
    /// Which requested images this rule applies to. Exactly one of `exact`, `repository`,
    /// `prefix` or `regex`.
    #[serde(rename = "match")]
    pub match_: RuleMatch,
    /// What a matching image becomes. For `exact`: the whole new reference. For `repository`:
    /// the new repository; the original tag and digest are kept unless `to` carries its own.
    /// For `prefix`: replaces the matched prefix (for a `*.domain` wildcard, only the host;
    /// a `to` with a port replaces host and port). For `regex`: a template that may use
    /// `$1` or `${name}`. Absent, with no `tag` or `digest` either: matching images are kept
    /// as they are (an exception that outranks less specific rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub to: Option<String>,
    /// Sets the tag after `to` is applied. Without `digest`, any digest is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$')").message("tag must start with a letter, digit or '_' and contain only letters, digits, '_', '.' and '-' (at most 128 characters)"))]
    pub tag: Option<String>,
    /// Sets the digest after `to` is applied (`sha256:<64 hex>`, `sha384:<96 hex>` or
    /// `sha512:<128 hex>`). Without `tag`, any tag is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 135))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})$')").message("digest must be sha256:<64 lowercase hex>, sha384:<96 lowercase hex> or sha512:<128 lowercase hex>"))]
    pub digest: Option<String>,
    /// Pin the result to the digest its tag points to now, and follow the tag when it
    /// moves: runner pods get `name:tag@sha256:…`, and a new digest behind the tag is a
    /// change of images (liveReload replaces the pod; otherwise `RestartRequired`). Not with
    /// `digest`; a result that already names a digest is an invalid rewrite.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow_tag: bool,
}

/// How a rule matches a requested image. Every image is first normalized as Docker does
/// (`nginx` is `docker.io/library/nginx`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.exact), has(self.repository), has(self.prefix), has(self.regex)].filter(x, x).size() == 1").message("exactly one of exact, repository, prefix or regex must be set"))]
pub struct RuleMatch {
    /// The whole reference, tag and digest included (`busybox:1.36`). A reference without
    /// tag or digest means `:latest`, as Kubernetes pulls it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub exact: Option<String>,
    /// A repository, any tag or digest (`neondatabase/vm-compute-node-v17`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub repository: Option<String>,
    /// A fully qualified prefix starting with a registry host (`docker.io/neondatabase`,
    /// `ghcr.io`, `localhost:5000`), matched on component boundaries: it matches when the
    /// normalized image equals it or continues with `/`, `:` or `@`. `*.example.com` matches
    /// any registry host under example.com. The longest matching prefix wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub prefix: Option<String>,
    /// An RE2 regular expression, implicitly anchored, over the whole normalized reference
    /// (`docker.io/library/nginx:1.27`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub regex: Option<String>,
}

/// What the operator observed about a mapping.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageMappingStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when every rule is valid and in no conflict; False with reason
    /// `InvalidRule`, `Conflict`, `DisallowedTarget` or `AllowedRegistriesRequired` and a
    /// message naming the rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::bounded_conditions::schema")]
    pub conditions: Vec<Condition>,
    /// Number of rules in the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 256))]
    pub rule_count: Option<i32>,
    /// Number of VirtualMachines (imagemap's and NeonVM's) with at least one image rewritten
    /// by this mapping
    /// (for a dry-run mapping: that would be rewritten).
    #[serde(
        default,
        rename = "affectedVMs",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub affected_vms: Option<i32>,
    /// Per rule: how many VirtualMachines and pods it affects, and why it is not usable if it
    /// is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleStatus>,
    /// VirtualMachines whose pod runs images that this mapping changed and that wait for a
    /// restart because live reload is off (`namespace/name` for imagemap's,
    /// `namespace/vm.neon.tech/name` for NeonVM's): the first 100 by name.
    #[serde(
        default,
        rename = "awaitingRestart",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 100))]
    pub awaiting_restart: Vec<String>,
    /// How many VirtualMachines wait for a restart, listed in `awaitingRestart` or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub awaiting_restart_count: Option<i32>,
    /// Number of pods admission mapped with at least one image this mapping's rules decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub affected_pods: Option<i32>,
    /// Live-reload pods this mapping would change that admission did not map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub unmapped_pods: Option<i32>,
    /// When the pods in `affectedPods`, `unmappedPods` and each rule's `affectedPods` were
    /// counted: the time of the leader's pass that found these counts (a later pass that
    /// finds the same leaves it). The leader counts every namespace periodically
    /// (`--pod-count-seconds`) and, within a minute of a change of rules, the namespaces it
    /// reaches; a new leader keeps the counts it finds until its first pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_counted_at: Option<Time>,
    /// Live-reload pods waiting to be rolled for a change of this mapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub pods_awaiting_roll: Option<i32>,
    /// Workloads (`Kind namespace/name`) rolling for a change of this mapping: the first 10 by
    /// name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub rolling_workloads: Vec<String>,
    /// How many workloads roll for it, listed in `rollingWorkloads` or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub rolling_workloads_count: Option<i32>,
}

/// The observed state of one rule.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    /// Index of the rule in `spec.rules`.
    #[schemars(range(min = 0, max = 255))]
    pub index: i32,
    /// VirtualMachines (imagemap's and NeonVM's) whose images this rule decides.
    #[serde(rename = "affectedVMs")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub affected_vms: i32,
    /// Pods admission mapped whose images this rule decides.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 2_147_483_647))]
    pub affected_pods: i32,
    /// Why the rule is not used or is in conflict, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub problem: Option<String>,
    /// The tags this rule's results follow (`followTag`), with the digest each points to:
    /// the first 8 in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub followed_tags: Vec<FollowedTag>,
}

/// A tag a rule follows, and the digest it points to as last checked.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FollowedTag {
    /// `registry/repository:tag`.
    #[schemars(length(max = 1024))]
    pub reference: String,
    /// Absent until the registry has answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 135))]
    pub digest: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &i32) -> bool {
    *n == 0
}
