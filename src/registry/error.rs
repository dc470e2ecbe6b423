//! Why a registry could not say which digest a tag points to: typed, and short when shown.
//! Every piece of text in it that came from outside (a body, a header, a connection error)
//! is an [`excerpt`](crate::core::excerpt) already, so a message made from it is fit for a VM's
//! status, an Event and a log.

use std::fmt;
use std::time::Duration;

/// A digest check that failed: which reference, at which registry, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryError {
    /// The reference asked for (`registry/repository:tag`).
    pub reference: String,
    pub cause: Cause,
    /// For a refusal: who asked (which credentials, and where they came from).
    pub asked_as: Option<String>,
    /// For the cluster's local registry: the name it was asked at, and its help.
    pub via: Option<Via>,
}

/// How the cluster's local registry was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    /// The name it was contacted by (`host` or `hostFromClusterNetwork`).
    pub contacted: String,
    /// The cluster's `help` for it.
    pub help: Option<String>,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The reference does not parse as one a registry can be asked for.
    InvalidReference(String),
    /// The operator was started without `--allowed-registries`: it contacts no registry a
    /// rule names.
    NoAllowList,
    /// The host (a registry, or the token service a registry named) is not in
    /// `--allowed-registries`.
    NotAllowed { host: String, role: Role },
    /// The registry sent the client elsewhere; only the same host is followed.
    Redirected { to: String },
    /// More redirects than a registry needs.
    TooManyRedirects,
    /// A registry reached over HTTPS named a token service over plain HTTP.
    PlainHttpRealm { realm: String },
    /// No connection, or it broke (DNS, TLS, reset).
    Unreachable(String),
    /// No whole answer within the limit.
    NoAnswer(Duration),
    /// 401 or 403: the registry refused who asked.
    Refused { status: u16 },
    /// 404: no such repository or tag.
    NotFound,
    /// Another error status, and what the registry said (an excerpt of its body).
    Status { status: u16, said: String },
    /// A body longer than the operator reads.
    TooLarge { what: &'static str, limit: usize },
    /// A digest the registry sent is not one (`algorithm:hex` of the exact length).
    InvalidDigest(String),
    /// The registry's authentication challenge cannot be followed.
    BadChallenge(String),
    /// The token service's answer holds no usable token.
    BadToken(String),
    /// The check ended (the operator stopped it) before the registry answered.
    Interrupted,
}

/// Whom the operator would have contacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Registry,
    TokenService,
}

impl RegistryError {
    /// Whether the registry refused who asked (401 or 403).
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        matches!(self.cause, Cause::Refused { .. })
    }

    /// Whether the operator's own settings, not the registry, stopped the check.
    #[must_use]
    pub fn is_not_allowed(&self) -> bool {
        matches!(
            self.cause,
            Cause::NoAllowList | Cause::NotAllowed { .. } | Cause::PlainHttpRealm { .. }
        )
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Registry => "registry",
            Role::TokenService => "token service",
        })
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::InvalidReference(why) => {
                write!(f, "not a reference a registry is asked for: {why}")
            }
            Cause::NoAllowList => f.write_str(
                "not asked: the operator contacts registries only when started with \
                 --allowed-registries naming them",
            ),
            Cause::NotAllowed { host, role } => write!(
                f,
                "not asked: {role} {host} is not in the operator's --allowed-registries"
            ),
            Cause::Redirected { to } => write!(
                f,
                "the registry redirected to {to}; redirects to another host are not followed"
            ),
            Cause::TooManyRedirects => f.write_str("the registry redirected more than 3 times"),
            Cause::PlainHttpRealm { realm } => write!(
                f,
                "the registry named a token service over plain HTTP ({realm}); only a registry \
                 in --insecure-registries may"
            ),
            Cause::Unreachable(why) => write!(f, "unreachable: {why}"),
            Cause::NoAnswer(limit) => write!(f, "no answer within {limit:?}"),
            Cause::Refused { status } => write!(f, "refused ({status})"),
            Cause::NotFound => f.write_str("no such tag or repository (404)"),
            Cause::Status { status, said } if said.is_empty() => write!(f, "answered {status}"),
            Cause::Status { status, said } => write!(f, "answered {status}: {said}"),
            Cause::TooLarge { what, limit } => write!(
                f,
                "the {what} is larger than the {} KiB the operator reads",
                limit / 1024
            ),
            Cause::InvalidDigest(value) => write!(
                f,
                "the registry sent {value:?}, which is not a digest (sha256:<64 hex>, sha384:<96 hex> or sha512:<128 hex>)"
            ),
            Cause::BadChallenge(why) => write!(f, "cannot follow the registry's challenge: {why}"),
            Cause::BadToken(why) => write!(f, "the token service's answer is unusable: {why}"),
            Cause::Interrupted => f.write_str("the check ended before the registry answered"),
        }
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registry = crate::core::reference::domain_of_normalized(&self.reference);
        match &self.via {
            Some(via) if via.contacted != registry => write!(
                f,
                "asking {} (the cluster's local registry {registry}) for {}: {}",
                via.contacted, self.reference, self.cause
            )?,
            _ => write!(
                f,
                "asking {registry} for {}: {}",
                self.reference, self.cause
            )?,
        }
        if let Some(who) = &self.asked_as {
            write!(f, " ({who})")?;
        }
        if let Some(help) = self.via.as_ref().and_then(|v| v.help.as_deref()) {
            write!(f, "; help: {help}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RegistryError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_reference_the_cause_and_who_asked() {
        let e = RegistryError {
            reference: "r.example/app:dev".into(),
            cause: Cause::Refused { status: 401 },
            asked_as: Some("asked anonymously".into()),
            via: None,
        };
        assert!(e.is_refusal());
        assert_eq!(
            e.to_string(),
            "asking r.example for r.example/app:dev: refused (401) (asked anonymously)"
        );
        let not = RegistryError {
            reference: "10.0.0.1:5000/app:dev".into(),
            cause: Cause::NotAllowed {
                host: "10.0.0.1:5000".into(),
                role: Role::Registry,
            },
            asked_as: None,
            via: None,
        };
        let local = RegistryError {
            reference: "k3d-registry:5000/app:dev".into(),
            cause: Cause::Unreachable("connection refused".into()),
            asked_as: None,
            via: Some(Via {
                contacted: "localhost:5000".into(),
                help: Some("https://k3d.io/registries".into()),
            }),
        };
        assert_eq!(
            local.to_string(),
            "asking localhost:5000 (the cluster's local registry k3d-registry:5000) for \
             k3d-registry:5000/app:dev: unreachable: connection refused; \
             help: https://k3d.io/registries"
        );
        assert!(not.is_not_allowed());
        assert!(not.to_string().contains("registry 10.0.0.1:5000 is not in"));
        let big = Cause::TooLarge {
            what: "manifest",
            limit: 4 << 20,
        };
        assert_eq!(
            big.to_string(),
            "the manifest is larger than the 4096 KiB the operator reads"
        );
    }
}
