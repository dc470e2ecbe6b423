//! The registry credentials watcher: watches the one Secret `--registry-credentials-secret`
//! names, puts its entries in force for digest checks, and re-checks every followed tag when
//! they change — so a Secret created or fixed after a refusal takes effect at once, not at
//! the next poll. A Secret that cannot be used is said in the log and in a Warning Event on
//! it; the tags are then checked anonymously.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use crate::core::namespaced_name::NamespacedName;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;
use crate::operator::writes::event_recorder::EventRecorder;
use crate::registry::{CredentialSource, Registries, RegistryCredentials};

/// The reason of the Warning Event on a Secret that cannot be (fully) used.
const UNUSABLE: &str = "RegistryCredentialsUnusable";

/// What the watcher reads through and puts the credentials in force for.
pub struct CredentialsWatcher {
    pub client: Client,
    /// Where the credentials are put in force.
    pub registries: Arc<Registries>,
    /// Re-checked when the credentials change.
    pub followed: Arc<FollowedTags>,
    /// Says when the Secret cannot be used.
    pub recorder: EventRecorder,
}

/// Runs until the operator stops.
pub async fn run(ctx: CredentialsWatcher, secret: NamespacedName) {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &secret.namespace);
    // The Secret as it is, `None` once it is gone or missing from a list.
    let mut events = watcher::watch_object(api, &secret.name)
        .backoff(WatchBackoff::default())
        .boxed();
    // Whether the watch has failed since it last worked: said once, not at every retry.
    let mut failing = false;
    while let Some(event) = events.next().await {
        let seen = match event {
            Ok(seen) => {
                failing = false;
                seen
            }
            Err(e) => {
                if std::mem::replace(&mut failing, true) {
                    tracing::debug!(%secret, error = %e, "cannot watch the registry credentials");
                } else {
                    tracing::warn!(%secret, error = %e, "cannot watch the registry credentials");
                }
                // Until it is read once, tags wait for it; a Secret that cannot be read
                // must not hold them up for ever.
                if ctx.registries.source() == CredentialSource::Pending(secret.to_string()) {
                    let why = format!(
                        "the operator cannot read it: {}",
                        crate::core::excerpt::excerpt(&e.to_string())
                    );
                    put_in_force(&ctx, &secret, None, read_failed(&secret, why)).await;
                }
                continue;
            }
        };
        let reading = read(&secret, seen.as_ref());
        put_in_force(&ctx, &secret, seen.as_ref(), reading).await;
    }
}

/// What an observation of the Secret means: the source to name, the credentials, and the
/// problems to report.
#[derive(Debug, PartialEq)]
struct Reading {
    source: CredentialSource,
    credentials: RegistryCredentials,
    problems: Vec<String>,
}

fn read_failed(secret: &NamespacedName, why: String) -> Reading {
    Reading {
        source: CredentialSource::Unusable {
            secret: secret.to_string(),
            why: why.clone(),
        },
        credentials: RegistryCredentials::default(),
        problems: vec![why],
    }
}

/// Reads the Secret as seen (`None`: it does not exist).
fn read(secret: &NamespacedName, seen: Option<&Secret>) -> Reading {
    let Some(object) = seen else {
        return Reading {
            source: CredentialSource::Missing(secret.to_string()),
            credentials: RegistryCredentials::default(),
            problems: Vec::new(),
        };
    };
    match RegistryCredentials::from_secret(object) {
        Ok((credentials, problems)) => Reading {
            source: CredentialSource::Secret(secret.to_string()),
            credentials,
            problems,
        },
        Err(why) => read_failed(secret, why),
    }
}

async fn put_in_force(
    ctx: &CredentialsWatcher,
    secret: &NamespacedName,
    object: Option<&Secret>,
    reading: Reading,
) {
    let Reading {
        source,
        credentials,
        problems,
    } = reading;
    let entries = credentials.entries().len();
    if !ctx.registries.use_credentials(source.clone(), credentials) {
        return;
    }
    if let CredentialSource::Missing(_) = &source {
        tracing::info!(
            %secret,
            "the registry credentials Secret does not exist: registries are asked anonymously"
        );
    } else {
        tracing::info!(%secret, entries, "registry credentials in force");
    }
    if !problems.is_empty() {
        let message = format!(
            "Secret {secret}: {}; digest checks go without these credentials",
            problems.join("; ")
        );
        tracing::warn!(%secret, "{message}");
        if let Some(object) = object {
            ctx.recorder
                .warn(object.object_ref(&()), UNUSABLE, message)
                .await;
        }
    }
    let due = ctx.followed.check_all_now(Instant::now());
    if due > 0 {
        tracing::info!(
            tags = due,
            "checking every followed tag with the new credentials"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use crate::registry::credentials::{SECRET_KEY, SECRET_TYPE};

    fn name() -> NamespacedName {
        NamespacedName {
            namespace: "imagemap-system".into(),
            name: "creds".into(),
        }
    }

    fn secret(type_: &str, json: &str) -> Secret {
        Secret {
            type_: Some(type_.into()),
            data: Some(BTreeMap::from([(
                SECRET_KEY.to_string(),
                ByteString(json.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    #[test]
    fn a_missing_secret_means_anonymous_and_no_complaint() {
        let r = read(&name(), None);
        assert_eq!(
            r.source,
            CredentialSource::Missing("imagemap-system/creds".into())
        );
        assert!(r.credentials.entries().is_empty() && r.problems.is_empty());
    }

    #[test]
    fn a_readable_secret_is_in_force_with_its_bad_entries_reported() {
        let r = read(
            &name(),
            Some(&secret(
                SECRET_TYPE,
                r#"{"auths": {"a.example": {"username": "u", "password": "p"},
                              "b.example": {"identitytoken": "x"}}}"#,
            )),
        );
        assert_eq!(
            r.source,
            CredentialSource::Secret("imagemap-system/creds".into())
        );
        assert_eq!(r.credentials.entries().len(), 1);
        assert_eq!(r.problems.len(), 1);
        assert!(r.problems[0].contains("b.example"));
    }

    #[test]
    fn an_unusable_secret_says_why() {
        let r = read(&name(), Some(&secret("Opaque", "{}")));
        let CredentialSource::Unusable { secret, why } = &r.source else {
            panic!("{:?}", r.source);
        };
        assert_eq!(secret, "imagemap-system/creds");
        assert!(why.contains("Opaque"));
        assert_eq!(r.problems, std::slice::from_ref(why));
    }
}
