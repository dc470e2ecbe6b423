use super::*;
use crate::core::api::VirtualMachine;
use crate::core::fixtures::{
    mapping_key as key, repository_mapping as mapping, vm_with_disk as vm,
};
use crate::core::rules::{CompileOptions, MappingInput};
use k8s_openapi::jiff::Timestamp;

#[test]
fn a_dry_run_that_would_outrank_a_live_mapping_leaves_the_live_count_alone() {
    let labels = BTreeMap::new();
    let mut preview = mapping("preview", "disk-a", "z.io/a", true);
    preview.priority = 10;
    let inputs = [mapping("live", "disk-a", "x.io/a", false), preview];
    let set = RuleSet::compile(&inputs, &CompileOptions::default());
    let a = vm("a", "disk-a:1");
    let views = [VmView {
        vm: &a,
        namespace_labels: &labels,
    }];
    let mappings: Vec<MappingView> = ["live", "preview"]
        .into_iter()
        .map(|n| MappingView {
            key: key(n),
            generation: Some(1),
            rule_count: 1,
            dry_run: n == "preview",
            previous: None,
        })
        .collect();
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let out = mapping_statuses(
        &set,
        &mappings,
        &views,
        &BTreeSet::new(),
        "runner:1",
        &|_, _| None,
        &now,
    )
    .statuses;
    // The live mapping decides the VM's image; the dry run would.
    assert_eq!(out[&key("live")].affected_vms, Some(1));
    assert_eq!(out[&key("live")].rules[0].affected_vms, 1);
    assert_eq!(out[&key("preview")].affected_vms, Some(1));
}

#[test]
fn statuses_count_vms_and_report_conflicts_and_dry_runs() {
    let labels = BTreeMap::new();
    let inputs = [
        mapping("alpha", "disk-a", "x.io/a", false),
        mapping("beta", "disk-a", "y.io/a", false),
        mapping("preview", "disk-b", "z.io/b", true),
    ];
    let set = RuleSet::compile(&inputs, &CompileOptions::default());
    let (a, b) = (vm("a", "disk-a:1"), vm("b", "disk-b:1"));
    let views = [&a, &b].map(|vm| VmView {
        vm,
        namespace_labels: &labels,
    });
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let mappings: Vec<MappingView> = ["alpha", "beta", "preview"]
        .into_iter()
        .map(|n| MappingView {
            key: key(n),
            generation: Some(2),
            rule_count: 1,
            dry_run: n == "preview",
            previous: None,
        })
        .collect();
    let out = mapping_statuses(
        &set,
        &mappings,
        &views,
        &BTreeSet::new(),
        "runner",
        &|_, _| None,
        &now,
    )
    .statuses;
    let alpha = &out[&key("alpha")];
    assert_eq!(alpha.affected_vms, Some(1));
    assert_eq!(alpha.conditions[0].status, "False");
    assert_eq!(alpha.conditions[0].reason, "Conflict");
    assert!(
        alpha.conditions[0]
            .message
            .contains("rule 0 conflicts with ImageMapping dev/beta rule 0"),
        "{}",
        alpha.conditions[0].message
    );
    // kstatus: stalled until the rules change.
    let stalled = &alpha.conditions[1];
    assert_eq!(
        (
            stalled.type_.as_str(),
            stalled.status.as_str(),
            stalled.reason.as_str()
        ),
        ("Stalled", "True", "Conflict")
    );
    let beta = &out[&key("beta")];
    assert_eq!(beta.conditions[0].reason, "Conflict");
    assert_eq!(beta.affected_vms, Some(0));
    let preview = &out[&key("preview")];
    assert_eq!(preview.conditions[0].reason, "DryRun");
    assert_eq!(preview.conditions.len(), 1, "a dry run is not stalled");
    assert_eq!(preview.affected_vms, Some(1));
    assert_eq!(preview.rules[0].affected_vms, 1);
    assert_eq!(preview.observed_generation, Some(2));
}

#[test]
fn a_conflict_is_reported_once_per_rule() {
    let labels = BTreeMap::new();
    // Two rules with the same match in one mapping: a static conflict, which a VM then
    // also hits.
    let mut twice = mapping("twice", "disk-a", "x.io/a", false);
    let mut second = twice.rules[0].clone();
    second.to = Some("y.io/a".into());
    twice.rules.push(second);
    let set = RuleSet::compile(&[twice], &CompileOptions::default());
    let a = vm("a", "disk-a:1");
    let views = [VmView {
        vm: &a,
        namespace_labels: &labels,
    }];
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let mappings = [MappingView {
        key: key("twice"),
        generation: Some(1),
        rule_count: 2,
        dry_run: false,
        previous: None,
    }];
    let out = mapping_statuses(
        &set,
        &mappings,
        &views,
        &BTreeSet::new(),
        "runner",
        &|_, _| None,
        &now,
    );
    let status = &out.statuses[&key("twice")];
    let message = &status.conditions[0].message;
    assert_eq!(
        message,
        "rule 0 conflicts with ImageMapping dev/twice rule 1: same match and priority, different result; \
         rule 1 conflicts with ImageMapping dev/twice rule 0: same match and priority, different result"
    );
    assert_eq!(out.rules_in_conflict, 2);
    assert_eq!(
        status.rules[1].problem.as_deref(),
        Some(
            "rule 1 conflicts with ImageMapping dev/twice rule 0: same match and priority, different result"
        )
    );
}

#[test]
fn ties_seen_on_vms_name_the_first_vm_and_vms_awaiting_restart_are_listed() {
    let labels = BTreeMap::new();
    // Different selectors: no static conflict, but both select the VMs.
    let mut alpha = mapping("alpha", "disk-a", "x.io/a", false);
    let mut beta = mapping("beta", "disk-a", "y.io/a", false);
    alpha.selector = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([("app".to_string(), "db".to_string())].into()),
            ..Default::default()
        },
    );
    beta.selector = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "Exists".into(),
                    values: None,
                },
            ]),
            ..Default::default()
        },
    );
    let set = RuleSet::compile(&[alpha, beta], &CompileOptions::default());
    assert!(set.problems().is_empty());
    let vms: Vec<VirtualMachine> = ["b", "a"]
        .into_iter()
        .map(|n| {
            let mut v = vm(n, "disk-a:1");
            v.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
            v
        })
        .collect();
    let views: Vec<VmView> = vms
        .iter()
        .map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        })
        .collect();
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let mappings: Vec<MappingView> = ["alpha", "beta"]
        .into_iter()
        .map(|n| MappingView {
            key: key(n),
            generation: Some(1),
            rule_count: 1,
            dry_run: false,
            previous: None,
        })
        .collect();
    let awaiting = BTreeSet::from([NamespacedName {
        namespace: "dev".into(),
        name: "b".into(),
    }]);
    let out = mapping_statuses(
        &set,
        &mappings,
        &views,
        &awaiting,
        "runner",
        &|_, _| None,
        &now,
    );
    let alpha = &out.statuses[&key("alpha")];
    assert_eq!(
        alpha.conditions[0].message,
        "rule 0 conflicts with ImageMapping dev/beta rule 0 for rootDisk of VirtualMachine dev/a"
    );
    assert_eq!(alpha.awaiting_restart, ["dev/b"]);
    assert_eq!(
        out.statuses[&key("beta")].conditions[0].message,
        "rule 0 conflicts with ImageMapping dev/alpha rule 0 for rootDisk of VirtualMachine dev/a (that rule wins)"
    );
}

#[test]
fn the_list_of_vms_awaiting_a_restart_is_capped_and_counted() {
    let labels = BTreeMap::new();
    let set = RuleSet::compile(
        &[mapping("m", "disk-a", "x.io/a", false)],
        &CompileOptions::default(),
    );
    let vms: Vec<VirtualMachine> = (0..250)
        .map(|i| vm(&format!("vm-{i:03}"), "disk-a:1"))
        .collect();
    let views: Vec<VmView> = vms
        .iter()
        .map(|vm| VmView {
            vm,
            namespace_labels: &labels,
        })
        .collect();
    let awaiting: BTreeSet<NamespacedName> = (0..250)
        .map(|i| NamespacedName {
            namespace: "dev".into(),
            name: format!("vm-{i:03}"),
        })
        .collect();
    let mappings = [MappingView {
        key: key("m"),
        generation: Some(1),
        rule_count: 1,
        dry_run: false,
        previous: None,
    }];
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let out = mapping_statuses(
        &set,
        &mappings,
        &views,
        &awaiting,
        "runner",
        &|_, _| None,
        &now,
    );
    let status = &out.statuses[&key("m")];
    assert_eq!(status.awaiting_restart.len(), LISTED_AWAITING);
    assert_eq!(status.awaiting_restart[0], "dev/vm-000");
    assert_eq!(status.awaiting_restart_count, Some(250));
    assert_eq!(status.affected_vms, Some(250));
}

/// The statuses from a tally kept up to date VM by VM, and from a full count of the same
/// VMs: they must be equal.
fn kept_and_counted(
    set: &RuleSet,
    mappings: &[MappingView<'_>],
    kept: &VmTally,
    vms: &[VmView<'_>],
    awaiting: &BTreeSet<NamespacedName>,
) -> (MappingStatuses, MappingStatuses) {
    let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let full = mapping_statuses(set, mappings, vms, awaiting, "runner", &|_, _| None, &now);
    let kept = statuses(
        set,
        mappings,
        kept,
        &PodTally::default(),
        &|_, _| None,
        &now,
    );
    (kept, full)
}

/// Counts `vm` again into `tally`, as the status writer does for a VM named to it.
fn count_again(
    tally: &mut VmTally,
    set: &RuleSet,
    vm: &VirtualMachine,
    dry_runs: &BTreeSet<&MappingKey>,
    awaiting: bool,
) {
    let labels = BTreeMap::new();
    let view = VmView {
        vm,
        namespace_labels: &labels,
    };
    let live = view.resolve(set, "runner", crate::core::rules::Mode::Live);
    let preview = view.resolve(set, "runner", crate::core::rules::Mode::Preview);
    let count = VmCount::of(&live, Some(&preview), dry_runs, awaiting);
    tally.set(NamespacedName::of(vm), Some(count));
}

/// Views of `vms`, all in one namespace with `labels`.
fn views<'a>(vms: &'a [VirtualMachine], labels: &'a BTreeMap<String, String>) -> Vec<VmView<'a>> {
    vms.iter()
        .map(|vm| VmView {
            vm,
            namespace_labels: labels,
        })
        .collect()
}

/// The views of the mappings `inputs` compile from, at `generation`.
fn views_of_mappings(inputs: &[MappingInput], generation: i64) -> Vec<MappingView<'static>> {
    inputs
        .iter()
        .map(|m| MappingView {
            key: key(&m.name),
            generation: Some(generation),
            rule_count: m.rules.len(),
            dry_run: m.dry_run,
            previous: None,
        })
        .collect()
}

#[test]
fn a_tally_kept_vm_by_vm_equals_a_full_count() {
    let labels = BTreeMap::new();
    let inputs = [
        mapping("alpha", "disk-a", "x.io/a", false),
        mapping("beta", "disk-a", "y.io/a", false),
        mapping("gamma", "disk-b", "x.io/b", false),
        mapping("preview", "disk-c", "z.io/c", true),
    ];
    let set = RuleSet::compile(&inputs, &CompileOptions::default());
    let mappings = views_of_mappings(&inputs, 1);
    let dry = dry_runs(&mappings);
    let mut vms: Vec<VirtualMachine> = (0..6)
        .map(|i| {
            vm(
                &format!("vm-{i}"),
                ["disk-a:1", "disk-b:1", "disk-c:1"][i % 3],
            )
        })
        .collect();
    let mut awaiting = BTreeSet::from([NamespacedName::of(&vms[1])]);
    let mut kept = VmTally::count(&set, &views(&vms, &labels), &awaiting, "runner", &dry);
    let (a, b) = kept_and_counted(&set, &mappings, &kept, &views(&vms, &labels), &awaiting);
    assert_eq!(a.statuses, b.statuses);
    assert_eq!(a.statuses[&key("gamma")].awaiting_restart, ["dev/vm-1"]);
    assert_eq!(a.statuses[&key("alpha")].affected_vms, Some(2));

    // A VM moves from disk-a to disk-b, one stops waiting for a restart, one is deleted:
    // each is counted again on its own.
    vms[0] = vm("vm-0", "disk-b:2");
    count_again(&mut kept, &set, &vms[0], &dry, false);
    awaiting.clear();
    count_again(&mut kept, &set, &vms[1], &dry, false);
    let gone = vms.remove(5);
    kept.set(NamespacedName::of(&gone), None);
    let (a, b) = kept_and_counted(&set, &mappings, &kept, &views(&vms, &labels), &awaiting);
    assert_eq!(a.statuses, b.statuses);
    assert_eq!(a.statuses[&key("alpha")].affected_vms, Some(1));
    assert!(a.statuses[&key("gamma")].awaiting_restart.is_empty());
    assert_eq!(kept.vms().count(), 5);
    // Five VMs, three distinct counts (disk-a, disk-b, disk-c), each kept once.
    assert_eq!(kept.distinct(), 3);

    // The rules change: only the VMs that resolve differently are counted again.
    let inputs = [
        mapping("alpha", "disk-a", "x.io/a", false),
        mapping("gamma", "disk-b", "x.io/b2", false),
        mapping("preview", "disk-c", "z.io/c", true),
        mapping("preview-a", "disk-a", "z.io/a", true),
    ];
    let new = RuleSet::compile(&inputs, &CompileOptions::default());
    let mappings = views_of_mappings(&inputs, 2);
    let dry = dry_runs(&mappings);
    let modes = [
        crate::core::rules::Mode::Live,
        crate::core::rules::Mode::Preview,
    ];
    let changed = crate::core::rule_change::resolving_differently(
        &set,
        &new,
        views(&vms, &labels),
        "runner",
        &modes,
    );
    // (The disk-c VMs resolve alike.)
    assert_eq!(changed.len(), 4, "{changed:?}");
    for vm in changed {
        count_again(&mut kept, &new, vm, &dry, false);
    }
    let (a, b) = kept_and_counted(&new, &mappings, &kept, &views(&vms, &labels), &awaiting);
    assert_eq!(a.statuses, b.statuses);
    assert_eq!(a.statuses[&key("preview")].affected_vms, Some(1));
    assert_eq!(a.rules_in_conflict, b.rules_in_conflict);
}

#[test]
fn pod_counts_are_kept_until_the_first_pass_and_their_time_moves_only_with_them() {
    let set = RuleSet::compile(
        &[mapping("m", "app", "x.io/app", false)],
        &CompileOptions::default(),
    );
    let at = |second: i64| Time(Timestamp::from_second(second).unwrap());
    let written = ImageMappingStatus {
        affected_pods: Some(7),
        unmapped_pods: Some(2),
        pods_counted_at: Some(at(100)),
        rules: vec![RuleStatus {
            index: 0,
            affected_pods: 7,
            ..RuleStatus::default()
        }],
        ..ImageMappingStatus::default()
    };
    let view = |previous| MappingView {
        key: key("m"),
        generation: Some(1),
        rule_count: 1,
        dry_run: false,
        previous,
    };
    let status_with = |pods: &PodTally, previous| {
        let mappings = [view(previous)];
        statuses(
            &set,
            &mappings,
            &VmTally::default(),
            pods,
            &|_, _| None,
            &at(1_000),
        )
        .statuses
        .remove(&key("m"))
        .unwrap()
    };
    // A new leader, before its first pass: the counts written stay.
    let mut pods = PodTally::default();
    let kept = status_with(&pods, Some(&written));
    assert_eq!(
        (
            kept.affected_pods,
            kept.unmapped_pods,
            kept.rules[0].affected_pods
        ),
        (Some(7), Some(2), 7)
    );
    assert_eq!(kept.pods_counted_at, Some(at(100)));
    // Its first pass finds the same counts: the time they were found stays.
    let mut dev = NamespacePods::default();
    let rule = RuleRef {
        mapping: key("m"),
        index: 0,
        kind: crate::core::rules::MatchKind::Repository,
    };
    for _ in 0..7 {
        dev.add_mapped(&BTreeSet::from([rule.clone()]));
    }
    dev.add_unmapped(&BTreeSet::from([key("m")]));
    dev.add_unmapped(&BTreeSet::from([key("m")]));
    let found = std::collections::HashMap::from([("dev".to_string(), dev)]);
    pods.set_counted(PassScope::All, found, at(500));
    let same = status_with(&pods, Some(&written));
    assert_eq!(same.pods_counted_at, Some(at(100)));
    assert_eq!(same.affected_pods, Some(7));
    // A pass that finds other counts says when.
    pods.set_counted(PassScope::All, std::collections::HashMap::new(), at(600));
    let moved = status_with(&pods, Some(&written));
    assert_eq!(
        (
            moved.affected_pods,
            moved.unmapped_pods,
            moved.rules[0].affected_pods
        ),
        (None, None, 0)
    );
    assert_eq!(moved.pods_counted_at, Some(at(600)));
}
