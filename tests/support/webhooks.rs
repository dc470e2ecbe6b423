//! Admission webhooks in the tests: imagemap's own, as `imagemap run --webhook-url` serves
//! and registers it for one namespace, and a second webhook of the test's own that adds a
//! container to every pod (as a sidecar injector does), so the API server calls imagemap
//! again after it.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use super::{OperatorProcess, WAIT, free_port, kubectl};

/// `imagemap run` serving its webhook on a port of its own and registering it, for pods of
/// `namespace` only, under a configuration no other test uses (deleted when dropped, also
/// after the process was killed).
pub struct WebhookOperator {
    pub process: OperatorProcess,
    pub port: u16,
    pub configuration: String,
}

impl WebhookOperator {
    /// Starts it with `extra` arguments and waits until the API server sends it pods: a
    /// pod created as a dry run in `namespace` comes back with `probe` rewritten by the
    /// rules already in force (so the caller creates a rule for `probe` first).
    pub async fn start(namespace: &str, probe: &str, extra: &[&str]) -> WebhookOperator {
        let mut args = vec!["--namespace", namespace];
        args.extend_from_slice(extra);
        let started = Self::launch(namespace, &args).await;
        started.wait_sent(namespace, probe).await;
        started
    }

    /// Starts it with `args`, its configuration named after `name`; it is not waited for.
    pub async fn launch(name: &str, args: &[&str]) -> WebhookOperator {
        let port = free_port();
        Self::serve(name, args, port, &format!("https://127.0.0.1:{port}")).await
    }

    /// As [`Self::launch`], but registering its webhook at `url` (where it does not listen).
    pub async fn launch_at(name: &str, args: &[&str], url: &str) -> WebhookOperator {
        Self::serve(name, args, free_port(), url).await
    }

    async fn serve(name: &str, args: &[&str], port: u16, url: &str) -> WebhookOperator {
        let configuration = format!("imagemap-{name}");
        let addr = format!("127.0.0.1:{port}");
        let mut all = vec![
            "--webhook-addr",
            &addr,
            "--webhook-url",
            url,
            "--webhook-configuration",
            &configuration,
        ];
        all.extend_from_slice(args);
        WebhookOperator {
            process: OperatorProcess::start(&all).await,
            port,
            configuration,
        }
    }

    /// Waits until a pod created (as a dry run) in `namespace` with `image` comes back with
    /// another image: the API server calls the webhook.
    pub async fn wait_sent(&self, namespace: &str, image: &str) {
        let pods: Api<Pod> = Api::namespaced(super::client().await, namespace);
        let deadline = std::time::Instant::now() + WAIT;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        loop {
            let created = pods.create(&dry_run, &pod("probe", image)).await.unwrap();
            let now = created.spec.unwrap().containers[0].image.clone();
            if now.as_deref() != Some(image) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the API server never sent pods to the webhook:\n{}",
                self.process.logs()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

impl Drop for WebhookOperator {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            &self.configuration,
            "--ignore-not-found",
        ]);
    }
}

/// A pod with one container `app` running `image`.
pub fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }))
    .unwrap()
}

/// A webhook of the test's own that adds `container` to every pod of a namespace that does
/// not have it yet, with `reinvocationPolicy: IfNeeded` (removed when dropped).
pub struct InjectingWebhook {
    configuration: String,
    task: tokio::task::JoinHandle<()>,
}

impl InjectingWebhook {
    pub async fn start(namespace: &str, container: Value) -> InjectingWebhook {
        let name = container["name"].as_str().unwrap().to_string();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let (cert_pem, key_pem) = (made.cert.pem(), made.signing_key.serialize_pem());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let container = Arc::new(container);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, container) = (acceptor.clone(), Arc::clone(&container));
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let container = Arc::clone(&container);
                        async move { Ok::<_, std::convert::Infallible>(inject(req, &container).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let configuration = format!("zz-inject-{namespace}");
        let api: Api<MutatingWebhookConfiguration> = Api::all(super::client().await);
        let object: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": configuration},
            "webhooks": [{
                "name": "inject.test.imagemap.dev",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}/inject"),
                    "caBundle": base64_of(&cert_pem),
                },
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            }],
        }))
        .unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
        let injecting = InjectingWebhook {
            configuration,
            task,
        };
        // The API server calls it once its configuration is in force: a pod created as a
        // dry run comes back with the container.
        let pods: Api<Pod> = Api::namespaced(super::client().await, namespace);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let created = pods
                .create(&dry_run, &pod("probe", "busybox"))
                .await
                .unwrap();
            if created
                .spec
                .unwrap()
                .containers
                .iter()
                .any(|c| c.name == name)
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the injecting webhook is never called"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        injecting
    }
}

impl Drop for InjectingWebhook {
    fn drop(&mut self) {
        self.task.abort();
        let _ = kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            &self.configuration,
            "--ignore-not-found",
        ]);
    }
}

/// `text`, base64-encoded (a configuration's `caBundle`).
pub fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The answer to one review: `container` added to a pod that lacks it.
async fn inject(req: Request<hyper::body::Incoming>, container: &Value) -> Response<Full<Bytes>> {
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&body).unwrap();
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    let mut response = AdmissionResponse::from(&request);
    let name = container["name"].as_str().unwrap();
    let containers = request
        .object
        .as_ref()
        .and_then(|o| o.data["spec"]["containers"].as_array().cloned())
        .unwrap_or_default();
    if !containers.iter().any(|c| c["name"] == name) {
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/containers/-", "value": container}
        ]))
        .unwrap();
        response = response.with_patch(patch).unwrap();
    }
    Response::new(Full::new(Bytes::from(
        serde_json::to_vec(&response.into_review()).unwrap(),
    )))
}
