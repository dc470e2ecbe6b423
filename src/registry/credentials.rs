//! Registry credentials, read from a `kubernetes.io/dockerconfigjson` Secret (what
//! `kubectl create secret docker-registry` makes), and which entry answers for an image.
//!
//! Keys are read as the kubelet reads them: a scheme and the `/v1/`, `/v2/` suffixes are
//! ignored (`https://index.docker.io/v1/` is Docker Hub), a host label may be a glob
//! (`*.example.com`), a port must match exactly, and a key with a path
//! (`registry.example.com/team`) answers for the repositories under it. The most specific
//! entry wins: the longest path, then a host without globs.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use crate::core::reference::{DEFAULT_DOMAIN, LEGACY_DEFAULT_DOMAIN};

/// The Secret type the credentials come in.
pub const SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";

/// The Secret key holding the Docker config.
pub const SECRET_KEY: &str = ".dockerconfigjson";

/// What a registry is asked with.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// A user name and password (or access token used as one).
    Basic { username: String, password: String },
    /// A bearer token sent as it is (`registrytoken`).
    Token(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { .. } => f.write_str("Basic(<redacted>)"),
            Credential::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// One entry of the Docker config: the registry (and path) it answers for, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as written in the Secret.
    pub key: String,
    /// Host labels, lowercase; a label may hold `*` globs.
    labels: Vec<String>,
    port: Option<String>,
    /// Repository path prefix, without slashes at either end; empty: every repository.
    path: String,
    pub credential: Credential,
}

/// The entries of one Docker config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryCredentials {
    entries: Vec<Entry>,
}

/// The fields of one entry the operator reads.
#[derive(Default)]
struct AuthEntry {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
    identitytoken: Option<String>,
    registrytoken: Option<String>,
}

impl AuthEntry {
    /// Reads an entry's fields. What is wrong is said without quoting any value: these
    /// messages reach logs, Events and VM status.
    fn read(value: &Value) -> Result<AuthEntry, String> {
        let Value::Object(fields) = value else {
            return Err("not an object".into());
        };
        let text = |name: &str| match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{name} is not a string")),
        };
        Ok(AuthEntry {
            username: text("username")?,
            password: text("password")?,
            auth: text("auth")?,
            identitytoken: text("identitytoken")?,
            registrytoken: text("registrytoken")?,
        })
    }
}

impl RegistryCredentials {
    /// The credentials in a Secret, and the entries that could not be used (each with why).
    /// An error says why none can be read.
    pub fn from_secret(secret: &Secret) -> Result<(RegistryCredentials, Vec<String>), String> {
        let type_ = secret.type_.as_deref().unwrap_or("Opaque");
        if type_ != SECRET_TYPE {
            return Err(format!(
                "its type is {type_}, not {SECRET_TYPE}; create it with \
                 `kubectl create secret docker-registry`"
            ));
        }
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(SECRET_KEY))
            .ok_or_else(|| format!("it has no {SECRET_KEY} key"))?;
        Self::parse(&data.0).map_err(|e| format!("{SECRET_KEY}: {e}"))
    }

    /// The credentials in a Docker config (`{"auths": {...}}`), and the entries that could
    /// not be used (each with why). No message quotes a value of the config.
    pub fn parse(json: &[u8]) -> Result<(RegistryCredentials, Vec<String>), String> {
        let config: Value = serde_json::from_slice(json)
            .map_err(|e| format!("not JSON (line {}, column {})", e.line(), e.column()))?;
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        // A config that keeps its credentials in a credsStore has none here: no entries,
        // said as a problem.
        let Some(Value::Object(auths)) = config.get("auths") else {
            problems.push(
                "no \"auths\" object (an old .dockercfg, or credentials kept in a credsStore? \
                 `kubectl create secret docker-registry` makes one that has it)"
                    .into(),
            );
            return Ok((RegistryCredentials { entries }, problems));
        };
        let sorted: BTreeMap<&String, &Value> = auths.iter().collect();
        for (key, value) in sorted {
            match AuthEntry::read(value).and_then(|auth| entry(key, auth)) {
                Ok(e) => entries.push(e),
                Err(why) => problems.push(format!("entry {key:?}: {why}")),
            }
        }
        Ok((RegistryCredentials { entries }, problems))
    }

    /// The entries, in key order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The index of the entry that answers for `repository` at `domain` (`host[:port]`),
    /// if one does.
    pub fn find(&self, domain: &str, repository: &str) -> Option<usize> {
        let (host, port) = split_port(&domain.to_ascii_lowercase());
        let host = canonical_host(&host);
        let labels: Vec<&str> = host.split('.').collect();
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.answers_for(&labels, port.as_deref(), repository))
            .max_by_key(|(i, e)| {
                let globs = e.labels.iter().any(|l| l.contains('*'));
                (e.path.len(), !globs, std::cmp::Reverse(*i))
            })
            .map(|(i, _)| i)
    }
}

impl Entry {
    fn answers_for(&self, labels: &[&str], port: Option<&str>, repository: &str) -> bool {
        self.port.as_deref() == port
            && self.labels.len() == labels.len()
            && self.labels.iter().zip(labels).all(|(p, l)| glob(p, l))
            && (self.path.is_empty()
                || repository == self.path
                || repository
                    .strip_prefix(&self.path)
                    .is_some_and(|rest| rest.starts_with('/')))
    }
}

/// An entry, its credential chosen as the kubelet chooses: `auth` over `username` and
/// `password`; then a `registrytoken`.
fn entry(key: &str, auth: AuthEntry) -> Result<Entry, String> {
    let credential = if let Some(encoded) = auth.auth {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| "auth is not valid base64".to_string())?;
        let text = String::from_utf8(decoded).map_err(|_| "auth is not UTF-8".to_string())?;
        let (username, password) = text
            .split_once(':')
            .ok_or("auth does not decode to user:password")?;
        Credential::Basic {
            username: username.into(),
            password: password.into(),
        }
    } else if let (Some(username), Some(password)) = (auth.username, auth.password) {
        Credential::Basic { username, password }
    } else if let Some(token) = auth.registrytoken {
        // Sent as a header as it is: a pasted newline would make every request fail.
        if http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            return Err("registrytoken is not a valid HTTP header value (a line break?)".into());
        }
        Credential::Token(token)
    } else if auth.identitytoken.is_some() {
        return Err(
            "identitytoken (an OAuth refresh token) is not supported; give a username and \
             password (or an access token as password)"
                .into(),
        );
    } else {
        return Err("no username and password, auth or registrytoken".into());
    };
    let lower = key.trim().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .unwrap_or(&lower);
    let (domain, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = path.trim_matches('/');
    // The Docker client's API version is not part of the repository path.
    let path = ["v1", "v2"]
        .iter()
        .find_map(|v| {
            path.strip_prefix(v)
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        })
        .map_or(path, |rest| rest.trim_start_matches('/'));
    if domain.is_empty() {
        return Err("the key names no registry".into());
    }
    let (host, port) = split_port(domain);
    Ok(Entry {
        key: key.into(),
        labels: canonical_host(&host)
            .split('.')
            .map(str::to_string)
            .collect(),
        port,
        path: path.into(),
        credential,
    })
}

/// `host` and the port of `host[:port]`.
fn split_port(domain: &str) -> (String, Option<String>) {
    match domain.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host.into(), Some(port.into()))
        }
        _ => (domain.into(), None),
    }
}

/// Docker Hub's other names are Docker Hub.
fn canonical_host(host: &str) -> String {
    match host {
        LEGACY_DEFAULT_DOMAIN | "registry-1.docker.io" => DEFAULT_DOMAIN.into(),
        other => other.into(),
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = rest.split('*').collect();
    let last = parts.pop().unwrap_or_default();
    for part in parts {
        match remaining.find(part) {
            Some(i) => remaining = &remaining[i + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use k8s_openapi::ByteString;

    fn creds(json: &str) -> (RegistryCredentials, Vec<String>) {
        RegistryCredentials::parse(json.as_bytes()).unwrap()
    }

    fn found<'a>(c: &'a RegistryCredentials, domain: &str, repo: &str) -> Option<&'a str> {
        c.find(domain, repo).map(|i| c.entries()[i].key.as_str())
    }

    #[test]
    fn username_and_password_auth_and_token_are_read() {
        let (c, problems) = creds(
            r#"{"auths": {
                "a.example": {"username": "alice", "password": "s3cret"},
                "b.example": {"auth": "Ym9iOnA6dw=="},
                "c.example": {"registrytoken": "tok"},
                "d.example": {"username": "ignored", "password": "x", "auth": "Ym9iOnA6dw=="}
            }}"#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let by_key: Vec<_> = c
            .entries()
            .iter()
            .map(|e| (e.key.as_str(), e.credential.clone()))
            .collect();
        assert_eq!(
            by_key,
            [
                (
                    "a.example",
                    Credential::Basic {
                        username: "alice".into(),
                        password: "s3cret".into()
                    }
                ),
                (
                    "b.example",
                    Credential::Basic {
                        username: "bob".into(),
                        password: "p:w".into()
                    }
                ),
                ("c.example", Credential::Token("tok".into())),
                // As the kubelet: auth over username and password.
                (
                    "d.example",
                    Credential::Basic {
                        username: "bob".into(),
                        password: "p:w".into()
                    }
                ),
            ]
        );
    }

    #[test]
    fn unusable_entries_are_reported_and_the_others_kept() {
        let (c, problems) = creds(
            r#"{"auths": {
                "good.example": {"username": "u", "password": "p"},
                "oauth.example": {"identitytoken": "refresh"},
                "bad64.example": {"auth": "%%%"},
                "nocolon.example": {"auth": "dXNlcg=="},
                "empty.example": {},
                "typed.example": {"username": "u", "password": 12345},
                "newline.example": {"registrytoken": "t0ken\n"},
                "string.example": "dXNlcjpzM2NyZXQ="
            }}"#,
        );
        assert_eq!(c.entries().len(), 1);
        assert_eq!(problems.len(), 7, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("newline.example")
                    && p.contains("not a valid HTTP header value"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("password is not a string"))
        );
        assert!(problems.iter().any(|p| p.contains("not an object")));
        // Never a value of the config in a message.
        for p in &problems {
            assert!(
                !p.contains("12345")
                    && !p.contains("dXNl")
                    && !p.contains("%%%")
                    && !p.contains("t0ken"),
                "{p}"
            );
        }
        assert!(problems.iter().any(|p| p.contains("oauth.example")
            && p.contains("identitytoken")
            && p.contains("not supported")));
        assert!(problems.iter().any(|p| p.contains("not valid base64")));
        assert!(problems.iter().any(|p| p.contains("user:password")));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("no username and password"))
        );
    }

    #[test]
    fn what_is_not_a_docker_config_is_refused_with_why() {
        assert!(
            RegistryCredentials::parse(b"not json")
                .unwrap_err()
                .contains("not JSON (line 1, column 2)")
        );
        // The old .dockercfg shape (hosts at the top) has no auths.
        let (none, problems) =
            RegistryCredentials::parse(br#"{"r.example": {"auth": "dTpw"}}"#).unwrap();
        assert!(none.entries().is_empty());
        let old = problems.join("; ");
        assert!(
            old.contains("no \"auths\"") && !old.contains("dTpw"),
            "{old}"
        );
        let mut secret = Secret {
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        let e = RegistryCredentials::from_secret(&secret).unwrap_err();
        assert!(e.contains("Opaque") && e.contains("kubectl create secret docker-registry"));
        secret.type_ = Some(SECRET_TYPE.into());
        assert!(
            RegistryCredentials::from_secret(&secret)
                .unwrap_err()
                .contains(SECRET_KEY)
        );
        secret.data = Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(br#"{"auths": {"r.example": {"username": "u", "password": "p"}}}"#.to_vec()),
        )]));
        let (c, _) = RegistryCredentials::from_secret(&secret).unwrap();
        assert_eq!(found(&c, "r.example", "app"), Some("r.example"));
    }

    #[test]
    fn keys_match_as_the_kubelet_reads_them() {
        let (c, _) = creds(
            r#"{"auths": {
                "https://index.docker.io/v1/": {"username": "hub", "password": "p"},
                "http://Registry.Example:5000/v2/": {"username": "port", "password": "p"},
                "registry.example": {"username": "plain", "password": "p"},
                "*.corp.example": {"username": "glob", "password": "p"},
                "eu.corp.example": {"username": "exact", "password": "p"},
                "registry.example/team": {"username": "team", "password": "p"},
                "https://registry.example/v2/ops/": {"username": "ops", "password": "p"}
            }}"#,
        );
        // A /v2/ before a path is the API version, not part of it.
        assert_eq!(
            found(&c, "registry.example", "ops/app"),
            Some("https://registry.example/v2/ops/")
        );
        // Docker Hub by any of its names.
        assert_eq!(
            found(&c, "docker.io", "library/nginx"),
            Some("https://index.docker.io/v1/")
        );
        // Ports must match; scheme, case and /v2/ do not count.
        assert_eq!(
            found(&c, "registry.example:5000", "app"),
            Some("http://Registry.Example:5000/v2/")
        );
        assert_eq!(found(&c, "registry.example:5001", "app"), None);
        // A path answers for what is under it, on segment boundaries; longest wins.
        assert_eq!(
            found(&c, "registry.example", "team/app"),
            Some("registry.example/team")
        );
        assert_eq!(
            found(&c, "registry.example", "teamwork/app"),
            Some("registry.example")
        );
        // Globs stand for one label; an exact host beats a glob.
        assert_eq!(found(&c, "us.corp.example", "x"), Some("*.corp.example"));
        assert_eq!(found(&c, "eu.corp.example", "x"), Some("eu.corp.example"));
        assert_eq!(found(&c, "a.b.corp.example", "x"), None);
        assert_eq!(found(&c, "elsewhere.example", "x"), None);
    }

    #[test]
    fn globs_match_runs_of_characters() {
        assert!(glob("*", "anything"));
        assert!(glob("reg-*", "reg-eu"));
        assert!(glob("*-cache", "eu-cache"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(!glob("ab*ba", "aba"));
        assert!(!glob("reg", "reg2"));
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let (c, _) = creds(
            r#"{"auths": {"a.example": {"username": "alice", "password": "s3cret"},
                          "b.example": {"registrytoken": "t0ken"}}}"#,
        );
        let shown = format!("{c:?}");
        assert!(shown.contains("a.example") && shown.contains("Basic"));
        assert!(!shown.contains("alice") && !shown.contains("s3cret") && !shown.contains("t0ken"));
    }
}
