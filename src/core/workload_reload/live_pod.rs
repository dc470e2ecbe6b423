//! What the leader keeps of a pod labelled for live reload — its owner, the images its
//! containers run and were pulled at, what it asked for, whether it is Ready and since when
//! — and what its rules make of it now, as admission would map it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::core::admission::pod_view::Admission;
use crate::core::pod::pod_slots::SlotKind;
use crate::core::pod::records::{self, LIVE_RELOAD_LABEL, MAPPED, MAPPED_LABEL};
use crate::core::rules::{MappingKey, RuleRef};
use crate::core::stale_slot::StaleSlot;
use crate::core::workload_reload::{PodOwner, changes, image_id_digest, pod_owner};

/// On a replacement that came back unmapped after its predecessor was evicted, set by the
/// leader when it finds it: such a pod is never evicted, also by a later leader that does
/// not remember the roll.
pub const UNMAPPED_REPLACEMENT_ANNOTATION: &str = "imagemap.dev/not-mapped-at-admission";

/// What the rules make of a pod's containers now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Slot key → image.
    pub images: BTreeMap<String, String>,
    /// Slot key → the rule that decides it.
    pub rules: BTreeMap<String, RuleRef>,
}

/// A labelled pod, as live reload needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LivePod {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// Slot key → image as requested, for the containers admission rewrote.
    pub originals: BTreeMap<String, String>,
    /// Labelled `imagemap.dev/mapped: "true"`: admission rewrote it.
    pub mapped: bool,
    /// Annotated as a replacement that came back unmapped
    /// ([`UNMAPPED_REPLACEMENT_ANNOTATION`]).
    pub unmapped_replacement: bool,
    pub owner: PodOwner,
    /// Slot key → image, for init containers and containers.
    pub images: BTreeMap<String, String>,
    /// Slot key → the digest its image was pulled at (from the container statuses).
    pub image_ids: BTreeMap<String, String>,
    /// Since when the pod is Ready (`None`: not Ready).
    pub ready_since: Option<Timestamp>,
    pub deleting: bool,
}

/// Slot key → the digest each container's image was pulled at.
fn image_ids(
    kind: SlotKind,
    statuses: Option<&[ContainerStatus]>,
) -> impl Iterator<Item = (String, String)> + '_ {
    statuses.into_iter().flatten().filter_map(move |s| {
        let digest = image_id_digest(&s.image_id)?;
        Some((kind.key(&s.name), digest.to_string()))
    })
}

impl LivePod {
    /// The pod's summary; `None` for a pod without a name, a UID or a spec.
    #[must_use]
    pub fn read(pod: &Pod) -> Option<LivePod> {
        let metadata = &pod.metadata;
        let spec = pod.spec.as_ref()?;
        let labels = metadata.labels.clone().unwrap_or_default();
        let annotations = metadata.annotations.clone().unwrap_or_default();
        let init = spec.init_containers.iter().flatten();
        let images = init
            .map(|c| (SlotKind::Init, c))
            .chain(spec.containers.iter().map(|c| (SlotKind::Container, c)))
            .filter_map(|(kind, c)| Some((kind.key(&c.name), c.image.clone()?)))
            .collect();
        let status = pod.status.as_ref();
        let image_ids = image_ids(
            SlotKind::Init,
            status.and_then(|s| s.init_container_statuses.as_deref()),
        )
        .chain(image_ids(
            SlotKind::Container,
            status.and_then(|s| s.container_statuses.as_deref()),
        ))
        .collect();
        let ready_since = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "True")
            .map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
            });
        Some(LivePod {
            name: metadata.name.clone()?,
            uid: metadata.uid.clone()?,
            mapped: labels.get(MAPPED_LABEL).map(String::as_str) == Some(MAPPED),
            unmapped_replacement: annotations.contains_key(UNMAPPED_REPLACEMENT_ANNOTATION),
            originals: records::originals(&annotations),
            owner: pod_owner(metadata.owner_references.as_deref().unwrap_or_default()),
            labels,
            images,
            image_ids,
            ready_since,
            deleting: metadata.deletion_timestamp.is_some(),
        })
    }

    /// Whether the pod opts into live reload.
    #[must_use]
    pub fn opted_in(&self) -> bool {
        self.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true")
    }

    /// What admission would map each of the pod's containers to now, and the rule behind
    /// each: each resolved from its recorded original, else from its image (a container the
    /// rules cannot map keeps its image).
    #[must_use]
    pub fn resolved(&self, admission: &Admission<'_>, namespace: &str) -> Resolved {
        let asked = self.images.iter().map(|(slot, image)| {
            let requested = self.originals.get(slot).unwrap_or(image);
            (slot.as_str(), requested.as_str())
        });
        let mut out = Resolved::default();
        for outcome in admission.slots(namespace, &self.labels, asked) {
            if let Some(rule) = outcome.resolution.rule {
                out.rules.insert(outcome.slot.clone(), rule);
            }
            let image = outcome
                .image
                .unwrap_or_else(|| self.images[&outcome.slot].clone());
            out.images.insert(outcome.slot, image);
        }
        out
    }

    /// The containers whose image differs from what the rules resolve to now
    /// ([`crate::core::workload_reload::changes`]), and the mappings whose rules decide them.
    #[must_use]
    pub fn stale(
        &self,
        admission: &Admission<'_>,
        namespace: &str,
    ) -> (Vec<StaleSlot>, BTreeSet<MappingKey>) {
        let resolved = self.resolved(admission, namespace);
        let found = changes(&self.images, &resolved.images, &self.image_ids);
        let mappings = found
            .iter()
            .filter_map(|c| resolved.rules.get(&c.slot))
            .map(|r| r.mapping.clone())
            .collect();
        (found, mappings)
    }

    /// Whether the pod has been Ready for `min_ready_seconds` at `now`: Available.
    #[must_use]
    pub fn available(&self, min_ready_seconds: i64, now: Timestamp) -> bool {
        self.ready_since.is_some_and(|since| {
            now.as_second().saturating_sub(since.as_second()) >= min_ready_seconds
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::core::fixtures::repository_mapping;
    use crate::core::rules::{CompileOptions, RuleSet};
    use crate::core::workload_reload::WorkloadKind;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-1", "namespace": "dev", "uid": "u1",
                "labels": {"imagemap.dev/live-reload": "true", "imagemap.dev/mapped": "true"},
                "annotations": {"imagemap.dev/original-images": "{\"app\":\"nginx:1\"}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d", "uid": "r", "controller": true}],
            },
            "spec": {
                "initContainers": [{"name": "setup", "image": "busybox"}],
                "containers": [{"name": "app", "image": "mirror.io/nginx:1"}],
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "app", "image": "mirror.io/nginx:1", "imageID": "mirror.io/nginx@sha256:aa", "ready": true, "restartCount": 0}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_read_and_resolved_from_what_it_asked_for() {
        let live = LivePod::read(&pod()).unwrap();
        assert!(live.opted_in() && live.mapped && !live.deleting);
        assert_eq!(
            live.owner,
            PodOwner::Workload(WorkloadKind::ReplicaSet, "web-5d".into())
        );
        assert_eq!(live.images["init:setup"], "busybox");
        assert_eq!(live.image_ids["app"], "sha256:aa");
        let since: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert!(live.available(10, since + std::time::Duration::from_secs(10)));
        assert!(!live.available(10, since + std::time::Duration::from_secs(9)));

        let unlabelled = |_: &str| BTreeMap::new();
        // The rules it was mapped by: current.
        let rules = RuleSet::compile(
            &[repository_mapping("m", "nginx", "mirror.io/nginx", false)],
            &CompileOptions::default(),
        );
        let resolved = live.resolved(&Admission::without_digests(&rules, &unlabelled), "dev");
        assert_eq!(resolved.images, live.images);
        assert_eq!(resolved.rules["app"].mapping.name, "m");
        // A changed rule maps the original elsewhere; an unmapped container keeps its image.
        let rules = RuleSet::compile(
            &[repository_mapping("m", "nginx", "other.io/nginx", false)],
            &CompileOptions::default(),
        );
        let resolved = live
            .resolved(&Admission::without_digests(&rules, &unlabelled), "dev")
            .images;
        assert_eq!(resolved["app"], "other.io/nginx:1");
        assert_eq!(resolved["init:setup"], "busybox");
    }
}
