//! The cluster's local registry as the cluster advertises it (KEP-1755: the ConfigMap
//! `kube-public/local-registry-hosting`, written by k3d, kind's registry script and ctlptl):
//! one registry known by up to three names. Pure.
//!
//! - `hostFromContainerRuntime` (else `host`) is the registry's name: the one pods get,
//!   rules match and statuses show. A reference naming any of the three counts as that one.
//! - Digest checks go to the name this process reaches it by: `hostFromClusterNetwork` in a
//!   pod, `host` outside the cluster ([`Vantage`]).
//! - Only cluster administrators can write `kube-public`: the advertised registry is allowed
//!   without `--allowed-registries`, and reached over plain HTTP as these tools set it up.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::core::excerpt::excerpt;
use crate::core::reference::{self, Reference};

/// The ConfigMap's namespace.
pub const NAMESPACE: &str = "kube-public";
/// The ConfigMap's name.
pub const NAME: &str = "local-registry-hosting";
/// The one version of the hosting document there is (v1 is frozen).
pub const KEY_V1: &str = "localRegistryHosting.v1";
/// The longest hosting document read (a handful of short fields).
pub const DOCUMENT_LIMIT: usize = 16 << 10;
/// The longest `help` kept (a URL shown in messages).
pub const HELP_LIMIT: usize = 256;
/// The longest name taken (a DNS name is at most 253 characters; a port follows).
pub const NAME_LIMIT: usize = 259;

/// Where this process reaches the registry from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Vantage {
    /// Outside the cluster: by `host`.
    Host,
    /// From a pod: by `hostFromClusterNetwork`.
    ClusterNetwork,
}

/// The v1 document, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HostingV1 {
    host: Option<String>,
    host_from_container_runtime: Option<String>,
    host_from_cluster_network: Option<String>,
    help: Option<String>,
}

/// The advertised registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalRegistry {
    /// The name pods get (`hostFromContainerRuntime`, else `host`).
    runtime: String,
    /// `host`, when given.
    host: Option<String>,
    /// `hostFromClusterNetwork`, when given.
    cluster_network: Option<String>,
    /// `help`, cut to [`HELP_LIMIT`].
    help: Option<String>,
}

impl LocalRegistry {
    /// The registry a ConfigMap's `data` advertises: `Ok(None)` when it advertises none
    /// (no v1 document, or one naming no host). The error says what to fix.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Option<LocalRegistry>, String> {
        let Some(document) = data.get(KEY_V1) else {
            return Ok(None);
        };
        if document.len() > DOCUMENT_LIMIT {
            return Err(format!(
                "{KEY_V1} is {} bytes; at most {DOCUMENT_LIMIT} are read",
                document.len()
            ));
        }
        let v1: HostingV1 = serde_yaml_ng::from_str(document).map_err(|e| {
            format!(
                "{KEY_V1} is not a hosting document: {}",
                excerpt(&e.to_string())
            )
        })?;
        let name = |field: &str, value: Option<String>| -> Result<Option<String>, String> {
            let Some(value) = value
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
            else {
                return Ok(None);
            };
            if value.len() > NAME_LIMIT {
                return Err(format!(
                    "{KEY_V1}: {field} is {} characters; a registry host[:port] is at most {NAME_LIMIT}",
                    value.len()
                ));
            }
            if !reference::is_registry_host(&value)
                || value == reference::DEFAULT_DOMAIN
                || value == reference::LEGACY_DEFAULT_DOMAIN
            {
                return Err(format!(
                    "{KEY_V1}: {field} {:?} is not a registry host[:port] (for example localhost:5000)",
                    excerpt(&value)
                ));
            }
            Ok(Some(value.to_ascii_lowercase()))
        };
        let host = name("host", v1.host)?;
        let runtime = name("hostFromContainerRuntime", v1.host_from_container_runtime)?;
        let cluster_network = name("hostFromClusterNetwork", v1.host_from_cluster_network)?;
        let Some(runtime) = runtime.or_else(|| host.clone()) else {
            return Ok(None);
        };
        let help = v1
            .help
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .map(|h| crate::core::excerpt::excerpt_to(&h, HELP_LIMIT));
        Ok(Some(LocalRegistry {
            runtime,
            host,
            cluster_network,
            help,
        }))
    }

    /// The name pods get and rules and statuses use.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.runtime
    }

    /// The URL to show when it cannot be asked, if the cluster gave one.
    #[must_use]
    pub fn help(&self) -> Option<&str> {
        self.help.as_deref()
    }

    /// Every name it goes by, its own first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.runtime.as_str())
            .chain(self.host.as_deref())
            .chain(self.cluster_network.as_deref())
    }

    /// Whether `domain` (`host[:port]`) is one of its names.
    #[must_use]
    pub fn is_named(&self, domain: &str) -> bool {
        self.names().any(|n| n.eq_ignore_ascii_case(domain))
    }

    /// The name a process at `vantage` reaches it by; `None`: it cannot (a pod, and the
    /// cluster advertises no `hostFromClusterNetwork`).
    #[must_use]
    pub fn reached_by(&self, vantage: Vantage) -> Option<&str> {
        match vantage {
            Vantage::Host => Some(self.host.as_deref().unwrap_or(&self.runtime)),
            Vantage::ClusterNetwork => self.cluster_network.as_deref(),
        }
    }

    /// `r` under the registry's own name when it names the registry by another; `None`
    /// when it names another registry or this one already.
    #[must_use]
    pub fn rename(&self, r: &Reference) -> Option<Reference> {
        (r.domain() != self.runtime && self.is_named(r.domain()))
            .then(|| r.with_domain(&self.runtime))
    }

    /// A normalized reference or prefix as text (`host[:port]` first), under the
    /// registry's own name when its first component is another of its names.
    #[must_use]
    pub fn rename_text(&self, text: &str) -> Option<String> {
        let (first, rest) = match text.find(['/', '@']) {
            Some(i) => text.split_at(i),
            None => (text, ""),
        };
        (first != self.runtime && self.is_named(first)).then(|| format!("{}{rest}", self.runtime))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn data(document: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(KEY_V1.to_string(), document.to_string())])
    }

    fn k3d() -> LocalRegistry {
        LocalRegistry::from_data(&data(
            "host: \"localhost:5000\"\nhostFromContainerRuntime: \"k3d-neon-local-registry:5000\"\n\
             hostFromClusterNetwork: \"k3d-neon-local-registry:5000\"\n\
             help: \"https://k3d.io/stable/usage/registries/#using-a-local-registry\"\n",
        ))
        .unwrap()
        .unwrap()
    }

    #[test]
    fn the_kep_document_names_one_registry_three_ways() {
        let r = LocalRegistry::from_data(&data(
            "host: localhost:5000\nhostFromContainerRuntime: registry:5000\nhostFromClusterNetwork: kind-registry:5000\n",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(r.name(), "registry:5000");
        assert_eq!(
            r.names().collect::<Vec<_>>(),
            ["registry:5000", "localhost:5000", "kind-registry:5000"]
        );
        assert_eq!(r.reached_by(Vantage::Host), Some("localhost:5000"));
        assert_eq!(
            r.reached_by(Vantage::ClusterNetwork),
            Some("kind-registry:5000")
        );
        assert!(r.is_named("LOCALHOST:5000"));
        assert!(!r.is_named("localhost:5001"));
        assert_eq!(r.help(), None);
    }

    #[test]
    fn missing_fields_default_as_the_kep_says() {
        let r = LocalRegistry::from_data(&data("host: localhost:5000\n"))
            .unwrap()
            .unwrap();
        assert_eq!(r.name(), "localhost:5000", "runtime name defaults to host");
        assert_eq!(r.reached_by(Vantage::Host), Some("localhost:5000"));
        assert_eq!(
            r.reached_by(Vantage::ClusterNetwork),
            None,
            "no cluster-network name: pods cannot reach it"
        );
        assert_eq!(LocalRegistry::from_data(&BTreeMap::new()).unwrap(), None);
        assert_eq!(LocalRegistry::from_data(&data("help: x\n")).unwrap(), None);
        assert_eq!(LocalRegistry::from_data(&data("{}")).unwrap(), None);
    }

    #[test]
    fn bad_documents_say_what_to_fix() {
        let cases = [
            ("host: [unclosed", "not a hosting document"),
            ("host: not a host\n", "host \"not a host\""),
            (
                "hostFromContainerRuntime: docker.io\n",
                "hostFromContainerRuntime",
            ),
            ("host: localhost:5000/path\n", "registry host[:port]"),
        ];
        for (document, fragment) in cases {
            let err = LocalRegistry::from_data(&data(document)).unwrap_err();
            assert!(err.contains(fragment), "{document}: {err}");
        }
        let big = format!(
            "host: localhost:5000\nhelp: {}\n",
            "x".repeat(DOCUMENT_LIMIT)
        );
        assert!(
            LocalRegistry::from_data(&data(&big))
                .unwrap_err()
                .contains("at most")
        );
        let long_name = format!("host: {}.io:5000\n", "a".repeat(300));
        assert!(
            LocalRegistry::from_data(&data(&long_name))
                .unwrap_err()
                .contains("at most 259")
        );
        let long_help = format!("host: localhost:5000\nhelp: {}\n", "h".repeat(1000));
        let r = LocalRegistry::from_data(&data(&long_help))
            .unwrap()
            .unwrap();
        assert!(r.help().unwrap().chars().count() <= HELP_LIMIT);
    }

    #[test]
    fn references_by_any_name_are_renamed_to_the_runtimes() {
        let r = k3d();
        let by_host = Reference::parse_normalized("localhost:5000/app:dev").unwrap();
        assert_eq!(
            r.rename(&by_host).unwrap().to_string(),
            "k3d-neon-local-registry:5000/app:dev"
        );
        let own = Reference::parse_normalized("k3d-neon-local-registry:5000/app@sha256:0000000000000000000000000000000000000000000000000000000000000000").unwrap();
        assert_eq!(r.rename(&own), None);
        let other = Reference::parse_normalized("ghcr.io/app").unwrap();
        assert_eq!(r.rename(&other), None);
        assert_eq!(
            r.rename_text("localhost:5000/team").as_deref(),
            Some("k3d-neon-local-registry:5000/team")
        );
        assert_eq!(
            r.rename_text("localhost:5000").as_deref(),
            Some("k3d-neon-local-registry:5000")
        );
        assert_eq!(r.rename_text("localhost:50001/x"), None);
        assert_eq!(r.rename_text("k3d-neon-local-registry:5000/x"), None);
    }
}
