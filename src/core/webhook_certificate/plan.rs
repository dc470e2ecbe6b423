//! What the leader does next with the webhook's Secret and configuration, one step at a
//! time, each decided from what they hold (the certificates' own dates, keys, signatures and
//! names), never from a timer alone:
//!
//! 1. nothing usable stored (or the CA ended): a new CA and a serving certificate from it;
//! 2. the CA past two thirds of its life: a new CA signs from now on, and the bundle trusts
//!    both until the old one ends (the serving certificate stays);
//! 3. a CA of the bundle ended: it leaves the bundle;
//! 4. a serving certificate unusable, past two thirds of its life, not valid for a name the
//!    configuration reaches the webhook at, or signed by the previous CA once every webhook of
//!    the configuration trusts the new one (and [`SETTLE`] has passed since the new CA was
//!    made): a new one from the signing CA;
//! 5. a webhook of the configuration trusting other than the bundle: its `caBundle` is set.
//!
//! So a serving certificate from a new CA is served only once the API server trusts that CA,
//! and the old CA is trusted until it ends.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::core::webhook_certificate::facts::Facts;
use crate::core::webhook_certificate::issue::{self, IssueError, Pair};
use crate::core::webhook_certificate::{CA_BUNDLE, CA_KEY, CERT, KEY};

/// How long after a new CA was made a serving certificate from it waits at least, beyond the
/// configuration trusting it: every API server loads the configuration from a watch of its
/// own, which follows within seconds the change the leader saw.
pub const SETTLE: Duration = Duration::from_secs(10);

/// What the Secret holds (`""` for a key it lacks).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stored<'a> {
    pub ca_bundle: &'a str,
    pub ca_key: &'a str,
    pub cert: &'a str,
    pub key: &'a str,
}

/// How long the certificates made are valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    pub authority: Duration,
    pub serving: Duration,
}

impl Default for Lifetimes {
    /// A CA for three years, a serving certificate for 90 days.
    fn default() -> Self {
        Lifetimes {
            authority: Duration::from_hours(24 * 365 * 3),
            serving: Duration::from_hours(24 * 90),
        }
    }
}

/// Why a new serving certificate is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalReason {
    /// None is stored, or it cannot be read, has no key, ended, or no CA trusted signed it.
    Unusable,
    /// The configuration trusts the new CA now.
    NewAuthority,
    /// Two thirds of its life have passed.
    Ending,
    /// It is not valid for a name the configuration reaches the webhook at.
    Hosts,
}

/// The next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A new CA, trusted alone, and a serving certificate from it.
    Fill,
    /// A new CA signs from now on; the bundle trusts both.
    RotateAuthority,
    /// The CAs that ended leave the bundle.
    DropEnded,
    /// A new serving certificate from the signing CA.
    Serve(RenewalReason),
    /// The configuration's webhooks trust the bundle.
    Publish,
    /// Nothing to do before `until` (a renewal or an end).
    Idle { until: SystemTime },
}

/// Whether every webhook's `caBundle` (`published`) trusts `ca`.
fn trusted(published: &[&[u8]], ca: &Facts) -> bool {
    published.iter().all(|bundle| {
        std::str::from_utf8(bundle)
            .ok()
            .and_then(|pem| Facts::all(pem).ok())
            .is_some_and(|cas| cas.iter().any(|c| c.der() == ca.der()))
    })
}

/// The next step for what the Secret holds (`stored`), the `caBundle` of each of the
/// configuration's webhooks (`published`) and the names it reaches the webhook at (`hosts`).
#[must_use]
pub fn next(stored: &Stored, published: &[&[u8]], hosts: &[String], now: SystemTime) -> Next {
    let Ok(bundle) = Facts::all(stored.ca_bundle) else {
        return Next::Fill;
    };
    let signing = &bundle[0];
    if !signing.has_key(stored.ca_key) || !signing.valid_at(now) {
        return Next::Fill;
    }
    if now >= signing.renew_at() {
        return Next::RotateAuthority;
    }
    if bundle[1..].iter().any(|ca| !ca.valid_at(now)) {
        return Next::DropEnded;
    }
    let serving = Facts::all(stored.cert).ok().and_then(|all| {
        all.into_iter()
            .next()
            .filter(|c| c.has_key(stored.key) && c.valid_at(now))
            .filter(|c| bundle.iter().any(|ca| c.signed_by(ca)))
    });
    let Some(serving) = serving else {
        return Next::Serve(RenewalReason::Unusable);
    };
    let from_signing = serving.signed_by(signing);
    let settled = signing.made() + SETTLE;
    if !from_signing && trusted(published, signing) && now >= settled {
        return Next::Serve(RenewalReason::NewAuthority);
    }
    if from_signing && now >= serving.renew_at() {
        return Next::Serve(RenewalReason::Ending);
    }
    if from_signing && !serving.covers(hosts) {
        return Next::Serve(RenewalReason::Hosts);
    }
    if published.iter().any(|b| *b != stored.ca_bundle.as_bytes()) {
        return Next::Publish;
    }
    let ends = bundle[1..].iter().map(|ca| ca.not_after);
    let switch = (!from_signing).then_some(settled);
    let until = ends
        .chain([signing.renew_at(), serving.renew_at()])
        .chain(switch)
        .min()
        .unwrap_or(now);
    Next::Idle { until }
}

/// What a step writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// These keys of the Secret.
    Secret(BTreeMap<&'static str, String>),
    /// Every webhook's `caBundle`: the Secret's bundle.
    CaBundle,
    Nothing,
}

/// What `next` writes, making the certificates it needs.
pub fn write(
    next: Next,
    stored: &Stored,
    hosts: &[String],
    now: SystemTime,
    lifetimes: Lifetimes,
) -> Result<Write, IssueError> {
    let bundle = Facts::all(stored.ca_bundle).unwrap_or_default();
    let mut data = BTreeMap::new();
    match next {
        Next::Fill => {
            let ca = issue::authority(now, lifetimes.authority)?;
            let until = now + lifetimes.authority;
            let cert = issue::serving(hosts, &ca, now, lifetimes.serving, until)?;
            data.insert(CA_BUNDLE, ca.cert_pem);
            data.insert(CA_KEY, ca.key_pem);
            data.insert(CERT, cert.cert_pem);
            data.insert(KEY, cert.key_pem);
        }
        Next::RotateAuthority => {
            let ca = issue::authority(now, lifetimes.authority)?;
            let kept: String = bundle
                .iter()
                .filter(|c| c.valid_at(now))
                .map(Facts::pem)
                .collect();
            data.insert(CA_BUNDLE, format!("{}{kept}", ca.cert_pem));
            data.insert(CA_KEY, ca.key_pem);
        }
        Next::DropEnded => {
            let kept: String = bundle
                .iter()
                .enumerate()
                .filter(|(i, c)| *i == 0 || c.valid_at(now))
                .map(|(_, c)| c.pem())
                .collect();
            data.insert(CA_BUNDLE, kept);
        }
        Next::Serve(_) => {
            let Some(signing) = bundle.first() else {
                return Ok(Write::Nothing);
            };
            let ca = Pair {
                cert_pem: signing.pem(),
                key_pem: stored.ca_key.to_string(),
            };
            let cert = issue::serving(hosts, &ca, now, lifetimes.serving, signing.not_after)?;
            data.insert(CERT, cert.cert_pem);
            data.insert(KEY, cert.key_pem);
        }
        Next::Publish => return Ok(Write::CaBundle),
        Next::Idle { .. } => return Ok(Write::Nothing),
    }
    Ok(Write::Secret(data))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const HOSTS: &[&str] = &["imagemap-webhook.ns.svc", "127.0.0.1"];

    fn hosts() -> Vec<String> {
        HOSTS.iter().map(ToString::to_string).collect()
    }

    /// A Secret's data, as the keeper holds it.
    #[derive(Debug, Clone, Default)]
    struct Secret(BTreeMap<&'static str, String>);

    impl Secret {
        fn stored(&self) -> Stored<'_> {
            let get = |k| self.0.get(k).map_or("", String::as_str);
            Stored {
                ca_bundle: get(CA_BUNDLE),
                ca_key: get(CA_KEY),
                cert: get(CERT),
                key: get(KEY),
            }
        }

        /// Takes the next step at `now`, with the configuration trusting `published`.
        fn step(&mut self, published: &mut String, now: SystemTime, lifetimes: Lifetimes) -> Next {
            let next = next(&self.stored(), &[published.as_bytes()], &hosts(), now);
            match write(next, &self.stored(), &hosts(), now, lifetimes).unwrap() {
                Write::Secret(data) => self.0.extend(data),
                Write::CaBundle => published.clone_from(&self.0[CA_BUNDLE]),
                Write::Nothing => {}
            }
            next
        }

        fn cas(&self) -> Vec<Facts> {
            Facts::all(&self.0[CA_BUNDLE]).unwrap()
        }

        fn serving(&self) -> Facts {
            Facts::all(&self.0[CERT]).unwrap().remove(0)
        }
    }

    const HOUR: Duration = Duration::from_hours(1);

    fn lifetimes() -> Lifetimes {
        Lifetimes {
            authority: 30 * HOUR,
            serving: 9 * HOUR,
        }
    }

    #[test]
    fn an_empty_secret_is_filled_then_published_then_left_alone() {
        let (mut secret, mut published, now) =
            (Secret::default(), String::new(), SystemTime::now());
        assert_eq!(
            secret.settle(&mut published, now),
            [Next::Fill, Next::Publish]
        );
        assert_eq!(published, secret.0[CA_BUNDLE]);
        let Next::Idle { until } = secret.step(&mut published, now, lifetimes()) else {
            panic!("idle")
        };
        // The serving certificate's renewal, at two thirds of its 9 hours.
        assert!(
            until > now + 5 * HOUR && until < now + 7 * HOUR,
            "{until:?}"
        );
        assert!(secret.serving().signed_by(&secret.cas()[0]));
        assert!(secret.serving().covers(&hosts()));
    }

    #[test]
    fn the_serving_certificate_is_renewed_at_two_thirds_and_when_a_name_is_missing() {
        let (mut secret, mut published, now) =
            (Secret::default(), String::new(), SystemTime::now());
        secret.settle(&mut published, now);
        let first = secret.serving();
        let later = now + 6 * HOUR + Duration::from_secs(1);
        assert_eq!(
            secret.step(&mut published, later, lifetimes()),
            Next::Serve(RenewalReason::Ending)
        );
        assert_ne!(secret.serving(), first);
        assert!(matches!(
            secret.step(&mut published, later, lifetimes()),
            Next::Idle { .. }
        ));
        // The configuration reaches the webhook at another name.
        let other = ["imagemap-webhook.other.svc".to_string()];
        let next = next(&secret.stored(), &[published.as_bytes()], &other, later);
        assert_eq!(next, Next::Serve(RenewalReason::Hosts));
    }

    impl Secret {
        /// Steps at `at` until idle; the steps taken.
        fn settle(&mut self, published: &mut String, at: SystemTime) -> Vec<Next> {
            let mut steps = Vec::new();
            loop {
                match self.step(published, at, lifetimes()) {
                    Next::Idle { .. } => return steps,
                    next => steps.push(next),
                }
                assert!(steps.len() < 8, "no end: {steps:?}");
            }
        }
    }

    #[test]
    fn a_rotation_trusts_both_cas_before_the_new_one_serves_and_the_old_one_until_it_ends() {
        let (mut secret, mut published, now) =
            (Secret::default(), String::new(), SystemTime::now());
        assert_eq!(
            secret.settle(&mut published, now),
            [Next::Fill, Next::Publish]
        );
        let old = secret.cas().remove(0);
        // The serving certificate renewed every 6 of its 9 hours, by the same CA.
        for hours in [6, 12, 18] {
            let at = now + hours * HOUR + Duration::from_secs(1);
            assert_eq!(
                secret.settle(&mut published, at),
                [Next::Serve(RenewalReason::Ending)]
            );
            assert!(secret.serving().signed_by(&old));
        }
        // Past two thirds of the CA's 30 hours.
        let at = now + 20 * HOUR + Duration::from_secs(1);
        assert_eq!(
            secret.step(&mut published, at, lifetimes()),
            Next::RotateAuthority
        );
        let cas = secret.cas();
        assert_eq!(cas.len(), 2);
        assert_eq!(cas[1], old);
        // Still served from the old CA until the configuration trusts the new one, and
        // every API server had time to load it.
        assert!(secret.serving().signed_by(&old));
        assert_eq!(secret.step(&mut published, at, lifetimes()), Next::Publish);
        let Next::Idle { until } = secret.step(&mut published, at, lifetimes()) else {
            panic!("idle")
        };
        assert_eq!(until, cas[0].made() + SETTLE);
        let at = until;
        assert_eq!(
            secret.step(&mut published, at, lifetimes()),
            Next::Serve(RenewalReason::NewAuthority)
        );
        assert!(secret.serving().signed_by(&cas[0]));
        // Both trusted until the old one ends.
        let Next::Idle { until } = secret.step(&mut published, at, lifetimes()) else {
            panic!("idle")
        };
        assert!(until <= old.not_after);
        let renewed = now + 26 * HOUR + Duration::from_secs(12);
        assert_eq!(
            secret.settle(&mut published, renewed),
            [Next::Serve(RenewalReason::Ending)]
        );
        let ended = old.not_after + Duration::from_secs(1);
        assert_eq!(
            secret.settle(&mut published, ended),
            [Next::DropEnded, Next::Publish]
        );
        assert_eq!(secret.cas(), [cas[0].clone()]);
    }

    #[test]
    fn a_serving_certificate_from_the_old_ca_waits_for_every_webhook() {
        let (mut secret, mut published, now) =
            (Secret::default(), String::new(), SystemTime::now());
        secret.settle(&mut published, now);
        for hours in [6, 12, 18] {
            secret.settle(&mut published, now + hours * HOUR + Duration::from_secs(1));
        }
        let at = now + 20 * HOUR + Duration::from_secs(1);
        assert_eq!(
            secret.step(&mut published, at, lifetimes()),
            Next::RotateAuthority
        );
        // One webhook trusts the new CA, a second not yet.
        let next = next(
            &secret.stored(),
            &[secret.0[CA_BUNDLE].as_bytes(), published.as_bytes()],
            &hosts(),
            at,
        );
        assert_eq!(next, Next::Publish);
    }

    #[test]
    fn anything_unusable_is_replaced_whole() {
        let now = SystemTime::now();
        let (mut secret, mut published) = (Secret::default(), String::new());
        secret.step(&mut published, now, lifetimes());
        for (key, value) in [(CA_BUNDLE, "garbage"), (CA_KEY, "")] {
            let mut broken = secret.clone();
            broken.0.insert(key, value.into());
            assert_eq!(
                next(&broken.stored(), &[], &hosts(), now),
                Next::Fill,
                "{key}"
            );
        }
        let mut broken = secret.clone();
        broken.0.insert(KEY, secret.0[CA_KEY].clone());
        assert_eq!(
            next(&broken.stored(), &[], &hosts(), now),
            Next::Serve(RenewalReason::Unusable)
        );
        // The CA ended.
        assert_eq!(
            next(&secret.stored(), &[], &hosts(), now + 31 * HOUR),
            Next::Fill
        );
    }
}
