//! The runner pod of a VirtualMachine, built from the VM and its resolved images. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};

use crate::core::api::{ResolvedImage, VirtualMachine, VmPhase};
use crate::core::vm_images::{SLOT_EXTRA_PREFIX, SLOT_KERNEL, SLOT_ROOT_DISK, SLOT_RUNNER};

/// Label on every runner pod naming its VirtualMachine.
pub const VM_LABEL: &str = "imagemap.dev/virtualmachine";
/// Annotation holding the stable hash of the images a pod runs.
pub const IMAGES_HASH_ANNOTATION: &str = "imagemap.dev/images-hash";
/// Annotation holding the VM's `status.restartCount` the pod was created for.
pub const RESTART_COUNT_ANNOTATION: &str = "imagemap.dev/restart-count";
/// Grace period when the VM names none, as NeonVM.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 5;
/// The shortest grace period a runner pod gets (a VM asking for 0 gets this): with 0, the
/// API server removes a scheduled pod's object at once while its kubelet may still be
/// running it, and its replacement would start beside it; with 1 or more, the object goes
/// only once the kubelet confirms the containers stopped — the evidence that the pod is
/// gone. (An unscheduled pod, which no kubelet runs, still goes at once.)
pub const MIN_GRACE_SECONDS: i64 = 1;

/// Init container copying the root disk out of its image.
pub const INIT_CONTAINER: &str = "init";
/// Init container copying the kernel out of its image.
pub const INIT_KERNEL_CONTAINER: &str = "init-kernel";
/// The container running the VM.
pub const RUNNER_CONTAINER: &str = "runner";

const IMAGES_VOLUME: &str = "virtualmachineimages";
const IMAGES_PATH: &str = "/vm/images";

/// 64-bit FNV-1a: stable across Rust releases and platforms (unlike `DefaultHasher`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The stable hash of a set of resolved images: what the images-hash annotation holds.
/// `None` when a slot is unresolved.
pub fn images_hash(images: &[ResolvedImage]) -> Option<String> {
    let mut text = String::new();
    for img in images {
        text.push_str(&img.slot);
        text.push('=');
        text.push_str(&img.pod_image()?);
        text.push('\n');
    }
    Some(format!("{:016x}", fnv1a(text.as_bytes())))
}

/// The name of the pod for a VM at a restart count and images hash: deterministic, so a
/// reconcile that crashed after creating it finds it again (AlreadyExists), and different
/// for each restart and each set of images.
pub fn pod_name(vm: &VirtualMachine, restart_count: i32, images_hash: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let uid = vm.uid().unwrap_or_default();
    let mut h = fnv1a(format!("{uid}/{restart_count}/{images_hash}").as_bytes());
    let mut suffix = String::new();
    let base = ALPHABET.len() as u64;
    for _ in 0..5 {
        // `h % base` is below ALPHABET.len(), so it fits any usize.
        let digit = usize::try_from(h % base).unwrap_or_default();
        suffix.push(char::from(ALPHABET[digit]));
        h /= base;
    }
    let mut base = vm.name_any();
    base.truncate(63 - 6);
    format!("{}-{suffix}", base.trim_end_matches(['-', '.']))
}

/// Builds the runner pod: init container `init` (root disk), `init-kernel` (when set), the
/// extra init containers, and container `runner`, with the VM's pod knobs.
/// Every slot of `images` must be resolved.
pub fn build(vm: &VirtualMachine, images: &[ResolvedImage], restart_count: i32) -> Option<Pod> {
    let hash = images_hash(images)?;
    let resolved = |slot: &str| {
        images
            .iter()
            .find(|i| i.slot == slot)
            .and_then(ResolvedImage::pod_image)
    };
    let spec = &vm.spec;
    let mount = VolumeMount {
        name: IMAGES_VOLUME.into(),
        mount_path: IMAGES_PATH.into(),
        ..Default::default()
    };
    let pull_policy = spec
        .guest
        .root_disk
        .image_pull_policy
        .map_or("IfNotPresent", |p| p.as_str())
        .to_string();
    let mut init_containers = vec![Container {
        name: INIT_CONTAINER.into(),
        image: resolved(SLOT_ROOT_DISK),
        image_pull_policy: Some(pull_policy.clone()),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            format!("cp /disk.qcow2 {IMAGES_PATH}/rootdisk.qcow2"),
        ]),
        volume_mounts: Some(vec![mount.clone()]),
        ..Default::default()
    }];
    if spec.guest.kernel_image.is_some() {
        init_containers.push(Container {
            name: INIT_KERNEL_CONTAINER.into(),
            image: resolved(SLOT_KERNEL),
            image_pull_policy: Some(pull_policy),
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                format!("cp /vmlinuz {IMAGES_PATH}/vmlinuz"),
            ]),
            volume_mounts: Some(vec![mount.clone()]),
            ..Default::default()
        });
    }
    for c in &spec.extra_init_containers {
        let mut c = c.clone();
        c.image = resolved(&format!("{SLOT_EXTRA_PREFIX}{}", c.name));
        init_containers.push(c);
    }
    let runner = Container {
        name: RUNNER_CONTAINER.into(),
        image: resolved(SLOT_RUNNER),
        resources: spec.pod_resources.as_deref().cloned(),
        volume_mounts: Some(vec![mount]),
        ..Default::default()
    };
    let mut labels: BTreeMap<String, String> = vm.labels().clone();
    labels.insert(VM_LABEL.into(), vm.name_any());
    let annotations = BTreeMap::from([
        (IMAGES_HASH_ANNOTATION.to_string(), hash.clone()),
        (
            RESTART_COUNT_ANNOTATION.to_string(),
            restart_count.to_string(),
        ),
    ]);
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(vm, restart_count, &hash)),
            namespace: vm.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: vm.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            init_containers: Some(init_containers),
            containers: vec![runner],
            volumes: Some(vec![Volume {
                name: IMAGES_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty())
                .then(|| spec.image_pull_secrets.clone()),
            scheduler_name: spec.scheduler_name.clone(),
            node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
            affinity: spec.affinity.as_deref().cloned(),
            tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
            service_account_name: spec.service_account_name.clone(),
            termination_grace_period_seconds: Some(
                spec.termination_grace_period_seconds
                    .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS)
                    .max(MIN_GRACE_SECONDS),
            ),
            ..Default::default()
        }),
        status: None,
    })
}

/// The images hash a live pod was created with.
pub fn pod_images_hash(pod: &Pod) -> Option<&str> {
    pod.annotations()
        .get(IMAGES_HASH_ANNOTATION)
        .map(String::as_str)
}

/// The restart count a live pod was created for.
pub fn pod_restart_count(pod: &Pod) -> Option<i32> {
    pod.annotations()
        .get(RESTART_COUNT_ANNOTATION)
        .and_then(|s| s.parse().ok())
}

/// The images a pod runs, by slot (the inverse of [`build`]).
#[must_use]
pub fn pod_images(pod: &Pod) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(spec) = &pod.spec else { return out };
    for c in spec.init_containers.iter().flatten() {
        let slot = match c.name.as_str() {
            INIT_CONTAINER => SLOT_ROOT_DISK.to_string(),
            INIT_KERNEL_CONTAINER => SLOT_KERNEL.to_string(),
            name => format!("{SLOT_EXTRA_PREFIX}{name}"),
        };
        out.insert(slot, c.image.clone().unwrap_or_default());
    }
    for c in &spec.containers {
        if c.name == RUNNER_CONTAINER {
            out.insert(SLOT_RUNNER.into(), c.image.clone().unwrap_or_default());
        }
    }
    out
}

/// How long a pod that neither a scheduler nor a kubelet has reported on yet counts as
/// starting: its VM's status is not written for it meanwhile (it shows the next state).
/// A kubelet reports within a second or two of the pod's binding, and a scheduler that
/// cannot place the pod says so at once; silence lasts only while the scheduler is behind —
/// minutes, in a fan-out of tens of thousands of pods — and then one status write shows
/// the running pod. Pending for longer than kube-scheduler's own wait for unschedulable
/// pods (5 minutes) matters: the VM says so.
pub const STARTING_GRACE: std::time::Duration = std::time::Duration::from_mins(5);

/// Whether no scheduler or kubelet has reported on `pod` yet (no container statuses, no
/// scheduling verdict) while it is younger than [`STARTING_GRACE`] at `now`; then the
/// time left.
#[must_use]
pub fn pod_starting(pod: &Pod, now: &Time) -> Option<std::time::Duration> {
    let status = pod.status.as_ref();
    let reported = status.is_some_and(|s| {
        s.container_statuses.as_ref().is_some_and(|c| !c.is_empty())
            || s.init_container_statuses
                .as_ref()
                .is_some_and(|c| !c.is_empty())
            || s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
            || s.phase.as_deref().is_some_and(|p| p != "Pending")
    });
    if reported {
        return None;
    }
    let created = pod.metadata.creation_timestamp.as_ref()?;
    let age = now.0.duration_since(created.0);
    let age = std::time::Duration::try_from(age).ok()?;
    STARTING_GRACE
        .checked_sub(age)
        .filter(|left| !left.is_zero())
}

/// When the runner container of a finished pod started and finished, as its kubelet reported.
#[must_use]
pub fn runner_ran(pod: &Pod) -> Option<(Time, Time)> {
    let terminated = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == RUNNER_CONTAINER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some((
        terminated.started_at.clone()?,
        terminated.finished_at.clone()?,
    ))
}

/// The VM phase a pod's status shows: `Running` once the runner container is ready.
#[must_use]
pub fn pod_phase(pod: &Pod) -> VmPhase {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => VmPhase::Succeeded,
        Some("Failed") => VmPhase::Failed,
        _ => {
            let runner_ready = status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.name == RUNNER_CONTAINER && c.ready);
            if runner_ready {
                VmPhase::Running
            } else {
                VmPhase::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::api::VirtualMachineSpec;

    fn vm() -> VirtualMachine {
        let spec: VirtualMachineSpec = serde_yaml_ng::from_str(
            "guest: {rootDisk: {image: disk:1, imagePullPolicy: Always}, kernelImage: k:1}\n\
             extraInitContainers: [{name: setup, image: busybox}]\n\
             nodeSelector: {zone: a}",
        )
        .unwrap();
        let mut vm = VirtualMachine::new("compute", spec);
        vm.metadata.namespace = Some("dev".into());
        vm.metadata.uid = Some("uid-1".into());
        vm.metadata.labels = Some(BTreeMap::from([("app".to_string(), "db".to_string())]));
        vm
    }

    fn images(disk: &str) -> Vec<ResolvedImage> {
        [
            ("rootDisk", disk),
            ("kernel", "docker.io/library/k:1"),
            ("extraInitContainers/setup", "mirror.io/busybox"),
            ("runner", "docker.io/neondatabase/neonvm-runner:v1"),
        ]
        .into_iter()
        .map(|(slot, resolved)| ResolvedImage {
            slot: slot.into(),
            requested: "x".into(),
            resolved: Some(resolved.into()),
            ..Default::default()
        })
        .collect()
    }

    #[test]
    fn pod_follows_neonvm_layout() {
        let pod = build(&vm(), &images("mirror.io/disk:1"), 0).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        let inits: Vec<(&str, &str)> = spec
            .init_containers
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref().unwrap()))
            .collect();
        assert_eq!(
            inits,
            [
                ("init", "mirror.io/disk:1"),
                ("init-kernel", "docker.io/library/k:1"),
                ("setup", "mirror.io/busybox")
            ]
        );
        assert_eq!(spec.containers[0].name, "runner");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(5));
        assert_eq!(
            spec.init_containers.as_ref().unwrap()[0]
                .image_pull_policy
                .as_deref(),
            Some("Always")
        );
        assert_eq!(pod.labels()[VM_LABEL], "compute");
        assert_eq!(pod.labels()["app"], "db");
        let owner = &pod.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("VirtualMachine", Some(true))
        );
        assert_eq!(pod_restart_count(&pod), Some(0));
        assert!(pod.name_any().starts_with("compute-"));
    }

    #[test]
    fn hash_and_name_are_stable_and_change_with_images_and_restarts() {
        let a = images_hash(&images("mirror.io/disk:1")).unwrap();
        assert_eq!(a, images_hash(&images("mirror.io/disk:1")).unwrap());
        // Pinned: the hash must not change between releases, or every pod would be recreated.
        assert_eq!(a, format!("{:016x}", fnv1a(b"rootDisk=mirror.io/disk:1\nkernel=docker.io/library/k:1\nextraInitContainers/setup=mirror.io/busybox\nrunner=docker.io/neondatabase/neonvm-runner:v1\n")));
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let b = images_hash(&images("mirror.io/disk:2")).unwrap();
        assert_ne!(a, b);
        let v = vm();
        assert_eq!(pod_name(&v, 0, &a), pod_name(&v, 0, &a));
        assert_ne!(pod_name(&v, 0, &a), pod_name(&v, 0, &b));
        assert_ne!(pod_name(&v, 0, &a), pod_name(&v, 1, &a));
        let mut unresolved = images("x");
        unresolved[0].resolved = None;
        assert!(build(&v, &unresolved, 0).is_none());
    }

    #[test]
    fn long_vm_names_give_valid_pod_names() {
        let mut v = vm();
        v.metadata.name = Some(format!("{}-x", "a".repeat(100)));
        let name = pod_name(&v, 3, "h");
        assert!(name.len() <= 63, "{name}");
        assert!(!name.contains("--"));
    }

    #[test]
    fn the_crd_reserves_exactly_the_runner_pods_container_names() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_string(&VirtualMachine::crd()).unwrap();
        let reserved = format!(
            "!(c.name in ['{INIT_CONTAINER}', '{INIT_KERNEL_CONTAINER}', '{RUNNER_CONTAINER}'])"
        );
        assert!(
            crd.contains(&reserved),
            "the CRD's CEL rule for extraInitContainers must reserve {reserved}"
        );
    }
}
