//! The examples stay consistent with what they claim (Tilt cannot run here).

#![allow(clippy::unwrap_used)] // test code

use imagemap::cli::manifest_files;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");

#[test]
fn the_tiltfile_builds_the_image_its_mapping_rewrites_and_loads_existing_files() {
    let tiltfile = std::fs::read_to_string(format!("{EXAMPLES}/Tiltfile")).unwrap();
    assert!(tiltfile.contains("k8s_kind('ImageMapping', image_json_path='{.spec.rules[*].to}')"));
    let built = tiltfile
        .lines()
        .find_map(|l| l.strip_prefix("docker_build('"))
        .and_then(|l| l.split('\'').next())
        .unwrap();
    let context = tiltfile
        .lines()
        .find(|l| l.starts_with("docker_build("))
        .and_then(|l| l.split('\'').nth(3))
        .unwrap();
    assert!(std::path::Path::new(&format!("{EXAMPLES}/{context}/Dockerfile")).exists());
    let yaml_line = tiltfile
        .lines()
        .find(|l| l.starts_with("k8s_yaml("))
        .unwrap();
    let files: Vec<&str> = yaml_line.split('\'').skip(1).step_by(2).collect();
    let paths: Vec<std::path::PathBuf> = files
        .iter()
        .map(|f| format!("{EXAMPLES}/{f}").into())
        .collect();
    let manifests = manifest_files::load(&paths, "default").unwrap();
    // Tilt swaps the built image into every rule whose `to` names it.
    let rule = &manifests.image_mappings[0].spec.rules[0];
    assert_eq!(rule.to.as_deref(), Some(built));
    // ...and the VM asks for that repository, with liveReload on.
    let vm = &manifests.virtual_machines[0];
    assert!(vm.spec.live_reload);
    assert!(vm.spec.guest.root_disk.image.starts_with(built));
}

#[test]
fn the_neonvm_example_maps_what_its_vm_asks_for_both_ways() {
    let dir = format!("{EXAMPLES}/neonvm");
    let tiltfile = std::fs::read_to_string(format!("{dir}/Tiltfile")).unwrap();
    assert!(tiltfile.contains("k8s_kind('ImageMapping', image_json_path='{.spec.rules[*].to}')"));
    assert!(tiltfile.contains("docker_build('neondatabase/vm-compute-node-v17', 'compute')"));
    assert!(std::path::Path::new(&format!("{dir}/compute/Dockerfile")).exists());
    // The VM is NeonVM's own, opted into live reload under restartPolicy Always.
    let vm: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(format!("{dir}/vm.yaml")).unwrap())
            .unwrap();
    assert_eq!(vm["apiVersion"], "vm.neon.tech/v1");
    assert_eq!(vm["metadata"]["labels"]["imagemap.dev/live-reload"], "true");
    assert_eq!(vm["spec"]["restartPolicy"], "Always");
    let disk = vm["spec"]["guest"]["rootDisk"]["image"].as_str().unwrap();
    for (file, follows) in [("mapping.yaml", false), ("mapping-constant-tag.yaml", true)] {
        let manifests = manifest_files::load(&[format!("{dir}/{file}").into()], "default").unwrap();
        let rule = &manifests.image_mappings[0].spec.rules[0];
        let repository = rule.match_.repository.as_deref().unwrap();
        assert!(
            disk.starts_with(&format!("{repository}:")),
            "{file}: {repository} vs {disk}"
        );
        assert_eq!(rule.follow_tag, follows, "{file}");
        if !follows {
            // Tilt swaps the built image into the rule whose `to` names it.
            assert_eq!(rule.to.as_deref(), Some("neondatabase/vm-compute-node-v17"));
        }
    }
    assert!(tiltfile.contains("mapping-constant-tag.yaml") && tiltfile.contains("vm.yaml"));
}
