//! README's Quick start as a user runs it, on the test control plane: the chart installs
//! the image the first line builds, and the commands after `helm install`, run as written
//! (bash, in a namespace of their own) with the operator started from its binary in place
//! of the chart's pod (kwok nodes run no containers), print what README says they print.
//! Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::process::Command;

use support::webhooks::WebhookOperator;
use support::*;

/// The Quick start's commands and the output README shows for the last one.
fn quick_start() -> (String, String) {
    let readme = std::fs::read_to_string(format!("{REPO}/README.md")).unwrap();
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .expect("README.md has a `## Quick start` section");
    let mut blocks = section.split("\n```").skip(1).step_by(2);
    let commands = blocks.next().expect("a block of commands");
    let output = blocks.next().expect("the output block after it");
    let body = |block: &str| block.split_once('\n').unwrap().1.to_string();
    assert!(commands.starts_with("sh\n"), "the commands block is `sh`");
    (body(commands), body(output))
}

/// Runs `script` with bash as a user's shell would, `KUBECONFIG` set; its stdout, or the
/// test fails with what it printed.
fn bash(script: &str, kubeconfig: &std::path::Path) -> String {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("KUBECONFIG", kubeconfig)
        .current_dir(REPO)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "README's Quick start failed at:\n{script}\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_readme_quick_start_maps_the_pod_it_runs() {
    let (commands, expected) = quick_start();
    let (build, after) = commands
        .split_once("\nhelm install ")
        .expect("the Quick start installs the chart with `helm install`");
    let (install, rest) = after.split_once('\n').unwrap();

    // The chart runs the image the first line builds and imports.
    assert!(
        build.starts_with("scripts/image /tmp/imagemap.tar"),
        "{build}"
    );
    let image = format!(
        "ghcr.io/imagemap-dev/imagemap:{}",
        env!("CARGO_PKG_VERSION")
    );
    let script = std::fs::read_to_string(format!("{REPO}/scripts/image")).unwrap();
    assert!(
        script.contains("NAME=\"ghcr.io/imagemap-dev/imagemap:$("),
        "scripts/image's default name"
    );
    let args: Vec<&str> = install.split_whitespace().collect();
    let rendered = Command::new("helm")
        .arg("template")
        .args(&args)
        .current_dir(REPO)
        .output()
        .expect("helm (built by scripts/control-plane build, on PATH in scripts/test)");
    let manifests = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        rendered.status.success(),
        "helm template {install}: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    assert!(
        manifests.contains(&format!("image: {image}")),
        "{manifests}"
    );

    // The rest, in a namespace of its own: the kubeconfig's context names it, as a user's
    // current namespace; the operator acts there, as the chart's would everywhere.
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "quickstart").await;
    let kubeconfig = std::env::temp_dir().join(format!("imagemap-quickstart-{ns}"));
    std::fs::write(&kubeconfig, kubectl_ok(&["config", "view", "--raw"])).unwrap();
    bash(
        &format!("kubectl config set-context --current --namespace {ns}"),
        &kubeconfig,
    );
    let operator = WebhookOperator::launch(&ns, &["--namespace", &ns]).await;

    let (setup, pod) = rest
        .split_once("\nkubectl run ")
        .expect("the Quick start runs a pod with `kubectl run`");
    let pod = format!("kubectl run {pod}");
    let (run, last) = pod.trim_end().rsplit_once('\n').unwrap();
    let requested = run
        .split_whitespace()
        .find_map(|arg| arg.strip_prefix("--image="))
        .expect("kubectl run --image=IMAGE");
    bash(setup, &kubeconfig);
    // The chart's install waits for a ready operator; here, for the API server to call it
    // with the mapping in force.
    operator.wait_sent(&ns, requested).await;
    bash(run, &kubeconfig);
    assert_eq!(
        bash(last, &kubeconfig).trim_end(),
        expected.trim_end(),
        "README's Quick start output"
    );
    let _ = std::fs::remove_file(&kubeconfig);
}
