//! Asking registries which digest a tag points to: one manifest HEAD (the
//! `Docker-Content-Digest` header; a multi-arch index by its own digest), through
//! `oci-client`, which speaks the distribution protocol and its token challenges.

use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// The longest a digest check may take.
const CHECK_LIMIT: Duration = Duration::from_secs(10);

/// A registry client for digest checks.
pub struct Registries {
    client: Client,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries").finish_non_exhaustive()
    }
}

impl Registries {
    /// HTTPS everywhere but for `insecure` registries (`host[:port]`), which get plain HTTP.
    pub fn new(insecure: &[String]) -> Registries {
        // The same TLS provider as the Kubernetes client; installed once per process (a
        // second install is refused, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(insecure.to_vec()),
            connect_timeout: Some(Duration::from_secs(5)),
            read_timeout: Some(CHECK_LIMIT),
            ..ClientConfig::default()
        };
        Registries {
            client: Client::new(config),
        }
    }

    /// The digest `reference` (`registry/repository:tag`) points to now.
    pub async fn digest(&self, reference: &str) -> Result<String, String> {
        let parsed: Reference = reference.parse().map_err(|e| {
            format!("{reference} is not a reference the registry client reads: {e}")
        })?;
        let head = self
            .client
            .fetch_manifest_digest(&parsed, &RegistryAuth::Anonymous);
        match tokio::time::timeout(CHECK_LIMIT, head).await {
            Ok(Ok(digest)) => Ok(digest),
            Ok(Err(e)) => Err(format!(
                "asking {} for {reference}: {e}",
                parsed.resolve_registry()
            )),
            Err(_) => Err(format!(
                "asking {} for {reference}: no answer within {CHECK_LIMIT:?}",
                parsed.resolve_registry()
            )),
        }
    }
}
