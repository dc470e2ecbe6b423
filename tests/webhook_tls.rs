//! The webhook's TLS without a person, on the real control plane: the install's empty
//! Secret and configuration without `caBundle` (`deploy/webhook.yaml`), two replicas under
//! leader election behind a front (as a Service), and pods created all along through a
//! configuration that fails closed — so any admission a replica could not answer fails a
//! pod. The serving certificate is renewed, and separately the CA is rotated, while every
//! replica goes on serving what the Secret holds. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as the certificates move.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use imagemap::core::api::ImageMapping;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::served_certificate::{ders, served_certificate};
use support::tls_front::{Backend, TlsFront};
use support::webhooks::pod;
use support::*;

const SECRET: &str = "imagemap-webhook-tls";

/// deploy/webhook.yaml's object of `kind`.
fn shipped(kind: &str) -> Value {
    let text = std::fs::read_to_string(format!("{REPO}/deploy/webhook.yaml")).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|v: &Value| v["kind"] == kind)
        .unwrap()
}

/// What the Secret holds under `key`.
fn text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| String::from_utf8(v.0.clone()).unwrap())
        .unwrap_or_default()
}

/// The webhook as installed in a namespace of its own, for the pods of `ns`: the shipped
/// Secret and configuration, the configuration reaching the replicas through the front at
/// `https://127.0.0.1:PORT` (no Service routes here) and failing closed.
struct Bed {
    admin: Client,
    ns: String,
    secrets: Api<Secret>,
    configuration: String,
    replicas: Vec<OperatorProcess>,
    ports: Vec<u16>,
    _front: TlsFront,
    /// Pods created (as dry runs), every one mapped.
    created: usize,
}

impl Bed {
    /// Starts it with the CAs valid `ca_seconds` and serving certificates `cert_seconds`, and
    /// waits until the leader filled the Secret.
    async fn start(name: &str, ca_seconds: u64, cert_seconds: u64) -> Bed {
        let admin = client().await;
        install_crds(&admin).await;
        let ns = fresh_namespace(&admin, name).await;
        let system = fresh_namespace(&admin, &format!("{name}-system")).await;
        let mapping: ImageMapping = serde_json::from_value(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
            "metadata": {"name": "mirror"},
            "spec": {"rules": [{"match": {"repository": "nginx"}, "to": "mirror.io/nginx"}]}
        }))
        .unwrap();
        Api::<ImageMapping>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &mapping)
            .await
            .unwrap();
        let mut secret = shipped("Secret");
        secret["metadata"]["namespace"] = json!(system);
        let secret: Secret = serde_json::from_value(secret).unwrap();
        assert!(secret.data.is_none(), "the install ships the Secret empty");
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), &system);
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let configuration = format!("imagemap-{ns}");
        let (ca_validity, cert_validity) = (ca_seconds.to_string(), cert_seconds.to_string());
        let mut replicas = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..2 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let args = [
                "--namespace",
                &ns,
                "--leader-elect",
                "--lease-namespace",
                &system,
                "--webhook-addr",
                &addr,
                "--webhook-secret",
                SECRET,
                "--webhook-configuration",
                &configuration,
                "--webhook-ca-validity-seconds",
                &ca_validity,
                "--webhook-cert-validity-seconds",
                &cert_validity,
                "--webhook-drain-seconds",
                "0",
            ];
            replicas.push(OperatorProcess::start_in(&system, &args).await);
            ports.push(port);
        }
        let backends = replicas
            .iter()
            .zip(&ports)
            .map(|(r, &port)| Backend {
                port,
                health_port: r.health_port,
            })
            .collect();
        let front = TlsFront::start(backends).await;
        front.wait_all_ready().await;
        let mut object = shipped("MutatingWebhookConfiguration");
        object["metadata"]["name"] = json!(configuration);
        let webhook = &mut object["webhooks"][0];
        assert!(webhook["clientConfig"].get("caBundle").is_none());
        webhook["clientConfig"] =
            json!({"url": format!("https://127.0.0.1:{}/mutate-pods", front.port)});
        webhook["failurePolicy"] = json!("Fail");
        webhook["namespaceSelector"] = json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}]});
        let object: MutatingWebhookConfiguration = serde_json::from_value(object).unwrap();
        Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let bed = Bed {
            admin,
            ns,
            secrets,
            configuration,
            replicas,
            ports,
            _front: front,
            created: 0,
        };
        let secret = wait_for(bed.secrets.clone(), SECRET, |s: Option<&Secret>| {
            s.is_some_and(|s| !text(s, "tls.crt").is_empty())
        })
        .await;
        // The keeper publishes the CA after writing the Secret: pods go through the webhook
        // (failing closed) once the configuration trusts it.
        bed.wait_published(&ders(&text(&secret, "ca.crt"))).await;
        bed
    }

    async fn secret(&self) -> Secret {
        self.secrets.get(SECRET).await.unwrap()
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(OperatorProcess::logs)
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// Creates a pod (a dry run) through the webhook: with the configuration failing
    /// closed, it is created only when a replica answered, and it must come back mapped.
    async fn create_pod(&mut self) {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let created = match pods.create(&dry_run, &pod("app", "nginx:1.27")).await {
            Ok(created) => created,
            Err(e) => panic!("pod {} not admitted: {e}\n{}", self.created, self.logs()),
        };
        let image = created.spec.unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("mirror.io/nginx:1.27"));
        self.created += 1;
    }

    /// Whether every replica serves `certificate` to a client trusting only `trusted`.
    async fn all_serve(&self, certificate: &[u8], trusted: &[Vec<u8>]) -> bool {
        for &port in &self.ports {
            if served_certificate(port, trusted).await.as_deref() != Ok(certificate) {
                return false;
            }
        }
        true
    }

    fn configurations(&self) -> Api<MutatingWebhookConfiguration> {
        Api::all(self.admin.clone())
    }

    /// The configuration's `caBundle` (every webhook's alike).
    async fn published(&self) -> String {
        let configuration = self
            .configurations()
            .get(&self.configuration)
            .await
            .unwrap();
        bundle(&configuration)
    }

    /// Waits until the configuration's `caBundle` holds exactly `cas`: the keeper writes
    /// the Secret first and publishes what it holds next, so the configuration may lag.
    async fn wait_published(&self, cas: &[Vec<u8>]) {
        wait_for(
            self.configurations(),
            &self.configuration,
            |c: Option<&MutatingWebhookConfiguration>| c.is_some_and(|c| ders(&bundle(c)) == cas),
        )
        .await;
    }
}

/// The `caBundle` every webhook of `configuration` has alike.
fn bundle(configuration: &MutatingWebhookConfiguration) -> String {
    let bundles: BTreeSet<Vec<u8>> = configuration
        .webhooks
        .iter()
        .flatten()
        .map(|w| {
            w.client_config
                .ca_bundle
                .clone()
                .map(|b| b.0)
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(bundles.len(), 1);
    String::from_utf8(bundles.into_iter().next().unwrap()).unwrap()
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            &self.configuration,
            "--ignore-not-found",
        ]);
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_serving_certificate_is_renewed_with_no_failed_admission() {
    // Serving certificates of 30 s, renewed after 20 s; a CA of an hour.
    let mut bed = Bed::start("tls-serving", 3600, 30).await;
    let ca = text(&bed.secret().await, "ca.crt");
    assert_eq!(ders(&ca).len(), 1);
    // Every serving certificate the Secret held, and whether both replicas served it.
    let mut certificates: Vec<Vec<u8>> = Vec::new();
    let mut served: Vec<bool> = Vec::new();
    let started = Instant::now();
    while served.iter().filter(|s| **s).count() < 3 {
        assert!(
            started.elapsed() < Duration::from_mins(2),
            "two renewals, each served by both replicas: not within 120 s ({served:?})\n{}",
            bed.logs()
        );
        bed.create_pod().await;
        let secret = bed.secret().await;
        assert_eq!(text(&secret, "ca.crt"), ca, "the CA stays");
        let now = ders(&text(&secret, "tls.crt")).remove(0);
        if certificates.last() != Some(&now) {
            certificates.push(now.clone());
            served.push(false);
        }
        if bed.all_serve(&now, &ders(&bed.published().await)).await {
            *served.last_mut().unwrap() = true;
        }
    }
    assert_eq!(bed.published().await, ca);
    println!(
        "serving certificate renewed {} times in {:.1} s, each served by both replicas; {} pods admitted through a configuration failing closed, none failed",
        certificates.len() - 1,
        started.elapsed().as_secs_f64(),
        bed.created
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_ca_is_rotated_with_both_trusted_and_no_failed_admission() {
    // A CA of 60 s, rotated after 40 s; serving certificates as long as their CA.
    let mut bed = Bed::start("tls-ca", 60, 3600).await;
    let old = ders(&text(&bed.secret().await, "ca.crt"));
    assert_eq!(old.len(), 1);
    let old = old[0].clone();
    // What was seen, in order.
    let mut both_trusted_at = None;
    let mut new_served_at = None;
    let mut old_dropped_at = None;
    let mut new = None;
    let started = Instant::now();
    while old_dropped_at.is_none() || new_served_at.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "the CA rotated, served and the old one dropped: not within 150 s\n{}",
            bed.logs()
        );
        bed.create_pod().await;
        let secret = bed.secret().await;
        let bundle = ders(&text(&secret, "ca.crt"));
        let serving = ders(&text(&secret, "tls.crt")).remove(0);
        let at = started.elapsed().as_secs_f64();
        match bundle.as_slice() {
            [only] if *only == old => {}
            [next, previous] if *previous == old => {
                new.get_or_insert_with(|| next.clone());
                both_trusted_at.get_or_insert(at);
            }
            [only] if Some(only) == new.as_ref() => {
                assert!(
                    new_served_at.is_some(),
                    "the old CA left before the new one served"
                );
                old_dropped_at.get_or_insert(at);
            }
            other => panic!("unexpected CA bundle of {} certificates", other.len()),
        }
        if let Some(new) = &new
            && new_served_at.is_none()
            && bed.all_serve(&serving, std::slice::from_ref(new)).await
        {
            // Served from the new CA only once the configuration trusts it.
            let published = ders(&bed.published().await);
            assert!(
                published.contains(new),
                "served before the configuration trusted it"
            );
            new_served_at = Some(at);
        }
    }
    let new = new.unwrap();
    assert_ne!(new, old);
    bed.wait_published(std::slice::from_ref(&new)).await;
    println!(
        "CA rotated: both trusted at {:.1} s, the new one served by both replicas at {:.1} s, the old one dropped at {:.1} s; {} pods admitted through a configuration failing closed, none failed",
        both_trusted_at.unwrap(),
        new_served_at.unwrap(),
        old_dropped_at.unwrap(),
        bed.created
    );
}
