//! A mapping status pass at 10,000 VMs: counting every VM in scope (what each pass did
//! before) next to counting again only the VMs named since the last pass (what a pass does
//! during a fan-out: the few VMs reconciled in the last 200 ms), in the same run. Both then
//! compute every mapping's status from the tally.
//!
//! 10,000 VMs in 10 namespaces ask for one of 50 root disks; 10 mappings of 100 repository
//! rules; one VM in ten does not reload live and half of those wait for a restart.

#![allow(clippy::unwrap_used)] // benchmark code

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use imagemap::core::api::{MappingRule, RuleMatch, VirtualMachine, VirtualMachineSpec};
use imagemap::core::mapping_status::{
    MappingView, PodTally, VmCount, VmTally, dry_runs, mapping_statuses, statuses,
};
use imagemap::core::namespaced_name::NamespacedName;
use imagemap::core::rules::{
    CompileOptions, MappingInput, MappingKey, MappingScope, Mode, RuleSet,
};
use imagemap::core::vm_images::VmView;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

const VMS: usize = 10_000;
const RUNNER: &str = "neondatabase/neonvm-runner:v1";

fn vms() -> Vec<VirtualMachine> {
    (0..VMS)
        .map(|i| {
            let spec: VirtualMachineSpec = serde_yaml_ng::from_str(&format!(
                "guest: {{rootDisk: {{image: 'team{}/disk{}:latest'}}}}\nliveReload: {}",
                i % 5,
                i % 50,
                i % 10 != 0
            ))
            .unwrap();
            let mut vm = VirtualMachine::new(&format!("vm-{i:05}"), spec);
            vm.metadata.namespace = Some(format!("ns{}", i % 10));
            vm
        })
        .collect()
}

fn inputs() -> Vec<MappingInput> {
    (0..10)
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
                    MappingRule {
                        match_: RuleMatch {
                            repository: Some(format!("team{}/disk{}", i % 5, i % 50)),
                            ..Default::default()
                        },
                        to: Some(format!("mirror.io/disk{i}")),
                        ..Default::default()
                    }
                })
                .collect(),
        })
        .collect()
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
    let inputs = inputs();
    let set = RuleSet::compile(&inputs, &CompileOptions::default());
    let mappings: Vec<MappingView> = inputs
        .iter()
        .map(|m| MappingView {
            key: MappingKey {
                scope: m.scope,
                namespace: m.namespace.clone(),
                name: m.name.clone(),
            },
            generation: Some(1),
            rule_count: m.rules.len(),
            dry_run: false,
            previous: None,
        })
        .collect();
    let awaiting: BTreeSet<NamespacedName> =
        vms.iter().step_by(20).map(NamespacedName::of).collect();
    let no_dry_runs = dry_runs(&mappings);
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let digest = |_: &MappingKey, _: &str| None;

    let mut group = c.benchmark_group("mapping status pass at 10000 VMs");
    group.sample_size(10);
    group.bench_function("every VM counted", |b| {
        b.iter(|| {
            let out = mapping_statuses(&set, &mappings, &views, &awaiting, RUNNER, &digest, &now);
            black_box(out.statuses.len())
        });
    });
    let mut kept = VmTally::count(&set, &views, &awaiting, RUNNER, &no_dry_runs);
    for changed in [10, 100] {
        // Each pass counts `changed` VMs again, alternating whether they wait for a restart
        // (so that every pass changes the tally).
        let named: Vec<(NamespacedName, [VmCount; 2])> = views
            .iter()
            .step_by(VMS / changed)
            .map(|v| {
                let live = v.resolve(&set, RUNNER, Mode::Live);
                let counts = [false, true].map(|a| VmCount::of(&live, None, &no_dry_runs, a));
                (NamespacedName::of(v.vm), counts)
            })
            .collect();
        let mut turn = 0;
        group.bench_with_input(
            BenchmarkId::new("VMs named since the last pass counted", changed),
            &named,
            |b, named| {
                b.iter(|| {
                    turn = 1 - turn;
                    for (name, counts) in named {
                        kept.set(name.clone(), Some(counts[turn].clone()));
                    }
                    black_box(
                        statuses(&set, &mappings, &kept, &PodTally::default(), &digest, &now)
                            .statuses
                            .len(),
                    )
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
