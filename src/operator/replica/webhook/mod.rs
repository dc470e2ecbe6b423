//! The admission webhook, served by every replica from what the replica side keeps: the
//! handler ([`handler`]: one AdmissionReview answered from memory, read by [`review`],
//! written back by [`answer`]), its TLS ([`tls`]; the leader's Secret followed by
//! [`secret_certificate`]), the server ([`server`], with the bytes in flight bounded by
//! [`bytes_in_flight`]) and the webhook configuration ([`configuration`]).

pub mod answer;
pub mod bytes_in_flight;
pub mod configuration;
pub mod handler;
pub mod review;
pub mod secret_certificate;
pub mod server;
pub mod tls;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Client;
use tokio::task::JoinHandle;

use crate::operator::acts_in::ActsIn;
use crate::operator::observe::health::Health;
use crate::operator::observe::metrics::Metrics;
use crate::operator::options::{Webhook, WebhookCertificate};
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::replica::digests::tag_asks::TagAsks;
use crate::operator::watch_toolkit::listed::Listed;
use configuration::Registered;
use handler::Admitter;
use server::Activity;
use tls::{CertDir, Certificates};

/// How long without a request shows that the API server no longer sends to a replica
/// that stops.
const QUIET: Duration = Duration::from_secs(2);
/// How long a stopping replica waits for the API server to register or delete its
/// configuration.
const API_WAIT: Duration = Duration::from_secs(5);

/// The webhook while it serves; [`Serving::stop`] ends it.
pub struct Serving {
    tasks: Vec<JoinHandle<()>>,
    /// Registering the configuration (with `--webhook-url`), and what it registered.
    registering: Option<JoinHandle<()>>,
    registered: Arc<Mutex<Option<Registered>>>,
    activity: Arc<Activity>,
    /// `--webhook-drain-seconds`.
    drain: Duration,
}

impl Serving {
    /// Drains, then stops serving: every answer from now on closes its connection, the
    /// configuration this process registered is deleted, and the webhook keeps answering
    /// until no request came for [`QUIET`] (the API server sends elsewhere: the replica is
    /// unready, or its configuration gone), at most for the drain period.
    pub async fn stop(self) {
        self.activity.drain();
        // A registration under way ends first (or is given up): none is left behind.
        if let Some(mut registering) = self.registering
            && tokio::time::timeout(API_WAIT, &mut registering)
                .await
                .is_err()
        {
            registering.abort();
        }
        let registered = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(registered) = registered {
            match tokio::time::timeout(API_WAIT, registered.remove()).await {
                Ok(Ok(())) => {
                    tracing::info!("deleted the webhook configuration this process registered");
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %crate::core::excerpt::excerpt(&e.to_string()), "could not delete the webhook configuration this process registered");
                }
                Err(_) => {
                    tracing::warn!(
                        "no answer deleting the webhook configuration this process registered"
                    );
                }
            }
        }
        while self.activity.idle() < QUIET && self.activity.draining_for() < self.drain {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for task in self.tasks {
            task.abort();
        }
    }
}

impl Serving {
    /// What starts its drain, at once: each answer then closes its connection.
    #[must_use]
    pub fn activity(&self) -> Arc<Activity> {
        Arc::clone(&self.activity)
    }
}

/// What the webhook answers from, and tells.
pub struct WebhookFeed {
    /// What admission answers from.
    pub sources: AdmissionSources,
    /// Marked once the rules and the leader's digests were first read.
    pub sources_loaded: [Listed; 2],
    /// Where the followed tags admitted without a digest are asked of the leader.
    pub asks: Arc<TagAsks>,
}

/// Starts the webhook of `webhook`, answering from `feed.sources` (and asking the leader
/// for the followed tags it admits without a digest through `feed.asks`): it listens at
/// once, answers once `feed.sources_loaded` (the rules, the leader's digests) and the
/// certificate to serve were read (the replica is ready then), and then — with
/// `--webhook-url` — registers its configuration, sent the pods of the namespaces the
/// operator acts in.
pub async fn start(
    client: &Client,
    webhook: &Webhook,
    acts_in: &ActsIn,
    feed: WebhookFeed,
    health: &Arc<Health>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Serving> {
    let WebhookFeed {
        sources,
        sources_loaded,
        asks,
    } = feed;
    health.admits();
    let mut tasks = Vec::new();
    // Marked once the certificate to serve (if any yet) was read.
    let certificate_read = Listed::default();
    let (certificates, local) =
        certificates(client, &webhook.certificate, &mut tasks, &certificate_read)?;
    let listener = tokio::net::TcpListener::bind(&webhook.addr)
        .await
        .map_err(|e| anyhow::anyhow!("--webhook-addr {}: {e}", webhook.addr))?;
    let own_user = own_user(client).await;
    let admitter = Admitter {
        sources,
        excluded: webhook.excluded.clone(),
        acts_in: acts_in.clone(),
        own_user,
        asks,
    };
    let [rules_loaded, digests_loaded] = sources_loaded;
    let loaded = [rules_loaded, digests_loaded, certificate_read];
    let health = Arc::clone(health);
    let acceptor = certificates.acceptor()?;
    let activity = Arc::new(Activity::default());
    let serving = Arc::clone(&activity);
    let serve_after = loaded.clone();
    tasks.push(tokio::spawn(async move {
        for listed in &serve_after {
            listed.wait().await;
        }
        health.set_admission_loaded();
        server::serve(listener, acceptor, admitter, metrics, serving).await;
    }));
    let registered = Arc::new(Mutex::new(None));
    let mut registering = None;
    if let Some((url, name, ca)) = local {
        let configuration =
            configuration::for_url(&name, &url, &ca, &webhook.excluded, acts_in.named());
        let (client, loaded, slot) = (client.clone(), loaded.clone(), Arc::clone(&registered));
        registering = Some(tokio::spawn(async move {
            // Registered once the server answers: what it answers from is loaded.
            for listed in &loaded {
                listed.wait().await;
            }
            match configuration::register(client, &configuration).await {
                Ok(r) => {
                    tracing::info!(%url, configuration = %name, "registered the webhook");
                    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
                }
                Err(e) => {
                    tracing::error!(error = %crate::core::excerpt::excerpt(&e.to_string()), configuration = %name, "could not register the webhook");
                }
            }
        }));
    }
    Ok(Serving {
        tasks,
        registering,
        registered,
        activity,
        drain: webhook.drain,
    })
}

/// A locally made certificate's URL, configuration name and CA (`--webhook-url`).
type Local = Option<(String, String, String)>;

/// The certificate the webhook serves, from where `certificate` says, with the tasks that
/// keep it current; `read` is marked once the certificate to serve (if any yet) was read.
fn certificates(
    client: &Client,
    certificate: &WebhookCertificate,
    tasks: &mut Vec<JoinHandle<()>>,
    read: &Listed,
) -> anyhow::Result<(Arc<Certificates>, Local)> {
    Ok(match certificate {
        WebhookCertificate::Secret { secret, .. } => {
            let certificates = Arc::new(Certificates::default());
            tasks.push(tokio::spawn(secret_certificate::follow(
                client.clone(),
                secret.clone(),
                Arc::clone(&certificates),
                read.clone(),
            )));
            (certificates, None)
        }
        WebhookCertificate::Local { url, configuration } => {
            let host = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(|h| h.trim_matches(['[', ']']).to_string()))
                .ok_or_else(|| anyhow::anyhow!("--webhook-url {url:?}: give https://HOST:PORT"))?;
            let made = tls::self_signed(&[host], SystemTime::now(), tls::VALIDITY)?;
            let certificates = Certificates::new(&made.cert_pem, &made.key_pem)?;
            read.mark();
            (
                certificates,
                Some((url.clone(), configuration.clone(), made.ca_pem)),
            )
        }
        WebhookCertificate::Dir(dir) => {
            let dir = CertDir(dir.clone());
            let files = dir
                .read()
                .map_err(|e| anyhow::anyhow!("--webhook-cert-dir: {e}"))?;
            let certificates = Certificates::new(&files.0, &files.1)
                .map_err(|e| anyhow::anyhow!("--webhook-cert-dir: {e}"))?;
            tasks.push(tokio::spawn(dir.follow(Arc::clone(&certificates), files)));
            read.mark();
            (certificates, None)
        }
    })
}

/// The user name the API server knows the operator by (a SelfSubjectReview, once at
/// start): the runner pods it creates for imagemap's VirtualMachines are resolved already.
/// Unknown, every pod is mapped, its own included.
async fn own_user(client: &Client) -> Option<String> {
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    let (params, review) = (
        kube::api::PostParams::default(),
        SelfSubjectReview::default(),
    );
    let asked = api.create(&params, &review);
    let Ok(answered) = tokio::time::timeout(std::time::Duration::from_secs(10), asked).await else {
        tracing::warn!(
            "no answer to a SelfSubjectReview within 10 s: the runner pods the operator creates are mapped again at admission"
        );
        return None;
    };
    match answered {
        Ok(review) => review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username),
        Err(e) => {
            tracing::warn!(error = %crate::core::excerpt::excerpt(&e.to_string()), "cannot learn the operator's user name: the runner pods it creates are mapped again at admission");
            None
        }
    }
}
