//! Container image references, parsed and normalized exactly as Docker's
//! `github.com/distribution/reference` does (`ParseNormalizedNamed`, `String`,
//! `FamiliarString`, `Domain`, `Path`).
//!
//! The grammar is ported regex for regex from that package so that the same
//! leftmost-first matching decides the same edge cases (for example
//! `foo_bar.com/x`, whose first component is not a valid host, has no domain).

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

/// Registry used when a reference names none.
pub const DEFAULT_DOMAIN: &str = "docker.io";
/// Historic alias of [`DEFAULT_DOMAIN`], rewritten to it during normalization.
pub const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// Namespace of Docker Hub's official images.
pub const OFFICIAL_REPO_PREFIX: &str = "library/";
/// Longest allowed name (registry and path), as in `distribution/reference`.
pub const NAME_TOTAL_LENGTH_MAX: usize = 255;

const ALPHANUMERIC: &str = r"[a-z0-9]+";
const SEPARATOR: &str = r"(?:[._]|__|[-]+)";
const DOMAIN_NAME_COMPONENT: &str = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const OPTIONAL_PORT: &str = r"(?::[0-9]+)?";
// Go's `\w` is ASCII-only; spell it out so Rust's Unicode `\w` cannot widen the grammar.
const TAG: &str = r"[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}";
const DIGEST: &str = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}";
const IPV6_ADDRESS: &str = r"\[(?:[a-fA-F0-9:]+)\]";

fn domain_name() -> String {
    format!(r"{DOMAIN_NAME_COMPONENT}(?:\.{DOMAIN_NAME_COMPONENT})*")
}

fn host() -> String {
    format!("(?:{}|{IPV6_ADDRESS})", domain_name())
}

fn domain_and_port() -> String {
    format!("{}{OPTIONAL_PORT}", host())
}

fn path_component() -> String {
    format!("{ALPHANUMERIC}(?:{SEPARATOR}{ALPHANUMERIC})*")
}

fn remote_name() -> String {
    let c = path_component();
    format!("{c}(?:/{c})*")
}

fn compile(pattern: &str) -> Regex {
    // The patterns are constants of this module; a failure is a programming error
    // caught by every test that parses a reference.
    #[allow(clippy::expect_used)]
    Regex::new(pattern).expect("reference grammar compiles")
}

static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    let name = format!("(?:{}/)?{}", domain_and_port(), remote_name());
    compile(&format!("^({name})(?::({TAG}))?(?:@({DIGEST}))?$"))
});

static ANCHORED_NAME: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        "^(?:({})/)?({})$",
        domain_and_port(),
        remote_name()
    ))
});

static ANCHORED_IDENTIFIER: LazyLock<Regex> = LazyLock::new(|| compile("^[a-f0-9]{64}$"));
static ANCHORED_TAG: LazyLock<Regex> = LazyLock::new(|| compile(&format!("^{TAG}$")));
static ANCHORED_DOMAIN_AND_PORT: LazyLock<Regex> =
    LazyLock::new(|| compile(&format!("^{}$", domain_and_port())));
static ANCHORED_DOMAIN_NAME: LazyLock<Regex> =
    LazyLock::new(|| compile(&format!("^{}$", domain_name())));

/// Why a string is not an image reference. The messages are Docker's, so users
/// see the same words `docker pull` would print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("invalid reference format")]
    InvalidFormat,
    #[error("invalid reference format: repository name ({0}) must be lowercase")]
    ContainsUppercase(String),
    #[error("repository name must be lowercase")]
    NameContainsUppercase,
    #[error("repository name must have at least one component")]
    NameEmpty,
    #[error("repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")]
    NameTooLong,
    #[error("invalid repository name ({0}), cannot specify 64-byte hexadecimal strings")]
    HexIdentifier(String),
    #[error("invalid digest format")]
    DigestInvalidFormat,
    #[error("invalid checksum digest length")]
    DigestInvalidLength,
    #[error("unsupported digest algorithm")]
    DigestUnsupported,
    #[error("invalid tag format")]
    TagInvalidFormat,
}

/// A parsed, normalized image reference: `[domain/]path[:tag][@digest]`.
///
/// `domain` is empty only for the rare names whose first component is neither a
/// valid host nor a plain path component (Docker's parser keeps those whole as
/// the path, and so does this one).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    // `full` is derived from the other fields; it is kept so that matching never
    // formats a string.
    full: String,
    domain: String,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl Reference {
    /// `ParseNormalizedNamed`: accepts familiar forms (`nginx`, `user/app:1`) and
    /// returns the fully qualified reference (`docker.io/library/nginx`).
    pub fn parse_normalized(s: &str) -> Result<Self, ReferenceError> {
        if ANCHORED_IDENTIFIER.is_match(s) {
            return Err(ReferenceError::HexIdentifier(s.to_string()));
        }
        let (domain, remainder) = split_docker_domain(s);
        let remote = match remainder.find(':') {
            Some(i) => &remainder[..i],
            None => remainder.as_str(),
        };
        if remote.to_lowercase() != remote {
            return Err(ReferenceError::ContainsUppercase(remote.to_string()));
        }
        Self::parse(&format!("{domain}/{remainder}"))
    }

    /// `Parse`: the reference grammar without normalization.
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        let Some(caps) = REFERENCE.captures(s) else {
            if s.is_empty() {
                return Err(ReferenceError::NameEmpty);
            }
            if REFERENCE.is_match(&s.to_lowercase()) {
                return Err(ReferenceError::NameContainsUppercase);
            }
            return Err(ReferenceError::InvalidFormat);
        };
        let name = caps.get(1).map_or("", |m| m.as_str());
        let (domain, path) = match ANCHORED_NAME.captures(name) {
            Some(n) => (
                n.get(1).map_or("", |m| m.as_str()).to_string(),
                n.get(2).map_or("", |m| m.as_str()).to_string(),
            ),
            None => (String::new(), name.to_string()),
        };
        if path.is_empty() {
            return Err(ReferenceError::NameEmpty);
        }
        // As distribution/reference v0.6: the limit is on the path, not the registry host.
        if path.len() > NAME_TOTAL_LENGTH_MAX {
            return Err(ReferenceError::NameTooLong);
        }
        let tag = caps.get(2).map(|m| m.as_str().to_string());
        let digest = match caps.get(3) {
            Some(m) => {
                validate_digest(m.as_str())?;
                Some(m.as_str().to_string())
            }
            None => None,
        };
        Ok(Reference::from_parts(domain, path, tag, digest))
    }

    fn from_parts(
        domain: String,
        path: String,
        tag: Option<String>,
        digest: Option<String>,
    ) -> Self {
        let mut full = if domain.is_empty() {
            path.clone()
        } else {
            format!("{domain}/{path}")
        };
        push_tag_digest(&mut full, tag.as_deref(), digest.as_deref());
        Reference {
            full,
            domain,
            path,
            tag,
            digest,
        }
    }

    /// The normalized, fully qualified form (`String()` in Go).
    pub fn as_str(&self) -> &str {
        &self.full
    }

    /// The key under which `exact` rules are compared: the normalized form, where a
    /// reference without tag and digest and one tagged `:latest` are the same (Kubernetes
    /// pulls `:latest` when no tag is given). Written without the `:latest`.
    pub fn exact_key(&self) -> &str {
        if self.digest.is_none() && self.tag.as_deref().is_none_or(|t| t == "latest") {
            &self.full[..self.name_len()]
        } else {
            &self.full
        }
    }

    /// Length of the repository name (`domain/path`) at the start of [`Reference::as_str`].
    pub fn name_len(&self) -> usize {
        if self.domain.is_empty() {
            self.path.len()
        } else {
            self.domain.len() + 1 + self.path.len()
        }
    }

    /// The registry host without port (`example.com` for `example.com:5000`).
    pub fn host(&self) -> &str {
        host_of(&self.domain)
    }

    /// The registry host (and port), e.g. `docker.io` or `localhost:5000`.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The repository path without the registry, e.g. `library/nginx`.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The repository name: `domain/path`.
    pub fn name(&self) -> &str {
        &self.full[..self.name_len()]
    }

    /// The shortest form Docker would print: `nginx:1.27` for
    /// `docker.io/library/nginx:1.27`, `user/app` for `docker.io/user/app`.
    pub fn familiar(&self) -> String {
        let mut domain = self.domain.as_str();
        let mut path = self.path.as_str();
        if domain == DEFAULT_DOMAIN {
            domain = "";
            if let Some(rest) = path.strip_prefix(OFFICIAL_REPO_PREFIX)
                && !rest.contains('/')
            {
                path = rest;
            }
        }
        let mut out = if domain.is_empty() {
            path.to_string()
        } else {
            format!("{domain}/{path}")
        };
        push_tag_digest(&mut out, self.tag(), self.digest());
        out
    }

    /// Calls `f(n)` for each length `n` such that `self.as_str()[..n]` ends on a
    /// component boundary, shortest first: after the registry (`host:port` is one
    /// component), after each path component, after the tag, and at the end.
    pub fn for_each_boundary(&self, mut f: impl FnMut(usize)) {
        let name_len = self.name_len();
        let path_start = if self.domain.is_empty() {
            0
        } else {
            f(self.domain.len());
            self.domain.len() + 1
        };
        for (i, _) in self.full[path_start..name_len].match_indices('/') {
            f(path_start + i);
        }
        f(name_len);
        if let Some(tag) = &self.tag {
            f(name_len + 1 + tag.len());
        }
        if self.digest.is_some() {
            f(self.full.len());
        }
    }

    /// This reference at registry `domain` (a valid `host[:port]`), path, tag and digest
    /// kept.
    #[must_use]
    pub fn with_domain(&self, domain: &str) -> Reference {
        Reference::from_parts(
            domain.to_string(),
            self.path.clone(),
            self.tag.clone(),
            self.digest.clone(),
        )
    }

    /// This reference with `tag` and `digest` replaced.
    #[must_use]
    pub fn with_tag_digest(&self, tag: Option<&str>, digest: Option<&str>) -> Reference {
        Reference::from_parts(
            self.domain.clone(),
            self.path.clone(),
            tag.map(str::to_string),
            digest.map(str::to_string),
        )
    }
}

impl fmt::Display for Reference {
    /// `String()`: the normalized, fully qualified form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

fn push_tag_digest(out: &mut String, tag: Option<&str>, digest: Option<&str>) {
    if let Some(tag) = tag {
        out.push(':');
        out.push_str(tag);
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(digest);
    }
}

/// `splitDockerDomain`: the first component is a registry when it contains `.`
/// or `:`, is `localhost`, or has an uppercase letter.
fn split_docker_domain(name: &str) -> (String, String) {
    let (mut domain, mut remainder) = match name.find('/') {
        Some(i)
            if name[..i].contains(['.', ':'])
                || &name[..i] == "localhost"
                || name[..i].to_lowercase() != name[..i] =>
        {
            (name[..i].to_string(), name[i + 1..].to_string())
        }
        _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
    };
    if domain == LEGACY_DEFAULT_DOMAIN {
        domain = DEFAULT_DOMAIN.to_string();
    }
    if domain == DEFAULT_DOMAIN && !remainder.contains('/') {
        remainder = format!("{OFFICIAL_REPO_PREFIX}{remainder}");
    }
    (domain, remainder)
}

/// The host part of a `host[:port]` registry domain.
/// The domain (`host[:port]`) of a normalized reference: what comes before its first `/`.
pub fn domain_of_normalized(reference: &str) -> &str {
    reference.split('/').next().unwrap_or(reference)
}

pub fn host_of(domain: &str) -> &str {
    if domain.starts_with('[') {
        return match domain.find(']') {
            Some(i) => &domain[..=i],
            None => domain,
        };
    }
    match domain.rfind(':') {
        Some(i) => &domain[..i],
        None => domain,
    }
}

/// go-digest's `Digest.Validate` with the algorithms Docker links in.
pub fn validate_digest(s: &str) -> Result<(), ReferenceError> {
    let Some(i) = s.find(':').filter(|&i| i > 0 && i + 1 < s.len()) else {
        return Err(ReferenceError::DigestInvalidFormat);
    };
    let (algorithm, encoded) = (&s[..i], &s[i + 1..]);
    let size = match algorithm {
        "sha256" => 32,
        "sha384" => 48,
        "sha512" => 64,
        _ => {
            return if REFERENCE_DIGEST.is_match(s) {
                Err(ReferenceError::DigestUnsupported)
            } else {
                Err(ReferenceError::DigestInvalidFormat)
            };
        }
    };
    if encoded.len() != size * 2 {
        return Err(ReferenceError::DigestInvalidLength);
    }
    if encoded
        .bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(ReferenceError::DigestInvalidFormat)
    }
}

// go-digest's own DigestRegexpAnchored, used only to choose between two errors.
static REFERENCE_DIGEST: LazyLock<Regex> =
    LazyLock::new(|| compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"));

/// Whether `s` is a valid tag.
pub fn validate_tag(s: &str) -> Result<(), ReferenceError> {
    if ANCHORED_TAG.is_match(s) {
        Ok(())
    } else {
        Err(ReferenceError::TagInvalidFormat)
    }
}

/// Whether `s` is a registry host with an optional port (`ghcr.io`,
/// `localhost:5000`, `[::1]:5000`) that Docker's normalization keeps as a
/// registry rather than reading as a Docker Hub path.
pub fn is_registry_host(s: &str) -> bool {
    ANCHORED_DOMAIN_AND_PORT.is_match(s)
        && (s.contains(['.', ':']) || s == "localhost" || s.to_lowercase() != s)
}

/// Whether `s` is a DNS-style domain name without port.
pub fn is_domain_name(s: &str) -> bool {
    ANCHORED_DOMAIN_NAME.is_match(s)
}

#[cfg(test)]
mod tests;
