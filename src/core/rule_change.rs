//! Which VMs a change of rules affects: those whose live resolution differs between the
//! rules before and after. Pure.

use std::collections::HashMap;

use crate::core::api::VirtualMachine;
use crate::core::rules::{Mode, RuleSet};
use crate::core::vm_images::VmView;

/// The VMs whose live resolution differs between two rule sets. VMs that ask for the same
/// images in the same place are compared once.
pub fn affected_vms<'a>(
    old: &RuleSet,
    new: &RuleSet,
    vms: impl IntoIterator<Item = VmView<'a>>,
    default_runner_image: &'a str,
) -> Vec<&'a VirtualMachine> {
    resolving_differently(old, new, vms, default_runner_image, &[Mode::Live])
}

/// The VMs whose resolution in one of `modes` differs between two rule sets, each VM once.
/// VMs that ask for the same images in the same place are compared once.
pub fn resolving_differently<'a>(
    old: &RuleSet,
    new: &RuleSet,
    vms: impl IntoIterator<Item = VmView<'a>>,
    default_runner_image: &'a str,
    modes: &[Mode],
) -> Vec<&'a VirtualMachine> {
    let mut differs = HashMap::new();
    vms.into_iter()
        .filter(|v| {
            *differs
                .entry(v.key(default_runner_image))
                .or_insert_with(|| {
                    modes.iter().any(|&mode| {
                        v.resolve(old, default_runner_image, mode)
                            != v.resolve(new, default_runner_image, mode)
                    })
                })
        })
        .map(|v| v.vm)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::ResourceExt;

    use super::*;
    use crate::core::fixtures::{repository_mapping as mapping, vm_with_disk as vm};
    use crate::core::rules::CompileOptions;

    #[test]
    fn only_vms_whose_resolution_changes_are_affected() {
        let labels = BTreeMap::new();
        let old = RuleSet::compile(
            &[mapping("m", "disk-a", "x.io/a", false)],
            &CompileOptions::default(),
        );
        let new = RuleSet::compile(
            &[mapping("m", "disk-a", "y.io/a", false)],
            &CompileOptions::default(),
        );
        let (a, b) = (vm("a", "disk-a:1"), vm("b", "disk-b:1"));
        let views = [&a, &b].map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        });
        let hit = affected_vms(&old, &new, views, "runner");
        assert_eq!(hit.iter().map(|v| v.name_any()).collect::<Vec<_>>(), ["a"]);
        // A dry-run mapping affects no VM.
        let dry = RuleSet::compile(
            &[mapping("m", "disk-b", "y.io/b", true)],
            &CompileOptions::default(),
        );
        let views = [&a, &b].map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        });
        assert!(affected_vms(&RuleSet::default(), &dry, views, "runner").is_empty());
    }
}
