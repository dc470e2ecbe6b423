//! Every replica serves admission, against the real control plane: two replicas under
//! leader election (one leads, one stands by), serving one certificate (`--webhook-cert-dir`,
//! as cert-manager's Secret is mounted in each), answer alike; and behind a front that
//! drops a replica whose `/readyz` fails (as a Service does), a rolling restart of both while
//! 500 pods are created leaves every pod mapped and the API server never failing open.
//! Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
#![allow(clippy::too_many_lines)] // scenarios read top to bottom

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use support::tls_front::{Backend, TlsFront};
use support::vms::env;
use support::webhooks::{base64_of, pod};
use support::*;
use tokio::io::AsyncWriteExt;

/// A CA and a serving certificate for 127.0.0.1 in a directory, as cert-manager writes it.
struct Certs {
    dir: PathBuf,
    ca_pem: String,
}

fn certs(name: &str) -> Certs {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let dir = std::env::temp_dir().join(format!("imagemap-certs-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    Certs {
        dir,
        ca_pem: ca_cert.pem(),
    }
}

/// A replica's arguments: leader election on `lease`, the webhook on `port` with `certs`.
fn replica(namespace: &str, lease: &str, port: u16, certs: &Certs) -> Vec<String> {
    [
        "--namespace",
        namespace,
        "--leader-elect",
        "--lease-name",
        lease,
        "--lease-namespace",
        namespace,
        "--lease-duration-seconds",
        "4",
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-cert-dir",
        certs.dir.to_str().unwrap(),
        "--webhook-drain-seconds",
        "10",
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

async fn start(args: &[String]) -> OperatorProcess {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    OperatorProcess::start(&args).await
}

/// The AdmissionReview of creating `pod` in `namespace`.
fn review(namespace: &str, pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "9d4a4e6b-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "test"},
            "object": pod,
        },
    }))
    .unwrap()
}

/// POSTs `body` to the webhook on `port` over TLS, trusting `ca_pem`: the patched pod.
async fn admit(port: u16, ca_pem: &str, body: Vec<u8>, pod: &Value) -> Value {
    let tls = connect(port, ca_pem).await;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::post("/mutate-pods")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    let mut out = pod.clone();
    if let Some(patch) = answer["response"].get("patch") {
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch.as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut out, &patch).unwrap();
    }
    out
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn two_replicas_answer_alike() {
    let e = env("replicas-alike").await;
    e.add_mapping(
        "mirror",
        json!([
            {"match": {"repository": "busybox"}, "to": "mirror.io/busybox"},
            {"match": {"prefix": "ghcr.io/acme"}, "to": "mirror.io/acme"},
            {"match": {"regex": "^docker\\.io/library/(redis|memcached)(.*)$"}, "to": "mirror.io/cache/$1$2"},
        ]),
    )
    .await;
    let certs = certs(&e.ns);
    let lease = format!("lease-{}", e.ns);
    let (pa, pb) = (free_port(), free_port());
    let a = start(&replica(&e.ns, &lease, pa, &certs)).await;
    let b = start(&replica(&e.ns, &lease, pb, &certs)).await;
    let images = [
        "busybox:1.36",
        "ghcr.io/acme/app:v2",
        "redis:7",
        "memcached",
        "nginx",
    ];
    let mut mapped = 0;
    for i in 0..100 {
        let p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": e.ns},
            "spec": {
                "initContainers": [{"name": "init", "image": images[i % 5]}],
                "containers": [{"name": "app", "image": images[(i + 1) % 5]}],
            },
        });
        // Alternately through each replica; the other answers the same.
        let (first, second) = if i % 2 == 0 { (pa, pb) } else { (pb, pa) };
        let one = admit(first, &certs.ca_pem, review(&e.ns, &p), &p).await;
        let other = admit(second, &certs.ca_pem, review(&e.ns, &p), &p).await;
        assert_eq!(one, other, "pod {i}");
        if one != p {
            mapped += 1;
        }
    }
    assert_eq!(mapped, 100, "every pod has a container the rules map");
    for r in [&a, &b] {
        let mutated = r.metric("imagemap_admissions_total{result=\"mutated\"}");
        assert!((mutated - 100.0).abs() < 0.5, "{mutated}");
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_rolling_restart_behind_a_front_maps_every_pod_and_never_fails_open() {
    const PODS: usize = 500;
    const WEBHOOK: &str = "replicas.pods.imagemap.dev";
    let e = env("replicas-rolling").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    let certs = certs(&e.ns);
    let lease = format!("lease-{}", e.ns);
    let ports = [free_port(), free_port()];
    let args = [
        replica(&e.ns, &lease, ports[0], &certs),
        replica(&e.ns, &lease, ports[1], &certs),
    ];
    let mut replicas = [start(&args[0]).await, start(&args[1]).await];
    let front = TlsFront::start(
        (0..2)
            .map(|i| Backend {
                port: ports[i],
                health_port: replicas[i].health_port,
            })
            .collect(),
    )
    .await;
    front.wait_all_ready().await;
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(e.client.clone());
    let name = format!("front-{}", e.ns);
    let configuration: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": WEBHOOK,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}/mutate-pods", front.port),
                "caBundle": base64_of(&certs.ca_pem),
            },
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e.ns}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        }],
    }))
    .unwrap();
    configurations
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
    let _remove = Removed(name.clone());
    // The API server sends pods through the front before anything is counted.
    let deadline = Instant::now() + WAIT;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    while e
        .pods
        .create(&dry, &pod("probe", "busybox"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .containers[0]
        .image
        .as_deref()
        == Some("busybox")
    {
        assert!(Instant::now() < deadline, "never sent through the front");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failed_open_before = fail_open_count(WEBHOOK);

    // 500 pods, about 25 a second, while each replica is stopped and started again.
    let created = Arc::new(AtomicUsize::new(0));
    let creators: Vec<_> = (0..4)
        .map(|w| {
            let (pods, created) = (e.pods.clone(), Arc::clone(&created));
            tokio::spawn(async move {
                loop {
                    let i = created.fetch_add(1, Ordering::SeqCst);
                    if i >= PODS {
                        return;
                    }
                    pods.create(
                        &PostParams::default(),
                        &pod(&format!("p{i}-{w}"), "busybox"),
                    )
                    .await
                    .unwrap();
                    tokio::time::sleep(Duration::from_millis(160)).await;
                }
            })
        })
        .collect();
    for i in 0..2 {
        let pid = replicas[i].child.0.id().to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let stopping = Instant::now();
        wait_until(Duration::from_secs(30), "the replica stops", || {
            !replicas[i].running()
        })
        .await;
        println!("replica {i} stopped {:?} after SIGTERM", stopping.elapsed());
        assert!(
            created.load(Ordering::SeqCst) < PODS,
            "pods are still being created while replica {i} restarts"
        );
        replicas[i] = start(&args[i]).await;
        front.replace(
            i,
            Backend {
                port: ports[i],
                health_port: replicas[i].health_port,
            },
        );
        front.wait_all_ready().await;
    }
    for c in creators {
        c.await.unwrap();
    }
    let pods = e.pods.list(&ListParams::default()).await.unwrap().items;
    let unmapped: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            p.spec.as_ref().unwrap().containers[0].image.as_deref() != Some("mirror.io/busybox")
        })
        .collect();
    assert_eq!(pods.len(), PODS);
    assert!(unmapped.is_empty(), "{} pods unmapped", unmapped.len());
    let failed_open = fail_open_count(WEBHOOK) - failed_open_before;
    assert!(
        failed_open.abs() < f64::EPSILON,
        "{failed_open} admissions failed open"
    );
    println!(
        "connections through the front, per replica: {:?}",
        front.sent()
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn followers_pin_to_the_digests_the_leader_verified_and_ask_no_registry() {
    let e = env("replicas-digests").await;
    let support::vms::FollowedApp {
        registry,
        host,
        digest: first,
        tag,
    } = e.follow_app().await;
    // A VM follows the tag: the leader checks it.
    e.add_vm("vm", false, "Always", "example.org/app").await;
    let certs = certs(&e.ns);
    let lease = format!("lease-{}", e.ns);
    let extra = [
        "--allowed-registries",
        &host,
        "--insecure-registries",
        &host,
        "--tag-poll-interval",
        "500ms",
    ]
    .map(String::from);
    let (pa, pb) = (free_port(), free_port());
    let mut args_a = replica(&e.ns, &lease, pa, &certs);
    args_a.extend(extra.iter().cloned());
    let mut args_b = replica(&e.ns, &lease, pb, &certs);
    args_b.extend(extra.iter().cloned());
    let replicas = [(pa, start(&args_a).await), (pb, start(&args_b).await)];
    // The leader is the one that checks the tag.
    let mut leading = None;
    wait_until(WAIT, "one replica checks the tag", || {
        leading = replicas
            .iter()
            .position(|(_, r)| r.metric("imagemap_tag_checks_total") > 0.0);
        leading.is_some()
    })
    .await;
    let leading = leading.unwrap();
    let (leader, (follower_port, follower)) = (&replicas[leading].1, &replicas[1 - leading]);
    let p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": e.ns},
        "spec": {"containers": [{"name": "app", "image": "example.org/app"}]},
    });
    // The follower pins to what the leader verified, and follows it when the tag moves.
    for build in 1..=2 {
        let digest = if build == 1 {
            first.clone()
        } else {
            registry.push("app", "dev", "build 2")
        };
        let want = format!("{tag}@{digest}");
        let deadline = Instant::now() + WAIT;
        loop {
            let admitted = admit(*follower_port, &certs.ca_pem, review(&e.ns, &p), &p).await;
            if admitted["spec"]["containers"][0]["image"] == want.as_str() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the follower never pinned {want}: {admitted}\npublished: {}\nleader:\n{}\nfollower:\n{}",
                kubectl(&[
                    "get",
                    "configmap",
                    "imagemap-digests",
                    "-n",
                    &e.ns,
                    "-o",
                    "yaml"
                ])
                .stdout
                .escape_ascii(),
                leader.logs(),
                follower.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Only the leader asks the registry.
    assert!(leader.metric("imagemap_tag_checks_total") >= 2.0);
    assert!(
        follower.metric("imagemap_tag_checks_total").abs() < f64::EPSILON,
        "a follower asked the registry"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_tag_only_a_replicas_pod_follows_is_asked_of_the_leader_and_later_pods_are_pinned() {
    let e = env("replicas-asks").await;
    let support::vms::FollowedApp {
        registry: _registry,
        host,
        digest,
        tag,
    } = e.follow_app().await;
    // No VirtualMachine follows the tag, and no pod is counted: only an admission asks.
    let certs = certs(&e.ns);
    let lease = format!("lease-{}", e.ns);
    let extra = [
        "--allowed-registries",
        &host,
        "--insecure-registries",
        &host,
    ]
    .map(String::from);
    let (pa, pb) = (free_port(), free_port());
    let mut args_a = replica(&e.ns, &lease, pa, &certs);
    args_a.extend(extra.iter().cloned());
    let mut args_b = replica(&e.ns, &lease, pb, &certs);
    args_b.extend(extra.iter().cloned());
    let replicas = [start(&args_a).await, start(&args_b).await];
    let p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": e.ns},
        "spec": {"containers": [{"name": "app", "image": "example.org/app"}]},
    });
    // Replica b admits the pod unpinned (it holds no digest), and asks the leader — b or
    // a — through its key of the ConfigMap beside the Lease.
    let first = admit(pb, &certs.ca_pem, review(&e.ns, &p), &p).await;
    assert_eq!(first["spec"]["containers"][0]["image"], tag.as_str());
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(e.client.clone(), &e.ns);
    let pinned = format!("{tag}@{digest}");
    for port in [pa, pb] {
        let deadline = Instant::now() + WAIT;
        loop {
            let later = admit(port, &certs.ca_pem, review(&e.ns, &p), &p).await;
            if later["spec"]["containers"][0]["image"] == pinned.as_str() {
                break;
            }
            let asks = configmaps.get_opt("imagemap-asked-tags").await.unwrap();
            assert!(
                Instant::now() < deadline,
                "later pods never pinned to {pinned}: {later}\nasks: {asks:?}\na:\n{}\nb:\n{}",
                replicas[0].logs(),
                replicas[1].logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let asks = configmaps.get("imagemap-asked-tags").await.unwrap();
    assert!(
        asks.data
            .unwrap_or_default()
            .values()
            .any(|v| v.contains(&tag)),
        "the ask is written under a replica's key"
    );
    // One replica asked the registry: the leader.
    let checks: Vec<f64> = replicas
        .iter()
        .map(|r| r.metric("imagemap_tag_checks_total"))
        .collect();
    assert_eq!(checks.iter().filter(|c| **c > 0.0).count(), 1, "{checks:?}");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn stalled_senders_hold_up_no_admission() {
    let e = env("replicas-stalled").await;
    e.add_mapping(
        "mirror",
        json!([{"match": {"repository": "busybox"}, "to": "mirror.io/busybox"}]),
    )
    .await;
    let certs = certs(&e.ns);
    let port = free_port();
    let _replica = start(&replica(&e.ns, &format!("lease-{}", e.ns), port, &certs)).await;
    // Twenty clients announce 6 MiB reviews, more than the bytes in flight allow, and
    // send nothing more.
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut tls = connect(port, &certs.ca_pem).await;
        tls.write_all(
            format!(
                "POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
                6 << 20
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        stalled.push(tls);
    }
    // A review is still answered, and well before the API server's 5 s.
    let started = Instant::now();
    let p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": e.ns},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    });
    let admitted = admit(port, &certs.ca_pem, review(&e.ns, &p), &p).await;
    let took = started.elapsed();
    assert_eq!(
        admitted["spec"]["containers"][0]["image"],
        "mirror.io/busybox"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    println!("beside 20 stalled 6 MiB senders, a review was answered in {took:?}");
}

/// A TLS connection to the webhook on `port`, trusting `ca_pem`.
async fn connect(
    port: u16,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

/// The API server's count of calls to `webhook` that failed open.
fn fail_open_count(webhook: &str) -> f64 {
    let metrics = kubectl_ok(&["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_admission_webhook_fail_open_count")
                && l.contains(&format!("name=\"{webhook}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Deletes a webhook configuration when dropped.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            &self.0,
            "--ignore-not-found",
        ]);
    }
}
