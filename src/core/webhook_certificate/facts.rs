//! What a certificate says, read back from the PEM the Secret holds: when it is valid, the
//! names it is valid for, its key and who signed it. A renewal is due once two thirds of its
//! life have passed.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::core::webhook_certificate::issue::BACKDATE;

/// One certificate, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    der: Vec<u8>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// The DNS names and IP addresses it is valid for.
    pub hosts: Vec<String>,
}

/// Why certificates could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnreadableCertificate(String);

fn time(t: x509_parser::time::ASN1Time) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap_or(0))
}

fn parsed(der: &[u8]) -> Result<X509Certificate<'_>, UnreadableCertificate> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert)
        .map_err(|e| UnreadableCertificate(format!("not a certificate: {e}")))
}

/// A host as the certificate names it: an IP address in its canonical form.
fn canonical(host: &str) -> String {
    host.parse::<IpAddr>()
        .map_or_else(|_| host.to_ascii_lowercase(), |ip| ip.to_string())
}

impl Facts {
    /// Every certificate of `pem`, in order; none, or one unreadable, is an error.
    pub fn all(pem: &str) -> Result<Vec<Facts>, UnreadableCertificate> {
        let mut all = Vec::new();
        for block in Pem::iter_from_buffer(pem.as_bytes()) {
            let block = block.map_err(|e| UnreadableCertificate(format!("not PEM: {e}")))?;
            if block.label != "CERTIFICATE" {
                continue;
            }
            all.push(Facts::of_der(block.contents)?);
        }
        if all.is_empty() {
            return Err(UnreadableCertificate("no certificate".into()));
        }
        Ok(all)
    }

    fn of_der(der: Vec<u8>) -> Result<Facts, UnreadableCertificate> {
        let cert = parsed(&der)?;
        let validity = cert.validity();
        let hosts = match cert.subject_alternative_name() {
            Ok(Some(names)) => names
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(canonical(dns)),
                    GeneralName::IPAddress(bytes) => <[u8; 4]>::try_from(*bytes)
                        .map(IpAddr::from)
                        .or_else(|_| <[u8; 16]>::try_from(*bytes).map(IpAddr::from))
                        .ok()
                        .map(|ip| ip.to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let (not_before, not_after) = (time(validity.not_before), time(validity.not_after));
        Ok(Facts {
            der,
            not_before,
            not_after,
            hosts,
        })
    }

    /// The certificate as DER.
    #[must_use]
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The certificate as PEM.
    #[must_use]
    pub fn pem(&self) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(&self.der);
        let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
        pem
    }

    /// Whether `ca`'s key signed this certificate.
    #[must_use]
    pub fn signed_by(&self, ca: &Facts) -> bool {
        match (parsed(&self.der), parsed(&ca.der)) {
            (Ok(cert), Ok(ca)) => cert.verify_signature(Some(ca.public_key())).is_ok(),
            _ => false,
        }
    }

    /// Whether `key_pem` is this certificate's private key.
    #[must_use]
    pub fn has_key(&self, key_pem: &str) -> bool {
        let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
            return false;
        };
        parsed(&self.der).is_ok_and(|cert| {
            rcgen::PublicKeyData::subject_public_key_info(&key) == cert.public_key().raw
        })
    }

    /// Whether it is valid at `now`.
    #[must_use]
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// When it was made: its start, less the backdating.
    #[must_use]
    pub fn made(&self) -> SystemTime {
        (self.not_before + BACKDATE).min(self.not_after)
    }

    /// When two thirds of its life from when it was made have passed: a renewal is due.
    #[must_use]
    pub fn renew_at(&self) -> SystemTime {
        let made = self.made();
        let life = self.not_after.duration_since(made).unwrap_or_default();
        made + life * 2 / 3
    }

    /// Whether it is valid for every one of `hosts`.
    #[must_use]
    pub fn covers(&self, hosts: &[String]) -> bool {
        hosts
            .iter()
            .all(|h| self.hosts.iter().any(|own| *own == canonical(h)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::core::webhook_certificate::issue::{authority, serving};

    #[test]
    fn a_certificate_reads_back_what_it_was_made_with() {
        let now = SystemTime::now();
        let ca = authority(now, Duration::from_hours(30)).unwrap();
        let other = authority(now, Duration::from_hours(30)).unwrap();
        let hosts = vec!["imagemap-webhook.ns.svc".to_string(), "127.0.0.1".into()];
        let cert = serving(
            &hosts,
            &ca,
            now,
            Duration::from_hours(3),
            now + Duration::from_hours(2),
        )
        .unwrap();
        let ca_facts = &Facts::all(&ca.cert_pem).unwrap()[0];
        let facts = &Facts::all(&cert.cert_pem).unwrap()[0];
        assert!(facts.signed_by(ca_facts));
        assert!(!facts.signed_by(&Facts::all(&other.cert_pem).unwrap()[0]));
        assert!(facts.has_key(&cert.key_pem));
        assert!(!facts.has_key(&ca.key_pem));
        assert!(ca_facts.has_key(&ca.key_pem));
        assert!(facts.covers(&hosts));
        assert!(!facts.covers(&["other.ns.svc".to_string()]));
        // Capped at the CA's end given; backdated an hour.
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert!(secs(facts.not_after).abs_diff(secs(now + Duration::from_hours(2))) <= 1);
        assert!(secs(facts.not_before).abs_diff(secs(now - BACKDATE)) <= 1);
        // Two thirds of two hours from now.
        assert!(secs(facts.renew_at()).abs_diff(secs(now + Duration::from_mins(80))) <= 1);
        assert!(facts.valid_at(now) && !facts.valid_at(now + Duration::from_hours(3)));
        // PEM round trip, and a bundle read in order.
        let bundle = format!("{}{}", ca_facts.pem(), facts.pem());
        let both = Facts::all(&bundle).unwrap();
        assert_eq!((&both[0], &both[1]), (ca_facts, facts));
        assert!(Facts::all("").is_err());
        assert!(
            Facts::all("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err()
        );
    }
}
