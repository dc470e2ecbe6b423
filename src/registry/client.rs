//! The HTTP side of asking registries: one client (reqwest: HTTP/1 over rustls, no proxy
//! from the environment, no redirect followed on its own), every request to a host the
//! [`Reach`] allows, every body read to a bound before it is kept.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, LOCATION};
use reqwest::{Method, Response, StatusCode, Url};
use sha2::{Digest as _, Sha256};

use super::error::{Cause, Role};
use crate::core::allowed_registries::AllowedRegistries;
use crate::core::excerpt::excerpt;
use crate::core::reference::DEFAULT_DOMAIN;

/// The longest a connection may take to open.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);
/// The longest a registry may stay silent mid-answer.
const READ_LIMIT: Duration = Duration::from_secs(10);
/// Most redirects followed (to the same host only).
const MAX_REDIRECTS: usize = 3;
/// Most bytes of an error body read, for the message.
pub const ERROR_BODY_LIMIT: usize = 4 << 10;

/// Where the operator may connect, and over what.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Hosts that may be contacted (`--allowed-registries`).
    pub allowed: AllowedRegistries,
    /// Registries reached over plain HTTP (`--insecure-registries`); the others over HTTPS.
    pub insecure: Vec<String>,
    /// `true` (the operator): without a list, contact nothing. `false` (`imagemap
    /// resolve`, on a user's own machine): without a list, contact any registry.
    pub needs_list: bool,
}

impl Reach {
    /// Whether `domain` (`host[:port]`) is reached over plain HTTP.
    #[must_use]
    pub fn is_insecure(&self, domain: &str) -> bool {
        self.insecure.iter().any(|i| i.eq_ignore_ascii_case(domain))
    }

    /// `Ok` when `domain` may be contacted as `role`.
    pub fn check(&self, domain: &str, role: Role) -> Result<(), Cause> {
        if self.needs_list && !self.allowed.is_listed() {
            return Err(Cause::NoAllowList);
        }
        if self.allowed.allows(domain) {
            Ok(())
        } else {
            Err(Cause::NotAllowed {
                host: excerpt(domain),
                role,
            })
        }
    }

    /// The base URL of the registry `domain` (Docker Hub's API lives at registry-1).
    pub fn registry_url(&self, domain: &str) -> Result<Url, Cause> {
        let host = if domain == DEFAULT_DOMAIN {
            "registry-1.docker.io"
        } else {
            domain
        };
        let scheme = if self.is_insecure(domain) {
            "http"
        } else {
            "https"
        };
        Url::parse(&format!("{scheme}://{host}/"))
            .map_err(|e| Cause::InvalidReference(excerpt(&format!("{domain}: {e}"))))
    }
}

/// `host[:port]` of a URL, as `--allowed-registries` names hosts.
#[must_use]
pub fn domain_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// An HTTP client for registries and their token services.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Http {
    pub fn new() -> Result<Http, String> {
        // The same TLS provider as the Kubernetes client; installed once per process (a
        // second install is refused, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            // Names are resolved in Rust (from /etc/resolv.conf and /etc/hosts), not by
            // glibc, which a static binary cannot load its lookup modules for.
            .hickory_dns(true)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_LIMIT)
            .read_timeout(READ_LIMIT)
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .user_agent(concat!("imagemap/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the registry client: {e}"))?;
        Ok(Http { client })
    }

    /// Sends `method` to `url` with `headers`, once `reach` allows `domain` as `role` (a
    /// registry by the name references give it — `docker.io` for Docker Hub, whose API
    /// lives at another host — a token service by its URL's host), and follows redirects
    /// to the same scheme, host and port only.
    pub async fn send(
        &self,
        reach: &Reach,
        method: Method,
        mut url: Url,
        headers: &HeaderMap,
        (domain, role): (&str, Role),
    ) -> Result<Response, Cause> {
        reach.check(domain, role)?;
        for _ in 0..=MAX_REDIRECTS {
            let response = self
                .client
                .request(method.clone(), url.clone())
                .headers(headers.clone())
                .send()
                .await
                .map_err(|e| unreachable(&e))?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let Some(next) = response
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| url.join(l).ok())
            else {
                return Ok(response);
            };
            let same = next.scheme() == url.scheme()
                && next.host_str() == url.host_str()
                && next.port_or_known_default() == url.port_or_known_default();
            if !same {
                // Never followed, allowed or not: the target is said only by host.
                return Err(Cause::Redirected {
                    to: excerpt(&format!("{}://{}", next.scheme(), domain_of(&next))),
                });
            }
            url = next;
        }
        Err(Cause::TooManyRedirects)
    }
}

/// A connection error, said briefly (reqwest's chain of sources, cut).
fn unreachable(e: &reqwest::Error) -> Cause {
    if e.is_connect() && e.is_timeout() {
        return Cause::Unreachable(format!("no connection within {CONNECT_LIMIT:?}"));
    }
    if e.is_timeout() {
        return Cause::NoAnswer(READ_LIMIT);
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    Cause::Unreachable(excerpt(&text))
}

/// A body read whole, up to `limit` bytes; longer is an error without reading on.
pub async fn read_body(
    response: &mut Response,
    limit: usize,
    what: &'static str,
) -> Result<Bytes, Cause> {
    let too_large = Cause::TooLarge { what, limit };
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large);
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(&e))? {
        if body.len() + chunk.len() > limit {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The `sha256:` digest of a body, hashed as it streams, up to `limit` bytes.
pub async fn hash_body(
    response: &mut Response,
    limit: usize,
    what: &'static str,
) -> Result<String, Cause> {
    let too_large = Cause::TooLarge { what, limit };
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large);
    }
    let mut hasher = Sha256::new();
    let mut read = 0;
    while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(&e))? {
        read += chunk.len();
        if read > limit {
            return Err(too_large);
        }
        hasher.update(&chunk);
    }
    let hash = hasher.finalize();
    let mut digest = String::with_capacity(7 + 64);
    digest.push_str("sha256:");
    for b in hash {
        use std::fmt::Write as _;
        let _ = write!(digest, "{b:02x}");
    }
    Ok(digest)
}

/// The distribution registry's error envelope.
#[derive(serde::Deserialize)]
struct Envelope {
    errors: Vec<ErrorEntry>,
}

#[derive(serde::Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// What an error answer says: the registry's error codes and messages (the distribution
/// error envelope), else the start of its text — an excerpt either way.
pub async fn error_said(response: &mut Response) -> String {
    let Ok(body) = read_body(response, ERROR_BODY_LIMIT, "error body").await else {
        return String::new();
    };
    let text = match serde_json::from_slice::<Envelope>(&body) {
        Ok(envelope) => envelope
            .errors
            .iter()
            .map(|e| format!("{} {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; "),
        Err(_) => String::from_utf8_lossy(&body).into_owned(),
    };
    excerpt(&text)
}

/// The status as the error it is, when it is one.
pub fn status_cause(status: StatusCode, said: String) -> Cause {
    match status.as_u16() {
        401 | 403 => Cause::Refused {
            status: status.as_u16(),
        },
        404 => Cause::NotFound,
        code => Cause::Status { status: code, said },
    }
}

/// A header's value as text, if it is some.
pub fn header_text<'r>(response: &'r Response, name: &HeaderName) -> Option<&'r str> {
    response
        .headers()
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_allows_listed_hosts_and_says_why_not() {
        let reach = Reach {
            allowed: AllowedRegistries::only(vec!["ok.io".into(), "local:5000".into()]),
            insecure: vec!["local:5000".into()],
            needs_list: true,
        };
        assert!(reach.check("ok.io", Role::Registry).is_ok());
        assert_eq!(
            reach.check("10.0.0.1", Role::TokenService),
            Err(Cause::NotAllowed {
                host: "10.0.0.1".into(),
                role: Role::TokenService
            })
        );
        assert_eq!(
            reach.registry_url("local:5000").unwrap().as_str(),
            "http://local:5000/"
        );
        assert_eq!(
            reach.registry_url("ok.io").unwrap().as_str(),
            "https://ok.io/"
        );
        assert_eq!(
            reach.registry_url("docker.io").unwrap().as_str(),
            "https://registry-1.docker.io/"
        );
        let unlisted = Reach {
            needs_list: true,
            ..Reach::default()
        };
        assert_eq!(
            unlisted.check("ok.io", Role::Registry),
            Err(Cause::NoAllowList)
        );
        assert!(Reach::default().check("any.io", Role::Registry).is_ok());
    }

    #[test]
    fn domains_of_urls_keep_their_port() {
        let url = Url::parse("http://127.0.0.1:5000/v2/").unwrap();
        assert_eq!(domain_of(&url), "127.0.0.1:5000");
        let url = Url::parse("https://auth.docker.io/token").unwrap();
        assert_eq!(domain_of(&url), "auth.docker.io");
    }
}
