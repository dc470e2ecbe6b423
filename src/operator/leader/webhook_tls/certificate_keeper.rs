//! The leader's keeper of the webhook's certificates: it watches the webhook's Secret and
//! MutatingWebhookConfiguration by name and takes the next step `webhook_certificate::plan`
//! decides — fill the Secret, renew, rotate the CA, set `caBundle` — one write at a time,
//! each conditional on the version it was decided from. It never creates either object (the
//! install ships them, so an uninstall or rollback leaves no webhook behind); while one is
//! absent it waits. It writes the Secret's data and only `webhooks[*].clientConfig.caBundle`,
//! each under a field manager of its own (`writes::certificate_writes`).

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::core::webhook_certificate::hosts::hosts;
use crate::core::webhook_certificate::plan::{self, Lifetimes, Next, Stored, Write};
use crate::core::webhook_certificate::{CA_BUNDLE, CA_KEY, CERT, KEY};
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;
use crate::operator::writes::certificate_writes::{publish_ca_bundle, write_secret};

/// How long after a failed write the keeper looks again, at first and at most.
const RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_mins(5));

/// What the keeper writes with, and where.
pub struct CertificateKeeper {
    /// The leader's (fenced) client.
    pub client: Client,
    pub secret: NamespacedName,
    pub configuration: String,
    pub lifetimes: Lifetimes,
}

/// What the Secret holds.
fn stored(secret: &Secret) -> Stored<'_> {
    let get = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| std::str::from_utf8(&v.0).ok())
            .unwrap_or_default()
    };
    Stored {
        ca_bundle: get(CA_BUNDLE),
        ca_key: get(CA_KEY),
        cert: get(CERT),
        key: get(KEY),
    }
}

/// Each webhook's `caBundle`.
fn published(configuration: &MutatingWebhookConfiguration) -> Vec<&[u8]> {
    configuration
        .webhooks
        .iter()
        .flatten()
        .map(|w| w.client_config.ca_bundle.as_ref().map_or(&[][..], |b| &b.0))
        .collect()
}

impl CertificateKeeper {
    /// Takes the next step for `secret` and `configuration`; when nothing is to be done,
    /// when to look again.
    async fn step(
        &self,
        secret: &Secret,
        configuration: &MutatingWebhookConfiguration,
    ) -> Result<Option<SystemTime>, String> {
        let (stored, hosts, now) = (stored(secret), hosts(configuration), SystemTime::now());
        let next = plan::next(&stored, &published(configuration), &hosts, now);
        let write =
            plan::write(next, &stored, &hosts, now, self.lifetimes).map_err(|e| e.to_string())?;
        let written = match write {
            Write::Secret(data) => write_secret(&self.client, &self.secret, secret, &data).await,
            Write::CaBundle => {
                publish_ca_bundle(
                    &self.client,
                    &self.configuration,
                    configuration,
                    stored.ca_bundle,
                )
                .await
            }
            Write::Nothing => {
                return Ok(match next {
                    Next::Idle { until } => Some(until),
                    _ => None,
                });
            }
        };
        written.map_err(|e| excerpt(&e.to_string()))?;
        tracing::info!(secret = %self.secret, configuration = %self.configuration, step = ?next, "kept the webhook's certificates");
        Ok(None)
    }
}

/// Keeps the webhook's certificates until the future is dropped.
pub async fn run(keeper: CertificateKeeper) {
    let secrets: Api<Secret> = Api::namespaced(keeper.client.clone(), &keeper.secret.namespace);
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(keeper.client.clone());
    let mut secret_events = watcher::watch_object(secrets, &keeper.secret.name)
        .backoff(WatchBackoff::default())
        .boxed();
    let mut configuration_events = watcher::watch_object(configurations, &keeper.configuration)
        .backoff(WatchBackoff::default())
        .boxed();
    // `None`: not seen yet; `Some(None)`: absent.
    let mut secret: Option<Option<Secret>> = None;
    let mut configuration: Option<Option<MutatingWebhookConfiguration>> = None;
    let mut look_again: Option<tokio::time::Instant> = None;
    let mut retry = RETRY.0;
    let mut absent_said = false;
    loop {
        let wait = look_again.map(tokio::time::sleep_until);
        tokio::select! {
            Some(event) = secret_events.next() => match event {
                Ok(s) => secret = Some(s),
                Err(e) => {
                    // Nothing seen changed: what is due stays due, the backoff stays.
                    tracing::debug!(error = %excerpt(&e.to_string()), "watching the webhook's Secret");
                    continue;
                }
            },
            Some(event) = configuration_events.next() => match event {
                Ok(c) => configuration = Some(c),
                Err(e) => {
                    tracing::debug!(error = %excerpt(&e.to_string()), "watching the webhook configuration");
                    continue;
                }
            },
            () = async { if let Some(wait) = wait { wait.await } else { std::future::pending().await } } => {}
        }
        look_again = None;
        let (Some(secret), Some(configuration)) = (&secret, &configuration) else {
            continue;
        };
        let (Some(secret), Some(configuration)) = (secret, configuration) else {
            if !std::mem::replace(&mut absent_said, true) {
                tracing::warn!(secret = %keeper.secret, configuration = %keeper.configuration, "the webhook's Secret or configuration does not exist: no certificate is kept until both do (the install ships them)");
            }
            continue;
        };
        absent_said = false;
        match keeper.step(secret, configuration).await {
            Ok(until) => {
                retry = RETRY.0;
                look_again = until.map(|until| {
                    let wait = until.duration_since(SystemTime::now()).unwrap_or_default();
                    tokio::time::Instant::now() + wait + Duration::from_secs(1)
                });
            }
            Err(why) => {
                tracing::warn!(secret = %keeper.secret, configuration = %keeper.configuration, error = %why, "could not keep the webhook's certificates; trying again");
                look_again = Some(tokio::time::Instant::now() + retry);
                retry = (retry * 2).min(RETRY.1);
            }
        }
    }
}
