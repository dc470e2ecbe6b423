//! Re-resolution after a change of rules at 10,000 VMs: which VMs resolve differently under
//! the new rules (`rule_change::affected_vms`, which resolves each distinct VM once) next to
//! resolving every VM under both rule sets (what it did before), in the same run.
//!
//! 10,000 VMs in 10 namespaces ask for one of 50 root disks and one of 2 runner images; a
//! 1,000-rule set; the change rewrites one repository rule's target.

#![allow(clippy::unwrap_used)] // benchmark code

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use imagemap::core::api::{MappingRule, RuleMatch, VirtualMachine, VirtualMachineSpec};
use imagemap::core::rule_change::affected_vms;
use imagemap::core::rules::{CompileOptions, MappingInput, MappingScope, Mode, RuleSet};
use imagemap::core::vm_images::VmView;

const VMS: usize = 10_000;
const RUNNER: &str = "neondatabase/neonvm-runner:v1";

fn vms() -> Vec<VirtualMachine> {
    (0..VMS)
        .map(|i| {
            let spec: VirtualMachineSpec = serde_yaml_ng::from_str(&format!(
                "guest: {{rootDisk: {{image: 'team{}/disk{}:latest'}}}}\nrunnerImage: 'runner{}:v1'",
                i % 5,
                i % 50,
                i % 2
            ))
            .unwrap();
            let mut vm = VirtualMachine::new(&format!("vm-{i}"), spec);
            vm.metadata.namespace = Some(format!("ns{}", i % 10));
            vm
        })
        .collect()
}

fn rules(target: &str) -> RuleSet {
    let inputs: Vec<MappingInput> = (0..10)
        .map(|m| MappingInput {
            scope: MappingScope::Namespaced,
            namespace: Some(format!("ns{m}")),
            name: format!("m{m}"),
            priority: 0,
            selector: None,
            namespace_selector: None,
            dry_run: false,
            rules: (0..100)
                .map(|r| {
                    let i = m * 100 + r;
                    let to = if i == 7 {
                        target.to_string()
                    } else {
                        format!("mirror.io/disk{i}")
                    };
                    MappingRule {
                        match_: RuleMatch {
                            repository: Some(format!("team{}/disk{}", i % 5, i % 50)),
                            ..Default::default()
                        },
                        to: Some(to),
                        ..Default::default()
                    }
                })
                .collect(),
        })
        .collect();
    RuleSet::compile(&inputs, &CompileOptions::default())
}

fn bench(c: &mut Criterion) {
    let vms = vms();
    let labels = BTreeMap::new();
    let views: Vec<VmView> = vms
        .iter()
        .map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        })
        .collect();
    let (old, new) = (rules("mirror.io/old"), rules("mirror.io/new"));
    let mut group = c.benchmark_group("rule change at 10000 VMs");
    group.sample_size(10);
    group.bench_function("affected_vms", |b| {
        b.iter(|| black_box(affected_vms(&old, &new, views.iter().copied(), RUNNER)).len());
    });
    group.bench_function("every VM resolved twice", |b| {
        b.iter(|| {
            views
                .iter()
                .filter(|v| {
                    v.resolve(&old, RUNNER, Mode::Live) != v.resolve(&new, RUNNER, Mode::Live)
                })
                .count()
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
