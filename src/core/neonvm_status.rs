//! What a NeonVM VM's slots resolve to now and whether its runner pod runs it: each slot's
//! requested image → resolved image (as admission maps it), the rule behind it, and the
//! image the pod runs. Pure; `imagemap status` prints it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::admission::pod_view::Admission;
use crate::core::neonvm::NeonVm;

/// One slot of a VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotStatus {
    pub slot: String,
    pub requested: String,
    /// What admission maps it to (a followed tag unpinned: the digest is the operator's).
    pub resolved: Option<String>,
    /// Why it cannot be mapped.
    pub error: Option<String>,
    /// The rule behind it.
    pub rule: Option<String>,
    /// What the runner pod runs in the slot (`None`: no pod, or no such container).
    pub running: Option<String>,
    /// Whether the pod runs what the slot resolves to (a followed tag: pinned to any digest).
    pub current: bool,
}

/// The slots of `vm` as `admission` maps its runner pod, the pod running `pod` (slot →
/// image); a VM without `runnerImage` requests `default_runner`.
#[must_use]
pub fn slot_statuses(
    vm: &NeonVm,
    pod: Option<&BTreeMap<String, String>>,
    admission: &Admission<'_>,
    default_runner: Option<&str>,
) -> Vec<SlotStatus> {
    let slots = vm.slots(default_runner);
    let asked = slots
        .iter()
        .map(|s| (s.slot.as_str(), s.requested.as_str()));
    admission
        .slots(&vm.namespace, &vm.labels, asked)
        .into_iter()
        .map(|outcome| {
            let (resolution, image) = (outcome.resolution, outcome.image);
            let running = pod.and_then(|p| p.get(&outcome.slot)).cloned();
            let current = match (&image, &running) {
                (Some(image), Some(running)) => {
                    running == image
                        || (resolution.follow_tag
                            && running
                                .strip_prefix(image.as_str())
                                .is_some_and(|rest| rest.starts_with('@')))
                }
                _ => false,
            };
            SlotStatus {
                error: resolution.outcome.as_ref().err().map(ToString::to_string),
                rule: resolution.rule.as_ref().map(ToString::to_string),
                resolved: image,
                running,
                current,
                requested: outcome.requested,
                slot: outcome.slot,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::repository_mapping;
    use crate::core::rules::{CompileOptions, RuleSet};

    #[test]
    fn each_slot_says_what_it_resolves_to_and_whether_the_pod_runs_it() {
        let rules = RuleSet::compile(
            &[repository_mapping(
                "disk",
                "neondatabase/vm",
                "mirror.io/vm",
                false,
            )],
            &CompileOptions::default(),
        );
        let vm = NeonVm::read(&serde_json::json!({
            "metadata": {"name": "compute", "namespace": "dev"},
            "spec": {"guest": {"rootDisk": {"image": "neondatabase/vm:17"}}},
        }))
        .unwrap();
        let pod = BTreeMap::from([
            ("rootDisk".to_string(), "neondatabase/vm:17".to_string()),
            ("runner".to_string(), "runner:1".to_string()),
        ]);
        let unlabelled = |_: &str| BTreeMap::new();
        let admission = Admission::without_digests(&rules, &unlabelled);
        let statuses = slot_statuses(&vm, Some(&pod), &admission, Some("runner:1"));
        assert_eq!(statuses.len(), 2);
        let disk = &statuses[0];
        assert_eq!(disk.resolved.as_deref(), Some("mirror.io/vm:17"));
        assert_eq!(disk.rule.as_deref(), Some("ImageMapping dev/disk rule 0"));
        assert_eq!(disk.running.as_deref(), Some("neondatabase/vm:17"));
        assert!(
            !disk.current,
            "the pod runs the image as requested: restart required"
        );
        let runner = &statuses[1];
        assert!(runner.current && runner.rule.is_none());
        assert!(
            slot_statuses(&vm, None, &admission, None)
                .iter()
                .all(|s| !s.current)
        );
    }
}
