//! Without its CRDs the operator stays up and not ready, and becomes ready once they are
//! installed. (Its own test binary: it removes a CRD, which the other binaries need.)

#![allow(clippy::unwrap_used)] // test code

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams};
use kube::runtime::wait::conditions;
use support::*;

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_missing_crd_keeps_the_operator_not_ready_until_it_is_installed() {
    let client = client().await;
    install_crds(&client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "clusterimagemappings.imagemap.dev";
    let uid = crds.get(name).await.unwrap().metadata.uid.unwrap();
    crds.delete(name, &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(
        WAIT,
        kube::runtime::wait::await_condition(crds.clone(), name, conditions::is_deleted(&uid)),
    )
    .await
    .expect("the CRD is deleted in time")
    .unwrap();

    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args([
            "run",
            "--namespace",
            "crd-missing",
            &format!("--health-addr=127.0.0.1:{port}"),
        ])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while http_get(port, "/readyz").is_none() {
        assert!(
            Instant::now() < deadline,
            "the probe endpoint never came up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // For a while, with the CRD missing: alive, not ready, still running.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let (code, body) = http_get(port, "/readyz").unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("CRDs"), "{body}");
        assert_eq!(http_get(port, "/livez").unwrap().0, 200);
        assert!(child.try_wait().unwrap().is_none(), "the operator exited");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kubectl_ok(&["apply", "-f", "crds/"]);
    wait_for(crds, name, conditions::is_crd_established()).await;
    let deadline = Instant::now() + WAIT;
    while http_get(port, "/readyz").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "not ready after the CRD came back"
        );
        assert!(child.try_wait().unwrap().is_none(), "the operator exited");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    child.kill().unwrap();
    let _ = child.wait();
}
