//! Making certificates (rcgen): a CA, and a serving certificate it signs for the names the
//! webhook is reached at. Both are valid from [`BACKDATE`] before they are made: the API
//! server's clock may be behind the operator's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// How far back a certificate made here is valid from.
pub const BACKDATE: Duration = Duration::from_hours(1);

/// A certificate and its key, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair").finish_non_exhaustive()
    }
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("making a certificate: {0}")]
pub struct IssueError(#[from] rcgen::Error);

/// A new CA, valid from [`BACKDATE`] before `now` for `validity`. Its name carries the time
/// it was made, so that two CAs of a rotation are told apart.
pub fn authority(now: SystemTime, validity: Duration) -> Result<Pair, IssueError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let made = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("imagemap webhook CA {made}"));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + validity).into();
    let cert = params.self_signed(&key)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A serving certificate for `hosts` (DNS names or IP addresses) signed by `ca`, valid from
/// [`BACKDATE`] before `now` for `validity`, but never past `until` (the CA's end).
pub fn serving(
    hosts: &[String],
    ca: &Pair,
    now: SystemTime,
    validity: Duration,
    until: SystemTime,
) -> Result<Pair, IssueError> {
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, KeyPair::from_pem(&ca.key_pem)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "imagemap webhook");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + validity).min(until).into();
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
