//! Live reload for workloads (pure). A pod labelled `imagemap.dev/live-reload: "true"` whose
//! controller is a ReplicaSet (alone or under a Deployment), a StatefulSet or a DaemonSet
//! follows its rules: when what admission would map its containers to now differs from what
//! they run, the workload is rolled by evicting its pods one at a time, and the workload's
//! own controller creates each replacement, which admission maps. No spec is written.
//!
//! - [`live_pod`]: what the leader keeps of a labelled pod, and what its rules make of it;
//! - [`workload_status`]: whether a workload is settled, in its own rollout, or short of
//!   available pods;
//! - [`roll`]: the next step of a workload's roll, and the Events that tell it.

pub mod live_pod;
pub mod roll;
pub mod workload_status;

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::core::stale_slot::{StaleSlot, stale_slots};

/// The kinds of workload live reload rolls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
}

impl WorkloadKind {
    /// The kind's name, as its objects say it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }
}

/// A workload: its kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.name(), self.namespace, self.name)
    }
}

/// Who controls a pod, as live reload sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodOwner {
    /// A workload that recreates what is evicted (a ReplicaSet's pods roll with its
    /// Deployment, when it has one).
    Workload(WorkloadKind, String),
    /// Either VirtualMachine kind (imagemap's or NeonVM's) or a NeonVM migration: they
    /// follow their own live reload and are never evicted.
    VirtualMachine,
    /// Something nothing is known to recreate the pod for: a Job, a custom resource.
    Other { kind: String, name: String },
    /// No controller.
    None,
}

/// The controller among `owners`, as live reload sees it.
#[must_use]
pub fn pod_owner(owners: &[OwnerReference]) -> PodOwner {
    let Some(controller) = owners.iter().find(|o| o.controller == Some(true)) else {
        return PodOwner::None;
    };
    let group = controller
        .api_version
        .rsplit_once('/')
        .map_or("", |(group, _)| group);
    let name = controller.name.clone();
    match (group, controller.kind.as_str()) {
        ("apps", "ReplicaSet") => PodOwner::Workload(WorkloadKind::ReplicaSet, name),
        ("apps", "StatefulSet") => PodOwner::Workload(WorkloadKind::StatefulSet, name),
        ("apps", "DaemonSet") => PodOwner::Workload(WorkloadKind::DaemonSet, name),
        (
            crate::core::api::GROUP | crate::core::neonvm::GROUP,
            "VirtualMachine" | "VirtualMachineMigration",
        ) => PodOwner::VirtualMachine,
        (_, kind) => PodOwner::Other {
            kind: kind.to_string(),
            name,
        },
    }
}

/// The slots whose running image differs from what the rules resolve to now. A followed tag
/// the pod runs unpinned is stale only when the digest it was pulled at (`image_ids`, from
/// its container statuses) differs from the verified one; without that evidence it is
/// current. A followed tag whose digest is not held here is current when the pod runs it
/// pinned to any digest.
#[must_use]
pub fn changes(
    running: &BTreeMap<String, String>,
    resolved: &BTreeMap<String, String>,
    image_ids: &BTreeMap<String, String>,
) -> Vec<StaleSlot> {
    let mut changes = stale_slots(running, resolved);
    changes.retain(|change| {
        let Some(digest) = change
            .resolved
            .strip_prefix(change.running.as_str())
            .and_then(|rest| rest.strip_prefix('@'))
        else {
            return true;
        };
        image_ids
            .get(&change.slot)
            .is_some_and(|pulled| pulled != digest)
    });
    changes
}

/// The digest in a container status's `imageID` (`docker-pullable://repo@sha256:…`,
/// `repo@sha256:…` or `sha256:…`), if it names one.
#[must_use]
pub fn image_id_digest(image_id: &str) -> Option<&str> {
    let digest = image_id.rsplit_once('@').map_or(image_id, |(_, d)| d);
    let (algorithm, hex) = digest.split_once(':')?;
    let algorithm_ok =
        !algorithm.is_empty() && algorithm.chars().all(|c| c.is_ascii_alphanumeric());
    let hex_ok = !hex.is_empty() && hex.chars().all(|c| c.is_ascii_alphanumeric());
    (algorithm_ok && hex_ok).then_some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(api_version: &str, kind: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "o".into(),
            uid: "u".into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn owners_are_told_apart_by_group_and_kind() {
        assert_eq!(
            pod_owner(&[owner("apps/v1", "ReplicaSet", true)]),
            PodOwner::Workload(WorkloadKind::ReplicaSet, "o".into())
        );
        assert_eq!(
            pod_owner(&[owner("apps/v1", "StatefulSet", true)]),
            PodOwner::Workload(WorkloadKind::StatefulSet, "o".into())
        );
        assert_eq!(
            pod_owner(&[owner("apps/v1", "DaemonSet", true)]),
            PodOwner::Workload(WorkloadKind::DaemonSet, "o".into())
        );
        for vm in [
            owner("imagemap.dev/v1alpha1", "VirtualMachine", true),
            owner("vm.neon.tech/v1", "VirtualMachine", true),
            owner("vm.neon.tech/v1", "VirtualMachineMigration", true),
        ] {
            assert_eq!(pod_owner(&[vm]), PodOwner::VirtualMachine);
        }
        // A kind of the same name in another group is something else.
        assert!(matches!(
            pod_owner(&[owner("example.com/v1", "ReplicaSet", true)]),
            PodOwner::Other { .. }
        ));
        assert!(matches!(
            pod_owner(&[owner("batch/v1", "Job", true)]),
            PodOwner::Other { kind, .. } if kind == "Job"
        ));
        // An owner that does not control the pod is not its controller.
        assert_eq!(
            pod_owner(&[owner("apps/v1", "ReplicaSet", false)]),
            PodOwner::None
        );
        assert_eq!(pod_owner(&[]), PodOwner::None);
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn an_unpinned_followed_tag_is_stale_only_when_it_was_pulled_at_another_digest() {
        let running = map(&[("app", "mirror.io/app:dev"), ("web", "mirror.io/web:1")]);
        let resolved = map(&[
            ("app", "mirror.io/app:dev@sha256:new"),
            ("web", "mirror.io/web:2"),
        ]);
        // No imageID yet: only the plain change.
        let found = changes(&running, &resolved, &BTreeMap::new());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].slot, "web");
        // Pulled at the verified digest: current.
        let same = map(&[("app", "sha256:new")]);
        assert_eq!(changes(&running, &resolved, &same).len(), 1);
        // Pulled at another: stale.
        let other = map(&[("app", "sha256:old")]);
        let found = changes(&running, &resolved, &other);
        assert_eq!(found.len(), 2);
        // Pinned to a digest the rules moved from: stale.
        let pinned = map(&[("app", "mirror.io/app:dev@sha256:old")]);
        assert_eq!(changes(&pinned, &resolved, &BTreeMap::new()).len(), 1);
    }

    #[test]
    fn image_ids_name_their_digest() {
        assert_eq!(
            image_id_digest("docker-pullable://r.io/app@sha256:abc"),
            Some("sha256:abc")
        );
        assert_eq!(image_id_digest("r.io/app@sha256:abc"), Some("sha256:abc"));
        assert_eq!(image_id_digest("sha256:abc"), Some("sha256:abc"));
        assert_eq!(image_id_digest(""), None);
        assert_eq!(image_id_digest("r.io/app:1"), None);
    }
}
