//! The operator's container image, as `scripts/image` builds it without a daemon: a
//! tarball `crane` accepts, the same digest from two builds, the image the Dockerfile
//! describes — and run, unpacked, by a real OCI runtime (runc) as uid 65532 on a read-only
//! root: `imagemap --version`, then `imagemap run` against the test control plane until
//! `/readyz` answers. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// The scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use support::*;

/// The binary `scripts/image` built, of the Cargo profile `IMAGE_PROFILE` (default
/// `release`; `scripts/test` builds `image-ci`, `scripts/test-release` the shipped one).
fn release_binary() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map_or_else(|_| PathBuf::from(REPO).join("target"), PathBuf::from);
    let profile = std::env::var("IMAGE_PROFILE").unwrap_or_else(|_| "release".into());
    let binary = target.join(format!("x86_64-unknown-linux-gnu/{profile}/imagemap"));
    assert!(
        binary.exists(),
        "no {}: run scripts/test (it builds it with scripts/image)",
        binary.display()
    );
    binary
}

/// `scripts/image OUT.tar --oci DIR`, around the release binary built before: the digest
/// it prints.
fn build_image(out: &Path, layout: &Path) -> String {
    let built = Command::new(format!("{REPO}/scripts/image"))
        .arg(out)
        .arg("--oci")
        .arg(layout)
        .arg("--binary")
        .arg(release_binary())
        .output()
        .expect("scripts/image runs");
    assert!(
        built.status.success(),
        "scripts/image failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    String::from_utf8_lossy(&built.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The image's config (`skopeo inspect --config`).
fn image_config(layout: &Path) -> Value {
    let text = run_ok(Command::new("skopeo").args([
        "inspect",
        "--config",
        &format!("oci:{}:imagemap", layout.display()),
    ]));
    serde_json::from_str(&text).unwrap()
}

/// What the Dockerfile's final stage says: `(user, entrypoint, cmd, the files it copies in,
/// working directory, environment)`.
fn dockerfile() -> (
    String,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    String,
    Vec<String>,
) {
    let text = std::fs::read_to_string(format!("{REPO}/Dockerfile")).unwrap();
    let last = text.rsplit("\nFROM ").next().unwrap();
    let json_list = |key: &str| -> Vec<String> {
        last.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| serde_json::from_str(v.trim()).unwrap())
            .unwrap()
    };
    let user = last
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap()
        .trim()
        .to_string();
    let copies = last
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .map(|l| l.split_whitespace().last().unwrap().to_string())
        .collect();
    let line = |key: &str| -> String {
        last.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap()
            .trim()
            .to_string()
    };
    (
        user,
        json_list("ENTRYPOINT "),
        json_list("CMD "),
        copies,
        line("WORKDIR "),
        vec![line("ENV ")],
    )
}

/// A runc bundle of the image, its root read-only, in the host's network (to reach the test
/// control plane on loopback), running `args` with `mounts` bound in.
fn bundle(layout: &Path, dir: &Path, args: &[&str], env: &[String], mounts: &[(PathBuf, &str)]) {
    let _ = std::fs::remove_dir_all(dir);
    run_ok(Command::new("umoci").args([
        "unpack",
        "--image",
        &format!("{}:imagemap", layout.display()),
        dir.to_str().unwrap(),
    ]));
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["root"]["readonly"] = json!(true);
    config["process"]["terminal"] = json!(false);
    config["process"]["args"] = json!(args);
    let mut environment: Vec<Value> = config["process"]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    environment.extend(env.iter().map(|e| json!(e)));
    config["process"]["env"] = json!(environment);
    let namespaces: Vec<Value> = config["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["type"] != "network")
        .cloned()
        .collect();
    config["linux"]["namespaces"] = json!(namespaces);
    let list = config["mounts"].as_array_mut().unwrap();
    for (source, destination) in mounts {
        list.push(json!({
            "destination": destination, "type": "bind",
            "source": source, "options": ["rbind", "ro"]
        }));
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
}

/// The test control plane's kubeconfig, self-contained (its CA inline), readable by 65532.
fn portable_kubeconfig(dir: &Path, namespace: &str) -> PathBuf {
    let path = std::env::var("KUBECONFIG").expect("KUBECONFIG (scripts/test sets it)");
    let kubeconfig: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cluster = &kubeconfig["clusters"][0]["cluster"];
    let ca = std::fs::read(cluster["certificate-authority"].as_str().unwrap()).unwrap();
    let portable = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cluster["server"],
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca),
        }}],
        "users": [{"name": "admin", "user": kubeconfig["users"][0]["user"]}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin", "namespace": namespace}}],
        "current-context": "test",
    });
    let out = dir.join("kubeconfig");
    std::fs::write(&out, serde_json::to_vec(&portable).unwrap()).unwrap();
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    out
}

/// A runc container, deleted when dropped.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["kill", &self.0, "KILL"])
            .output();
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.0])
            .output();
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_image_is_reproducible_and_runs_as_65532_on_a_read_only_root() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "image").await;
    let dir = std::env::temp_dir().join(format!("image-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // Two builds, one digest; a tarball crane validates.
    let started = Instant::now();
    let first = build_image(&dir.join("a.tar"), &dir.join("oci-a"));
    let took = started.elapsed();
    let second = build_image(&dir.join("b.tar"), &dir.join("oci-b"));
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
    assert_eq!(first, second, "two builds give one digest");
    assert_eq!(
        std::fs::read(dir.join("a.tar")).unwrap(),
        std::fs::read(dir.join("b.tar")).unwrap(),
        "and byte-identical tarballs"
    );
    run_ok(Command::new("crane").args([
        "validate",
        "--tarball",
        dir.join("a.tar").to_str().unwrap(),
    ]));
    let size = std::fs::metadata(dir.join("a.tar")).unwrap().len();
    println!(
        "image {first}: {:.1} MiB tarball, assembled in {took:.1?} (the release binary built before)",
        f64::from(u32::try_from(size >> 10).unwrap()) / 1024.0
    );

    // The image the Dockerfile describes: user, entrypoint, command, files.
    let config = image_config(&dir.join("oci-a"));
    let (user, entrypoint, cmd, copies, workdir, env) = dockerfile();
    assert_eq!(config["config"]["User"], json!(user));
    assert_eq!(config["config"]["Entrypoint"], json!(entrypoint));
    assert_eq!(config["config"]["Cmd"], json!(cmd));
    assert_eq!(config["config"]["WorkingDir"], json!(workdir));
    assert_eq!(config["config"]["Env"], json!(env));
    let tarball = dir.join("a.tar");
    let manifest: Value = serde_json::from_str(&run_ok(
        Command::new("tar")
            .arg("-xOf")
            .arg(&tarball)
            .arg("manifest.json"),
    ))
    .unwrap();
    let layer = manifest[0]["Layers"][0].as_str().unwrap().to_string();
    let files = run_ok(Command::new("sh").arg("-c").arg(format!(
        "tar -xOf '{}' '{layer}' | tar -t",
        tarball.display()
    )));
    for copied in copies {
        assert!(
            files.contains(copied.trim_start_matches('/')),
            "{copied} in the image:\n{files}"
        );
    }
    for expected in [
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
        "etc/group",
    ] {
        assert!(
            files.contains(expected),
            "{expected} in the image:\n{files}"
        );
    }
    assert!(!files.contains("bin/sh"), "no shell:\n{files}");

    // Run: --version, then the operator against the control plane.
    let oci = dir.join("oci-a");
    let version_bundle = dir.join("bundle-version");
    bundle(
        &oci,
        &version_bundle,
        &["/usr/local/bin/imagemap", "--version"],
        &[],
        &[],
    );
    let id = format!("imagemap-version-{}", std::process::id());
    let _version = Container(id.clone());
    let printed = run_ok(Command::new("runc").args([
        "run",
        "--bundle",
        version_bundle.to_str().unwrap(),
        &id,
    ]));
    assert!(printed.starts_with("imagemap "), "{printed}");

    let kubeconfig = portable_kubeconfig(&dir, &ns);
    let port = free_port();
    let run_bundle = dir.join("bundle-run");
    let health = format!("--health-addr=127.0.0.1:{port}");
    bundle(
        &oci,
        &run_bundle,
        &[
            "/usr/local/bin/imagemap",
            "run",
            "--namespace",
            &ns,
            &health,
        ],
        &["KUBECONFIG=/etc/imagemap/kubeconfig".to_string()],
        &[(kubeconfig, "/etc/imagemap/kubeconfig")],
    );
    let id = format!("imagemap-run-{}", std::process::id());
    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let mut child = Killed(
        Command::new("runc")
            .args(["run", "--bundle", run_bundle.to_str().unwrap(), &id])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let _run = Container(id.clone());
    let started = Instant::now();
    let deadline = started + WAIT;
    while http_get(port, "/readyz").map(|r| r.0) != Some(200) {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the container exited:\n{}",
            std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "never ready:\n{}",
            std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "the image's operator ready {:.1?} after runc started it",
        started.elapsed()
    );
    let state = run_ok(Command::new("runc").args(["state", &id]));
    let pid = serde_json::from_str::<Value>(&state).unwrap()["pid"]
        .as_u64()
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid.split_whitespace().nth(1) == Some("65532"), "{uid}");
    let _ = std::fs::remove_dir_all(&dir);
}
