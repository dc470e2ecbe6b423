//! Objects the unit tests of several modules build alike.

use crate::core::api::{MappingRule, RuleMatch, VirtualMachine, VirtualMachineSpec};
use crate::core::rules::{MappingInput, MappingKey, MappingScope};

/// The key of ImageMapping `dev/<name>`.
pub fn mapping_key(name: &str) -> MappingKey {
    MappingKey {
        scope: MappingScope::Namespaced,
        namespace: Some("dev".into()),
        name: name.into(),
    }
}

/// An ImageMapping in `dev` with one rule: `repository: repo` → `to`.
pub fn repository_mapping(name: &str, repo: &str, to: &str, dry_run: bool) -> MappingInput {
    MappingInput {
        scope: MappingScope::Namespaced,
        namespace: Some("dev".into()),
        name: name.into(),
        priority: 0,
        selector: None,
        namespace_selector: None,
        dry_run,
        rules: vec![MappingRule {
            match_: RuleMatch {
                repository: Some(repo.into()),
                ..Default::default()
            },
            to: Some(to.into()),
            ..Default::default()
        }],
    }
}

/// A VM in `dev` with only a root disk image.
pub fn vm_with_disk(name: &str, disk: &str) -> VirtualMachine {
    let spec: VirtualMachineSpec =
        serde_yaml_ng::from_str(&format!("guest: {{rootDisk: {{image: '{disk}'}}}}")).unwrap();
    let mut vm = VirtualMachine::new(name, spec);
    vm.metadata.namespace = Some("dev".into());
    vm
}
