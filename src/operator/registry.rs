//! Asking registries which digest a tag points to: one manifest HEAD (the
//! `Docker-Content-Digest` header; a multi-arch index by its own digest), through
//! `oci-client`, which speaks the distribution protocol and its token challenges —
//! anonymously, or with the entry of the operator's registry credentials that answers for
//! the image.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::sync::watch;

use crate::registry_credentials::{Credential, RegistryCredentials};

/// The longest a digest check may take.
const CHECK_LIMIT: Duration = Duration::from_secs(10);

/// Where the credentials in force come from, as messages name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// None are used (`imagemap resolve`).
    Anonymous,
    /// A Docker config file (`imagemap resolve --registry-config`).
    File(String),
    /// The operator was given no Secret to read them from.
    NotConfigured,
    /// The Secret `namespace/name`, not read yet.
    Pending(String),
    /// The Secret `namespace/name`, as read.
    Secret(String),
    /// The Secret `namespace/name` does not exist.
    Missing(String),
    /// The Secret `namespace/name` cannot be used, and why.
    Unusable { secret: String, why: String },
}

/// The credentials in force, and a client for each entry and one for anonymous requests
/// (a client keeps the first credentials it is given for a registry).
struct Keyring {
    source: CredentialSource,
    credentials: RegistryCredentials,
    clients: Vec<Client>,
    anonymous: Client,
}

/// A registry client for digest checks.
pub struct Registries {
    insecure: Vec<String>,
    keyring: RwLock<Arc<Keyring>>,
    /// Whether the credentials were read (or will never be).
    loaded: watch::Sender<bool>,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

impl Registries {
    /// HTTPS everywhere but for `insecure` registries (`host[:port]`), which get plain HTTP;
    /// no credentials until [`Self::use_credentials`] when `source` is pending.
    pub fn new(insecure: &[String], source: CredentialSource) -> Registries {
        let loaded = !matches!(source, CredentialSource::Pending(_));
        let keyring = Keyring {
            source,
            credentials: RegistryCredentials::default(),
            clients: Vec::new(),
            anonymous: client(insecure),
        };
        Registries {
            insecure: insecure.to_vec(),
            keyring: RwLock::new(Arc::new(keyring)),
            loaded: watch::Sender::new(loaded),
        }
    }

    fn keyring(&self) -> Arc<Keyring> {
        Arc::clone(&self.keyring.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `credentials` from `source` in force; whether that changed anything.
    pub fn use_credentials(
        &self,
        source: CredentialSource,
        credentials: RegistryCredentials,
    ) -> bool {
        let current = self.keyring();
        let changed = current.source != source || current.credentials != credentials;
        if changed {
            let keyring = Keyring {
                clients: credentials
                    .entries()
                    .iter()
                    .map(|_| client(&self.insecure))
                    .collect(),
                anonymous: client(&self.insecure),
                source,
                credentials,
            };
            *self.keyring.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keyring);
        }
        self.loaded.send_replace(true);
        changed
    }

    /// The source of the credentials in force.
    pub fn source(&self) -> CredentialSource {
        self.keyring().source.clone()
    }

    /// Waits until the credentials were read once (or will never be).
    pub async fn loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives as long as `self`.
        let _ = loaded.wait_for(|l| *l).await;
    }

    /// The digest `reference` (`registry/repository:tag`) points to now.
    pub async fn digest(&self, reference: &str) -> Result<String, String> {
        let parsed: Reference = reference.parse().map_err(|e| {
            format!("{reference} is not a reference the registry client reads: {e}")
        })?;
        let keyring = self.keyring();
        let entry = keyring
            .credentials
            .find(parsed.registry(), parsed.repository());
        let (client, auth) = match entry {
            Some(i) => (&keyring.clients[i], auth(&keyring.credentials, i)),
            None => (&keyring.anonymous, RegistryAuth::Anonymous),
        };
        let registry = parsed.resolve_registry();
        match tokio::time::timeout(CHECK_LIMIT, client.fetch_manifest_digest(&parsed, &auth)).await
        {
            Ok(Ok(digest)) => Ok(digest),
            Ok(Err(e)) if refused(&e) => Err(format!(
                "asking {registry} for {reference}: {e} ({})",
                keyring.asked_as(entry, parsed.registry())
            )),
            Ok(Err(e)) => Err(format!("asking {registry} for {reference}: {e}")),
            Err(_) => Err(format!(
                "asking {registry} for {reference}: no answer within {CHECK_LIMIT:?}"
            )),
        }
    }
}

impl Keyring {
    /// Which credentials the registry at `domain` was asked with, and where they came from:
    /// what a user needs to fix a refusal (never a user name or a secret: VM status and
    /// Events show it to tenants).
    fn asked_as(&self, entry: Option<usize>, domain: &str) -> String {
        if let Some(i) = entry {
            let e = &self.credentials.entries()[i];
            let from = match &self.source {
                CredentialSource::Secret(s) => format!(" of Secret {s}"),
                CredentialSource::File(f) => format!(" of {f}"),
                _ => String::new(),
            };
            return format!("asked with entry {:?}{from}", e.key);
        }
        match &self.source {
            CredentialSource::Anonymous | CredentialSource::Pending(_) => {
                "asked anonymously".into()
            }
            CredentialSource::NotConfigured => "asked anonymously: the operator reads \
                 registry credentials only from the Secret --registry-credentials-secret names"
                .into(),
            CredentialSource::Secret(s) => {
                format!("asked anonymously: Secret {s} has no entry for {domain}")
            }
            CredentialSource::File(f) => {
                format!("asked anonymously: {f} has no entry for {domain}")
            }
            CredentialSource::Missing(s) => {
                format!("asked anonymously: Secret {s} does not exist")
            }
            CredentialSource::Unusable { secret, why } => {
                format!("asked anonymously: Secret {secret} cannot be used: {why}")
            }
        }
    }
}

fn client(insecure: &[String]) -> Client {
    // The same TLS provider as the Kubernetes client; installed once per process (a second
    // install is refused, harmlessly).
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(insecure.to_vec()),
        connect_timeout: Some(Duration::from_secs(5)),
        read_timeout: Some(CHECK_LIMIT),
        ..ClientConfig::default()
    })
}

fn auth(credentials: &RegistryCredentials, entry: usize) -> RegistryAuth {
    match &credentials.entries()[entry].credential {
        Credential::Basic { username, password } => {
            RegistryAuth::Basic(username.clone(), password.clone())
        }
        Credential::Token(token) => RegistryAuth::Bearer(token.clone()),
    }
}

/// Whether the registry refused who asked (401 or 403), rather than failing otherwise.
fn refused(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::ServerError { code, .. } => matches!(code, 401 | 403),
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn keyring(source: CredentialSource) -> Keyring {
        let (credentials, _) = RegistryCredentials::parse(
            br#"{"auths": {"private.example": {"username": "ci", "password": "p"}}}"#,
        )
        .unwrap();
        Keyring {
            source,
            credentials,
            clients: Vec::new(),
            anonymous: client(&[]),
        }
    }

    #[test]
    fn a_refusal_says_who_asked_and_where_that_came_from() {
        let secret = || "imagemap-system/creds".to_string();
        let k = keyring(CredentialSource::Secret(secret()));
        assert_eq!(
            k.asked_as(Some(0), "private.example"),
            r#"asked with entry "private.example" of Secret imagemap-system/creds"#
        );
        assert_eq!(
            k.asked_as(None, "other.example"),
            "asked anonymously: Secret imagemap-system/creds has no entry for other.example"
        );
        let said = |source| keyring(source).asked_as(None, "other.example");
        assert!(said(CredentialSource::NotConfigured).contains("--registry-credentials-secret"));
        assert!(said(CredentialSource::Missing(secret())).ends_with("does not exist"));
        assert!(
            said(CredentialSource::Unusable {
                secret: secret(),
                why: "its type is Opaque".into()
            })
            .ends_with("cannot be used: its type is Opaque")
        );
        assert_eq!(said(CredentialSource::Anonymous), "asked anonymously");
    }

    #[test]
    fn only_refusals_count_as_refusals() {
        assert!(refused(&OciDistributionError::UnauthorizedError {
            url: "u".into()
        }));
        assert!(refused(&OciDistributionError::ServerError {
            code: 403,
            url: "u".into(),
            message: String::new()
        }));
        assert!(!refused(&OciDistributionError::ServerError {
            code: 500,
            url: "u".into(),
            message: String::new()
        }));
        assert!(!refused(&OciDistributionError::ImageManifestNotFoundError(
            "m".into()
        )));
    }

    #[tokio::test]
    async fn credentials_in_force_change_only_when_they_differ() {
        let registries = Registries::new(&[], CredentialSource::Pending("ns/creds".into()));
        let waiting = tokio::time::timeout(Duration::from_millis(50), registries.loaded()).await;
        assert!(waiting.is_err(), "not loaded before the Secret was read");
        let source = CredentialSource::Missing("ns/creds".into());
        assert!(registries.use_credentials(source.clone(), RegistryCredentials::default()));
        registries.loaded().await;
        assert!(!registries.use_credentials(source.clone(), RegistryCredentials::default()));
        assert_eq!(registries.source(), source);
    }
}
