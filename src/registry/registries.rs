//! Asking registries which digest a tag points to, with the credentials in force: the
//! entry of the operator's registry credentials that answers for the image (for those it
//! serves), else anonymously — and saying, when a registry refuses, who asked.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::client::{Http, Reach};
use super::credentials::{Credential, RegistryCredentials};
use super::error::{Cause, RegistryError, Via};
use super::manifest_digest::{Asking, Login};
use super::token_cache::TokenCache;
use crate::core::allowed_registries::AllowedRegistries;
use crate::core::excerpt::excerpt;
use crate::core::local_registry::{LocalRegistry, Vantage};
use crate::core::reference::Reference;

/// The longest a digest check may take.
pub const CHECK_LIMIT: Duration = Duration::from_secs(10);

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

/// Whether a check may use the credentials in force.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Credentials {
    /// The entry that answers for the image, if any.
    InForce,
    /// Anonymously, whatever the credentials hold: they do not serve the rule's writer
    /// (the text says whom they serve).
    NotServed(&'static str),
}

/// The credentials in force, and the authorizations registries gave for them.
struct Keyring {
    source: CredentialSource,
    credentials: RegistryCredentials,
    tokens: TokenCache,
}

/// A registry client for digest checks.
pub struct Registries {
    http: Http,
    reach: Reach,
    keyring: RwLock<Arc<Keyring>>,
    /// Whether the credentials were read (or will never be).
    loaded: watch::Sender<bool>,
    /// The cluster's local registry, when it advertises one.
    local: RwLock<Option<Arc<LocalRegistry>>>,
    /// Where the local registry is reached from.
    vantage: Vantage,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("reach", &self.reach)
            .finish_non_exhaustive()
    }
}

impl Registries {
    /// A client that contacts only what `reach` allows; no credentials until
    /// [`Self::use_credentials`] when `source` is pending.
    pub fn new(reach: Reach, source: CredentialSource) -> Result<Registries, String> {
        let loaded = !matches!(source, CredentialSource::Pending(_));
        let keyring = Keyring {
            source,
            credentials: RegistryCredentials::default(),
            tokens: TokenCache::default(),
        };
        Ok(Registries {
            http: Http::new()?,
            reach,
            keyring: RwLock::new(Arc::new(keyring)),
            loaded: watch::Sender::new(loaded),
            local: RwLock::new(None),
            vantage: Vantage::Host,
        })
    }

    /// This client, reaching the cluster's local registry from `vantage`.
    #[must_use]
    pub fn reaching_local_from(mut self, vantage: Vantage) -> Registries {
        self.vantage = vantage;
        self
    }

    /// Puts the cluster's local registry in force (`None`: it advertises none); whether
    /// that changed anything.
    pub fn use_local_registry(&self, local: Option<Arc<LocalRegistry>>) -> bool {
        let mut guard = self.local.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *guard != local;
        *guard = local;
        changed
    }

    /// The cluster's local registry in force.
    pub fn local_registry(&self) -> Option<Arc<LocalRegistry>> {
        self.local
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// For a reference at the local registry: the reference at the name this process
    /// reaches it by, the reach that allows that name over plain HTTP, and how it was asked.
    fn local_route(&self, parsed: &Reference) -> Option<Result<(Reference, Reach, Via), Via>> {
        let local = self.local_registry()?;
        if !local.is_named(parsed.domain()) {
            return None;
        }
        let Some(contacted) = local.reached_by(self.vantage) else {
            return Some(Err(Via {
                contacted: parsed.domain().to_string(),
                help: local.help().map(str::to_string),
            }));
        };
        // Allowed beside the listed ones; without a list, alone (the operator) or with any
        // other (`imagemap resolve`).
        let allowed = if self.reach.allowed.is_listed() || self.reach.needs_list {
            let mut list = self.reach.allowed.list().to_vec();
            list.push(contacted.to_string());
            AllowedRegistries::only(list)
        } else {
            AllowedRegistries::any()
        };
        let mut insecure = self.reach.insecure.clone();
        insecure.push(contacted.to_string());
        let reach = Reach {
            allowed,
            insecure,
            needs_list: self.reach.needs_list,
        };
        let via = Via {
            contacted: contacted.to_string(),
            help: local.help().map(str::to_string),
        };
        Some(Ok((parsed.with_domain(contacted), reach, via)))
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
                source,
                credentials,
                tokens: TokenCache::default(),
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

    /// The digest `reference` (`registry/repository:tag`) points to now, asked with the
    /// credentials `use_credentials` allows.
    pub async fn digest(
        &self,
        reference: &str,
        use_credentials: &Credentials,
    ) -> Result<String, RegistryError> {
        let fail = |cause, asked_as, via| RegistryError {
            reference: excerpt(reference),
            cause,
            asked_as,
            via,
        };
        let named = Reference::parse_normalized(reference)
            .map_err(|e| fail(Cause::InvalidReference(excerpt(&e.to_string())), None, None))?;
        let (parsed, reach, via) = match self.local_route(&named) {
            None => (named, self.reach.clone(), None),
            Some(Ok((parsed, reach, via))) => (parsed, reach, Some(via)),
            Some(Err(via)) => {
                let why = "the cluster advertises no hostFromClusterNetwork for its local \
                           registry, so pods cannot reach it (run the operator with \
                           --local-registry-vantage host if this one can reach `host`)";
                return Err(fail(Cause::Unreachable(why.into()), None, Some(via)));
            }
        };
        let keyring = self.keyring();
        let entry = match use_credentials {
            Credentials::InForce => keyring.credentials.find(parsed.domain(), parsed.path()),
            Credentials::NotServed(_) => None,
        };
        let login = match entry.map(|i| &keyring.credentials.entries()[i].credential) {
            Some(Credential::Basic { username, password }) => Login::Basic { username, password },
            Some(Credential::Token(token)) => Login::Token(token),
            None => Login::Anonymous,
        };
        let asking = Asking {
            http: &self.http,
            reach: &reach,
            tokens: &keyring.tokens,
            login,
            entry,
        };
        let cause = match tokio::time::timeout(CHECK_LIMIT, asking.digest(&parsed)).await {
            Ok(Ok(digest)) => return Ok(digest),
            Ok(Err(cause)) => cause,
            Err(_) => Cause::NoAnswer(CHECK_LIMIT),
        };
        // Who asked matters to a refusal, and to a 404 from a registry that hides what the
        // asker may not pull.
        let said = matches!(
            (&cause, use_credentials),
            (Cause::Refused { .. }, _) | (Cause::NotFound, Credentials::NotServed(_))
        );
        let asked_as = said.then(|| keyring.asked_as(entry, parsed.domain(), use_credentials));
        Err(fail(cause, asked_as, via))
    }
}

impl Keyring {
    /// Which credentials the registry at `domain` was asked with, and where they came from:
    /// what a user needs to fix a refusal (never a user name or a secret: VM status and
    /// Events show it to tenants).
    fn asked_as(
        &self,
        entry: Option<usize>,
        domain: &str,
        use_credentials: &Credentials,
    ) -> String {
        if let Some(i) = entry {
            let e = &self.credentials.entries()[i];
            let from = match &self.source {
                CredentialSource::Secret(s) => format!(" of Secret {s}"),
                CredentialSource::File(f) => format!(" of {f}"),
                _ => String::new(),
            };
            return format!("asked with entry {:?}{from}", e.key);
        }
        if let Credentials::NotServed(whom) = use_credentials
            && let CredentialSource::Secret(s) = &self.source
        {
            return format!("asked anonymously: Secret {s} serves {whom}");
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
            tokens: TokenCache::default(),
        }
    }

    #[test]
    fn a_refusal_says_who_asked_and_where_that_came_from() {
        let secret = || "imagemap-system/creds".to_string();
        let k = keyring(CredentialSource::Secret(secret()));
        let all = Credentials::InForce;
        assert_eq!(
            k.asked_as(Some(0), "private.example", &all),
            r#"asked with entry "private.example" of Secret imagemap-system/creds"#
        );
        assert_eq!(
            k.asked_as(None, "other.example", &all),
            "asked anonymously: Secret imagemap-system/creds has no entry for other.example"
        );
        assert_eq!(
            k.asked_as(
                None,
                "private.example",
                &Credentials::NotServed("ClusterImageMapping rules only")
            ),
            "asked anonymously: Secret imagemap-system/creds serves ClusterImageMapping rules only"
        );
        let said = |source| keyring(source).asked_as(None, "other.example", &all);
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

    #[tokio::test]
    async fn credentials_in_force_change_only_when_they_differ() {
        let registries = Registries::new(
            Reach::default(),
            CredentialSource::Pending("ns/creds".into()),
        )
        .unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(50), registries.loaded()).await;
        assert!(waiting.is_err(), "not loaded before the Secret was read");
        let source = CredentialSource::Missing("ns/creds".into());
        assert!(registries.use_credentials(source.clone(), RegistryCredentials::default()));
        registries.loaded().await;
        assert!(!registries.use_credentials(source.clone(), RegistryCredentials::default()));
        assert_eq!(registries.source(), source);
    }

    #[tokio::test]
    async fn nothing_is_contacted_outside_the_reach() {
        let reach = Reach {
            needs_list: true,
            ..Reach::default()
        };
        let registries = Registries::new(reach, CredentialSource::NotConfigured).unwrap();
        let e = registries
            .digest("127.0.0.1:1/app:dev", &Credentials::InForce)
            .await
            .unwrap_err();
        assert_eq!(e.cause, Cause::NoAllowList);
    }
}
