use super::*;
use crate::core::api::{MappingRule, RuleMatch, VirtualMachineSpec};
use crate::core::rules::{CompileOptions, MappingInput, MappingScope};
use crate::core::slot_resolution::namespace_labels;
use k8s_openapi::api::core::v1::Container;

fn vm(yaml: &str) -> VirtualMachine {
    let mut vm = VirtualMachine::new(
        "vm",
        serde_yaml_ng::from_str::<VirtualMachineSpec>(yaml).unwrap(),
    );
    vm.metadata.namespace = Some("dev".into());
    vm
}

#[test]
fn slots_follow_pod_order_and_default_runner() {
    let mut v = vm("guest: {rootDisk: {image: disk:1}, kernelImage: kernel:1}");
    v.spec.extra_init_containers.push(Container {
        name: "setup".into(),
        image: Some("busybox".into()),
        ..Default::default()
    });
    let slots: Vec<(String, String)> = image_slots(&v, "runner:default")
        .into_iter()
        .map(|s| (s.slot, s.requested))
        .collect();
    assert_eq!(
        slots,
        [
            ("rootDisk".to_string(), "disk:1".to_string()),
            ("kernel".into(), "kernel:1".into()),
            ("extraInitContainers/setup".into(), "busybox".into()),
            ("runner".into(), "runner:default".into()),
        ]
    );
}

#[test]
fn resolution_records_source_and_errors() {
    let rules = vec![MappingRule {
        match_: RuleMatch {
            repository: Some("disk".into()),
            ..Default::default()
        },
        to: Some("localhost:5000/disk".into()),
        ..Default::default()
    }];
    let set = RuleSet::compile(
        &[MappingInput {
            scope: MappingScope::Namespaced,
            namespace: Some("dev".into()),
            name: "m".into(),
            priority: 0,
            selector: None,
            namespace_selector: None,
            dry_run: false,
            rules,
        }],
        &CompileOptions::default(),
    );
    let v = vm("guest: {rootDisk: {image: 'disk:1'}}\nrunnerImage: 'Bad Image'");
    let res = resolve_vm(
        &set,
        &v,
        &namespace_labels("dev", &BTreeMap::new()),
        "r",
        Mode::Live,
    );
    let images = res.images();
    assert_eq!(images[0].resolved.as_deref(), Some("localhost:5000/disk:1"));
    assert_eq!(
        images[0].source.as_ref().map(|s| s.name.as_str()),
        Some("m")
    );
    assert!(
        images[1]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("not a valid reference")
    );
    assert!(!res.all_resolved());
}

#[test]
fn vms_asking_alike_share_one_resolution() {
    let set = RuleSet::default();
    let labels = BTreeMap::new();
    let (a, b) = (
        vm("guest: {rootDisk: {image: 'disk:1'}}"),
        vm("guest: {rootDisk: {image: 'disk:1'}}"),
    );
    let mut c = vm("guest: {rootDisk: {image: 'disk:1'}}");
    c.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    let d = vm("guest: {rootDisk: {image: 'disk:2'}}");
    let view = |vm| VmView {
        vm,
        namespace_labels: &labels,
    };
    assert_eq!(view(&a).key("r"), view(&b).key("r"));
    assert_ne!(
        view(&a).key("r"),
        view(&c).key("r"),
        "labels select mappings"
    );
    assert_ne!(view(&a).key("r"), view(&d).key("r"));
    let mut resolutions = Resolutions::new(&set, "r", Mode::Live);
    for v in [&a, &b, &c, &d] {
        assert_eq!(
            resolutions.of(view(v)),
            &view(v).resolve(&set, "r", Mode::Live)
        );
    }
    assert_eq!(resolutions.memo.len(), 3);
}

#[test]
fn a_followed_slot_is_pinned_and_a_failing_registry_never_unpins_it() {
    const TAG: &str = "local:5000/disk:dev";
    let followed = |slot: &str| SlotResolution {
        slot: slot.into(),
        requested: "disk".into(),
        outcome: Ok(TAG.into()),
        rule: None,
        conflicts: Vec::new(),
        more_conflicts: 0,
        follow_tag: true,
        digest: None,
        digest_error: None,
        refused: Vec::new(),
    };
    let plain = SlotResolution {
        follow_tag: false,
        ..followed("runner")
    };
    let mut resolution = VmResolution {
        slots: vec![followed("rootDisk"), plain],
    };
    resolution.pin(|_, _| (Some("sha256:1".into()), None), &[]);
    assert_eq!(resolution.slots[0].digest.as_deref(), Some("sha256:1"));
    assert_eq!(resolution.slots[1].digest, None, "only followed slots");
    let previous = resolution.images();
    assert_eq!(
        previous[0].pod_image().as_deref(),
        Some("local:5000/disk:dev@sha256:1")
    );
    // The registry fails and this process knows no digest (it restarted): the one the
    // status recorded stays.
    resolution.pin(|_, _| (None, Some("refused".into())), &previous);
    assert_eq!(resolution.slots[0].digest.as_deref(), Some("sha256:1"));
    assert_eq!(resolution.slots[0].digest_error.as_deref(), Some("refused"));
    // Nothing known anywhere: the tag as resolved.
    resolution.pin(|_, _| (None, Some("refused".into())), &[]);
    assert_eq!(resolution.slots[0].digest, None);
    assert_eq!(resolution.images()[0].pod_image().as_deref(), Some(TAG));
}
