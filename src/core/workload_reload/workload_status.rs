//! What live reload reads of a workload: whether its controller has caught up and every pod
//! it wants is Available (`Settled`), its own rollout is under way, or pods are missing or
//! not yet Available; its `minReadySeconds`; and, for a ReplicaSet, the Deployment that
//! controls it (whose pods roll as one workload).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use kube::api::ObjectMeta;

/// Where a workload stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutProgress {
    /// Its controller saw its latest spec, and every pod it wants is there, up to date and
    /// Available.
    Settled,
    /// Its own rollout is under way (a template change, a scale): live reload waits.
    OwnRollout,
    /// Pods are missing or not yet Available.
    Unavailable,
}

/// A workload as live reload needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadStatus {
    pub uid: String,
    pub progress: RolloutProgress,
    pub min_ready_seconds: i64,
    /// For a ReplicaSet: the Deployment that controls it.
    pub deployment: Option<String>,
}

fn caught_up(metadata: &ObjectMeta, observed: Option<i64>) -> bool {
    observed.unwrap_or(0) >= metadata.generation.unwrap_or(0)
}

fn status(
    metadata: &ObjectMeta,
    progress: RolloutProgress,
    min_ready_seconds: Option<i32>,
) -> WorkloadStatus {
    WorkloadStatus {
        uid: metadata.uid.clone().unwrap_or_default(),
        progress,
        min_ready_seconds: i64::from(min_ready_seconds.unwrap_or(0)),
        deployment: None,
    }
}

/// A Deployment: settled when its controller saw the latest spec, and all its wanted pods
/// are updated, Available, and alone (no old ReplicaSet's pods left).
#[must_use]
pub fn of_deployment(deployment: &Deployment) -> WorkloadStatus {
    let spec = deployment.spec.as_ref();
    let wanted = spec.and_then(|s| s.replicas).unwrap_or(1);
    let s = deployment.status.clone().unwrap_or_default();
    let progress = if !caught_up(&deployment.metadata, s.observed_generation)
        || s.updated_replicas.unwrap_or(0) < wanted
        || s.replicas.unwrap_or(0) > wanted
    {
        RolloutProgress::OwnRollout
    } else if s.available_replicas.unwrap_or(0) < wanted
        || s.replicas.unwrap_or(0) < wanted
        || s.unavailable_replicas.unwrap_or(0) > 0
    {
        RolloutProgress::Unavailable
    } else {
        RolloutProgress::Settled
    };
    status(
        &deployment.metadata,
        progress,
        spec.and_then(|s| s.min_ready_seconds),
    )
}

/// A ReplicaSet: settled when its controller saw the latest spec and all its wanted pods
/// are there and Available. Under a Deployment, the Deployment's status is the one read.
#[must_use]
pub fn of_replica_set(replica_set: &ReplicaSet) -> WorkloadStatus {
    let spec = replica_set.spec.as_ref();
    let wanted = spec.and_then(|s| s.replicas).unwrap_or(1);
    let s = replica_set.status.clone().unwrap_or_default();
    let progress = if !caught_up(&replica_set.metadata, s.observed_generation) {
        RolloutProgress::OwnRollout
    } else if s.replicas != wanted || s.available_replicas.unwrap_or(0) < wanted {
        RolloutProgress::Unavailable
    } else {
        RolloutProgress::Settled
    };
    let mut status = status(
        &replica_set.metadata,
        progress,
        spec.and_then(|s| s.min_ready_seconds),
    );
    status.deployment = replica_set
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| {
            o.controller == Some(true) && o.kind == "Deployment" && o.api_version == "apps/v1"
        })
        .map(|o| o.name.clone());
    status
}

/// A StatefulSet: settled when its controller saw the latest spec, its current revision
/// is its update revision, and all its wanted pods are there, Ready and Available.
#[must_use]
pub fn of_stateful_set(stateful_set: &StatefulSet) -> WorkloadStatus {
    let spec = stateful_set.spec.as_ref();
    let wanted = spec.and_then(|s| s.replicas).unwrap_or(1);
    let s = stateful_set.status.clone().unwrap_or_default();
    let revisions_differ = match (&s.current_revision, &s.update_revision) {
        (Some(current), Some(update)) => current != update,
        _ => false,
    };
    let progress = if !caught_up(&stateful_set.metadata, s.observed_generation)
        || revisions_differ
        || s.updated_replicas.is_some_and(|u| u < wanted)
    {
        RolloutProgress::OwnRollout
    } else if s.replicas != wanted
        || s.ready_replicas.unwrap_or(0) < wanted
        || s.available_replicas.unwrap_or(0) < wanted
    {
        RolloutProgress::Unavailable
    } else {
        RolloutProgress::Settled
    };
    status(
        &stateful_set.metadata,
        progress,
        spec.and_then(|s| s.min_ready_seconds),
    )
}

/// A DaemonSet: settled when its controller saw the latest spec and every node it should
/// run on has an updated, Available pod.
#[must_use]
pub fn of_daemon_set(daemon_set: &DaemonSet) -> WorkloadStatus {
    let spec = daemon_set.spec.as_ref();
    let s = daemon_set.status.clone().unwrap_or_default();
    let wanted = s.desired_number_scheduled;
    let progress = if !caught_up(&daemon_set.metadata, s.observed_generation)
        || s.updated_number_scheduled.unwrap_or(0) < wanted
    {
        RolloutProgress::OwnRollout
    } else if s.current_number_scheduled < wanted
        || s.number_available.unwrap_or(0) < wanted
        || s.number_unavailable.unwrap_or(0) > 0
    {
        RolloutProgress::Unavailable
    } else {
        RolloutProgress::Settled
    };
    status(
        &daemon_set.metadata,
        progress,
        spec.and_then(|s| s.min_ready_seconds),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn deployment(status: &serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "d", "generation": 2},
            "spec": {"replicas": 3, "minReadySeconds": 5, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_is_settled_only_when_caught_up_updated_and_available() {
        let settled = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 3});
        let s = of_deployment(&deployment(&settled));
        assert_eq!(
            (s.progress, s.min_ready_seconds),
            (RolloutProgress::Settled, 5)
        );
        let mut behind = settled.clone();
        behind["observedGeneration"] = json!(1);
        assert_eq!(
            of_deployment(&deployment(&behind)).progress,
            RolloutProgress::OwnRollout
        );
        let mut old_pods = settled.clone();
        old_pods["replicas"] = json!(4);
        assert_eq!(
            of_deployment(&deployment(&old_pods)).progress,
            RolloutProgress::OwnRollout
        );
        let mut short = settled;
        short["availableReplicas"] = json!(2);
        short["unavailableReplicas"] = json!(1);
        assert_eq!(
            of_deployment(&deployment(&short)).progress,
            RolloutProgress::Unavailable
        );
    }

    #[test]
    fn a_replica_set_names_its_deployment() {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "web-5d", "uid": "r", "generation": 1, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d", "controller": true}]},
            "spec": {"replicas": 2, "selector": {}},
            "status": {"observedGeneration": 1, "replicas": 2, "availableReplicas": 2},
        }))
        .unwrap();
        let s = of_replica_set(&rs);
        assert_eq!(s.deployment.as_deref(), Some("web"));
        assert_eq!(s.progress, RolloutProgress::Settled);
    }

    #[test]
    fn a_stateful_set_between_revisions_is_in_its_own_rollout() {
        let sts = |current: &str| -> StatefulSet {
            serde_json::from_value(json!({
                "metadata": {"name": "db", "uid": "s", "generation": 1},
                "spec": {"replicas": 2, "selector": {}, "template": {}, "serviceName": "db"},
                "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                           "currentRevision": current, "updateRevision": "db-2", "updatedReplicas": 2},
            }))
            .unwrap()
        };
        assert_eq!(
            of_stateful_set(&sts("db-2")).progress,
            RolloutProgress::Settled
        );
        assert_eq!(
            of_stateful_set(&sts("db-1")).progress,
            RolloutProgress::OwnRollout
        );
    }

    #[test]
    fn a_daemon_set_is_settled_when_every_node_has_an_available_pod() {
        let ds = |available: i32| -> DaemonSet {
            serde_json::from_value(json!({
                "metadata": {"name": "agent", "uid": "a", "generation": 1},
                "spec": {"selector": {}, "template": {}},
                "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                           "numberReady": 2, "numberAvailable": available, "updatedNumberScheduled": 2, "numberMisscheduled": 0},
            }))
            .unwrap()
        };
        assert_eq!(of_daemon_set(&ds(2)).progress, RolloutProgress::Settled);
        assert_eq!(of_daemon_set(&ds(1)).progress, RolloutProgress::Unavailable);
    }
}
