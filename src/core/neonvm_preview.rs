//! What a change of rules does to NeonVM's VirtualMachines (`imagemap resolve --cluster`):
//! each VM's slots as admission maps its runner pod now → after the change, and what happens
//! to the pod — NeonVM's live reload replaces it (a VM labelled
//! `imagemap.dev/live-reload: "true"` under `restartPolicy: Always`), or a restart is
//! required. Pure.

use crate::core::admission::pod_view::{Admission, NamespaceLabels};
use crate::core::neonvm::{NeonVm, NeonVmRestartPolicy};
use crate::core::pod::records::LIVE_RELOAD_LABEL;
use crate::core::rules::RuleSet;
use crate::core::vm_preview::SlotChange;

/// One NeonVM VM a change alters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeonVmPreview {
    pub namespace: String,
    pub name: String,
    /// Whether NeonVM's live reload replaces its runner pod (else a restart is required).
    pub reloaded: bool,
    pub slots: Vec<SlotChange>,
}

impl NeonVmPreview {
    /// What happens to its runner pod, as the table and JSON say it.
    #[must_use]
    pub fn fate(&self) -> &'static str {
        if self.reloaded {
            "reloaded"
        } else {
            "restartRequired"
        }
    }
}

/// The NeonVM VMs of `vms` whose images changing the rules `now` into `after` alters (a VM
/// without `runnerImage` runs `default_runner`, when given); and how many stay as they are.
#[must_use]
pub fn preview_neonvm(
    now: &RuleSet,
    after: &RuleSet,
    vms: &[NeonVm],
    default_runner: Option<&str>,
    namespace_labels: &NamespaceLabels<'_>,
) -> (Vec<NeonVmPreview>, usize) {
    let (before, later) = (
        Admission::without_digests(now, namespace_labels),
        Admission::without_digests(after, namespace_labels),
    );
    let mut changed = Vec::new();
    let mut unchanged = 0;
    for vm in vms {
        let slots = vm.slots(default_runner);
        let asked: Vec<(&str, &str)> = slots
            .iter()
            .map(|s| (s.slot.as_str(), s.requested.as_str()))
            .collect();
        let slot_changes = SlotChange::between(&before, &later, &vm.namespace, &vm.labels, &asked);
        if slot_changes.iter().any(SlotChange::changes) {
            changed.push(NeonVmPreview {
                namespace: vm.namespace.clone(),
                name: vm.name.clone(),
                reloaded: vm.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true")
                    && vm.restart_policy == NeonVmRestartPolicy::Always,
                slots: slot_changes,
            });
        } else {
            unchanged += 1;
        }
    }
    (changed, unchanged)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::fixtures::repository_mapping;
    use crate::core::rules::CompileOptions;

    #[test]
    fn a_changed_rule_reloads_a_live_reload_vm_and_leaves_the_others_restart_required() {
        let rules = |to: &str| {
            RuleSet::compile(
                &[repository_mapping("disk", "neondatabase/vm", to, false)],
                &CompileOptions::default(),
            )
        };
        let vm = |name: &str, live: bool, policy: &str| {
            NeonVm::read(&serde_json::json!({
                "metadata": {"name": name, "namespace": "dev",
                             "labels": if live { serde_json::json!({"imagemap.dev/live-reload": "true"}) } else { serde_json::json!({}) }},
                "spec": {"restartPolicy": policy, "guest": {"rootDisk": {"image": "neondatabase/vm:17"}}},
            }))
            .unwrap()
        };
        let vms = [
            vm("live", true, "Always"),
            vm("never", true, "Never"),
            vm("plain", false, "Always"),
        ];
        let labels = |_: &str| BTreeMap::new();
        let (changed, unchanged) =
            preview_neonvm(&rules("a.io/vm"), &rules("b.io/vm"), &vms, None, &labels);
        assert_eq!(unchanged, 0);
        let fates: Vec<(&str, &str)> = changed
            .iter()
            .map(|p| (p.name.as_str(), p.fate()))
            .collect();
        assert_eq!(
            fates,
            [
                ("live", "reloaded"),
                ("never", "restartRequired"),
                ("plain", "restartRequired"),
            ]
        );
        assert_eq!(changed[0].slots[0].now.as_deref(), Some("a.io/vm:17"));
        assert_eq!(changed[0].slots[0].after.as_deref(), Ok("b.io/vm:17"));
        let (changed, unchanged) =
            preview_neonvm(&rules("a.io/vm"), &rules("a.io/vm"), &vms, None, &labels);
        assert!(changed.is_empty());
        assert_eq!(unchanged, 3);
    }
}
