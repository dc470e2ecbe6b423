//! The webhook's TLS: the serving certificate every connection is served with, swapped whole
//! when it changes (a connection in its handshake keeps the one it started with); a CA and
//! serving certificate made here for a webhook the operator registers itself; and
//! cert-manager's files (`tls.crt`, `tls.key`), read again when they change. The leader's
//! Secret is followed by [`super::secret_certificate`].

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::core::webhook_certificate::issue::{self, IssueError};

/// How long a certificate made here is valid.
pub const VALIDITY: Duration = Duration::from_hours(24 * 365);
/// How often cert-manager's files are looked at.
const FILE_CHECK: Duration = Duration::from_secs(10);

/// A serving certificate and its key, and the CA that signed it, as PEM.
#[derive(Clone, PartialEq, Eq)]
#[allow(clippy::struct_field_names)] // Each is PEM, and says so.
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA bundle the API server checks the certificate with.
    pub ca_pem: String,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

/// Why a certificate could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Generate(#[from] IssueError),
    #[error("{what}: {why}")]
    Unusable { what: String, why: String },
}

fn unusable(what: impl Into<String>, why: impl std::fmt::Display) -> TlsError {
    TlsError::Unusable {
        what: what.into(),
        why: why.to_string(),
    }
}

/// A new CA, and a serving certificate it signs for `hosts` (DNS names or IP addresses),
/// both valid from before `now` for `validity`.
pub fn self_signed(
    hosts: &[String],
    now: SystemTime,
    validity: Duration,
) -> Result<ServingCert, TlsError> {
    let ca = issue::authority(now, validity)?;
    let cert = issue::serving(hosts, &ca, now, validity, now + validity)?;
    Ok(ServingCert {
        cert_pem: cert.cert_pem,
        key_pem: cert.key_pem,
        ca_pem: ca.cert_pem,
    })
}

/// A certificate chain and key, ready to serve.
fn certified(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| unusable("the serving certificate", e))?;
    if chain.is_empty() {
        return Err(unusable("the serving certificate", "no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| unusable("the serving certificate's key", e))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| unusable("the serving certificate's key", e))?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

/// The certificate the webhook serves now; none yet, and every handshake fails.
#[derive(Debug, Default)]
pub struct Certificates {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // The lock guards a pointer swap: a writer that panicked left a whole key.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Certificates {
    /// Serves `cert_pem` with `key_pem`.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<Certificates>, TlsError> {
        Ok(Arc::new(Certificates {
            current: RwLock::new(Some(certified(cert_pem, key_pem)?)),
        }))
    }

    /// Serves `cert_pem` with `key_pem` from now on; what is served stays when they cannot
    /// be used.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let key = certified(cert_pem, key_pem)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(key);
        Ok(())
    }

    /// The TLS acceptor of connections, always with the certificate of the moment.
    pub fn acceptor(self: &Arc<Self>) -> Result<TlsAcceptor, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| unusable("TLS", e))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// cert-manager's files in a directory: `tls.crt` and `tls.key`.
#[derive(Debug, Clone)]
pub struct CertDir(pub PathBuf);

impl CertDir {
    /// The certificate and key the directory holds now.
    pub fn read(&self) -> Result<(String, String), TlsError> {
        let read = |name: &str| {
            let path = self.0.join(name);
            std::fs::read_to_string(&path).map_err(|e| unusable(path.display().to_string(), e))
        };
        Ok((read("tls.crt")?, read("tls.key")?))
    }

    /// Serves what the directory holds whenever it changes, until the future is dropped. A
    /// change that cannot be used is logged, and what is served stays.
    pub async fn follow(self, certificates: Arc<Certificates>, mut served: (String, String)) {
        loop {
            tokio::time::sleep(FILE_CHECK).await;
            let now = match self.read() {
                Ok(now) => now,
                Err(e) => {
                    tracing::warn!(error = %e, "--webhook-cert-dir: keeping the certificate served");
                    continue;
                }
            };
            if now == served {
                continue;
            }
            match certificates.replace(&now.0, &now.1) {
                Ok(()) => {
                    tracing::info!(dir = %self.0.display(), "serving the webhook's new certificate");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "--webhook-cert-dir: keeping the certificate served");
                }
            }
            served = now;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_certificate_made_here_serves_and_can_be_replaced() {
        let made = self_signed(
            &["127.0.0.1".into(), "localhost".into()],
            SystemTime::now(),
            VALIDITY,
        )
        .unwrap();
        assert!(made.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let certs = Certificates::new(&made.cert_pem, &made.key_pem).unwrap();
        let next = self_signed(&["127.0.0.1".into()], SystemTime::now(), VALIDITY).unwrap();
        certs.replace(&next.cert_pem, &next.key_pem).unwrap();
        assert!(certs.replace("not a certificate", &next.key_pem).is_err());
        assert!(Certificates::new(&made.cert_pem, "no key").is_err());
    }
}
