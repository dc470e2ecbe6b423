//! What a webhook replica serves, as the API server sees it: a TLS handshake with
//! `127.0.0.1:PORT` by a client that trusts only the CAs given (as the API server trusts the
//! configuration's `caBundle`).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// The certificate (DER) served at `port`, when a client trusting the CAs `trusted` (DER)
/// completes a handshake for the name `127.0.0.1`; else why not.
pub async fn served_certificate(port: u16, trusted: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in trusted {
        roots
            .add(CertificateDer::from(ca.clone()))
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, connection) = tls.get_ref();
    connection
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or_else(|| "no certificate".into())
}

/// The certificates of `pem`, as DER.
pub fn ders(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.unwrap().to_vec())
        .collect()
}
