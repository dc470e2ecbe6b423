//! Which digest a tag points to, asked as the distribution protocol has it: a manifest
//! HEAD (its `Docker-Content-Digest`; a multi-platform index by its own digest); a GET
//! hashed as it streams when the HEAD names none; and, when the registry challenges, HTTP
//! basic or a token from the token service it names. Four requests at most (each
//! following at most three redirects to its own host), each to a host the [`Reach`]
//! allows, each answer read to a bound.

use std::time::{Duration, Instant};

use base64::Engine;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, HeaderMap, HeaderName, HeaderValue, WWW_AUTHENTICATE,
};
use reqwest::{Method, Response, StatusCode, Url};

use super::challenge::{self, Challenge};
use super::client::{
    Http, Reach, domain_of, error_said, hash_body, header_text, read_body, status_cause,
};
use super::error::{Cause, Role};
use super::token_cache::{Key, TokenCache};
use crate::core::excerpt::excerpt;
use crate::core::reference::{Reference, validate_digest};

/// Most bytes of a manifest (distribution's own limit).
pub const MANIFEST_LIMIT: usize = 4 << 20;
/// Most bytes of a token service's answer.
pub const TOKEN_LIMIT: usize = 16 << 10;
/// Most bytes of a token kept (and sent).
const TOKEN_LENGTH_LIMIT: usize = 8 << 10;
/// How long a token is used when its service does not say (the protocol's default).
const DEFAULT_TOKEN_LIFE: Duration = Duration::from_mins(1);

/// The manifest types asked for: images and indexes, OCI and Docker.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.docker.distribution.manifest.v2+json";

const CONTENT_DIGEST: HeaderName = HeaderName::from_static("docker-content-digest");

/// Who asks.
#[derive(Debug, Clone, Copy)]
pub enum Login<'a> {
    Anonymous,
    Basic {
        username: &'a str,
        password: &'a str,
    },
    /// A registry token, sent as a bearer token.
    Token(&'a str),
}

/// One question to one registry.
pub struct Asking<'a> {
    pub http: &'a Http,
    pub reach: &'a Reach,
    pub tokens: &'a TokenCache,
    pub login: Login<'a>,
    /// Which credentials `login` is (`None`: anonymous), for the token cache.
    pub entry: Option<usize>,
}

impl Asking<'_> {
    /// The digest `reference` (which names a tag) points to now.
    pub async fn digest(&self, reference: &Reference) -> Result<String, Cause> {
        let domain = reference.domain();
        self.reach.check(domain, Role::Registry)?;
        let tag = reference.tag().unwrap_or("latest");
        let url = self
            .reach
            .registry_url(domain)?
            .join(&format!("v2/{}/manifests/{tag}", reference.path()))
            .map_err(|e| Cause::InvalidReference(excerpt(&e.to_string())))?;
        let key: Key = (domain.to_string(), reference.path().to_string(), self.entry);
        let mut authorization =
            self.tokens
                .get(&key, Instant::now())
                .or_else(|| match self.login {
                    Login::Token(token) => bearer(token),
                    _ => None,
                });
        let mut challenged = false;
        let mut method = Method::HEAD;
        loop {
            let mut response = self
                .send(method.clone(), &url, domain, authorization.as_ref())
                .await?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !challenged {
                // Kept authorizations may have expired: the challenge says what to send.
                challenged = true;
                self.tokens.forget(&key);
                let header = header_text(&response, &WWW_AUTHENTICATE).unwrap_or_default();
                let answer = self.answer(header, reference, domain).await?;
                self.tokens
                    .put(key.clone(), answer.0.clone(), answer.1, Instant::now());
                authorization = Some(answer.0);
                continue;
            }
            if status.is_success() {
                if let Some(digest) = header_text(&response, &CONTENT_DIGEST) {
                    return valid_digest(digest);
                }
                if method == Method::HEAD {
                    method = Method::GET;
                    continue;
                }
                return hash_body(&mut response, MANIFEST_LIMIT, "manifest").await;
            }
            // A registry that does not take HEAD is asked with GET.
            if method == Method::HEAD
                && matches!(
                    status,
                    StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
                )
            {
                method = Method::GET;
                continue;
            }
            let said = error_said(&mut response).await;
            return Err(status_cause(status, said));
        }
    }

    async fn send(
        &self,
        method: Method,
        url: &Url,
        domain: &str,
        authorization: Option<&HeaderValue>,
    ) -> Result<Response, Cause> {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static(MANIFEST_TYPES));
        if let Some(a) = authorization {
            headers.insert(AUTHORIZATION, a.clone());
        }
        self.http
            .send(
                self.reach,
                method,
                url.clone(),
                &headers,
                (domain, Role::Registry),
            )
            .await
    }

    /// What to send after the challenge `header`, and for how long it may be reused.
    async fn answer(
        &self,
        header: &str,
        reference: &Reference,
        domain: &str,
    ) -> Result<(HeaderValue, Duration), Cause> {
        let challenge = challenge::parse(header).map_err(Cause::BadChallenge)?;
        match challenge {
            Challenge::Basic => match basic(self.login) {
                Some(value) => Ok((value, super::token_cache::MAX_REUSE)),
                // Nothing to answer with.
                None => Err(Cause::Refused { status: 401 }),
            },
            Challenge::Bearer { realm, service, .. } => {
                self.token(&realm, service.as_deref(), reference, domain)
                    .await
            }
        }
    }

    /// A pull token for `reference`'s repository from the token service at `realm`.
    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        reference: &Reference,
        domain: &str,
    ) -> Result<(HeaderValue, Duration), Cause> {
        let url = token_url(self.reach, domain, realm, service, reference.path())?;
        let mut headers = HeaderMap::new();
        if let Some(value) = basic(self.login) {
            headers.insert(AUTHORIZATION, value);
        }
        let realm_host = domain_of(&url);
        let mut response = self
            .http
            .send(
                self.reach,
                Method::GET,
                url,
                &headers,
                (&realm_host, Role::TokenService),
            )
            .await?;
        let status = response.status();
        if !status.is_success() {
            let said = error_said(&mut response).await;
            return Err(match status_cause(status, said) {
                Cause::NotFound => Cause::BadToken("the token service answered 404".into()),
                other => other,
            });
        }
        let body = read_body(&mut response, TOKEN_LIMIT, "token service's answer").await?;
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|e| Cause::BadToken(excerpt(&format!("not JSON: {e}"))))?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Cause::BadToken("no token in it".into()))?;
        if token.len() > TOKEN_LENGTH_LIMIT {
            return Err(Cause::BadToken(format!(
                "the token is longer than the {} KiB the operator keeps",
                TOKEN_LENGTH_LIMIT >> 10
            )));
        }
        let value = bearer(&token)
            .ok_or_else(|| Cause::BadToken("the token is not a valid header value".into()))?;
        let life = answer
            .expires_in
            .map_or(DEFAULT_TOKEN_LIFE, Duration::from_secs);
        // Renewed before it expires.
        Ok((value, life.mul_f64(0.9)))
    }
}

/// A token service's answer.
#[derive(serde::Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// Where to ask for a pull token of `repository`: the `realm` a registry at `domain` named,
/// over HTTPS (plain HTTP only for a registry reached so itself), with the service and
/// scope. Whether its host may be contacted is checked as it is asked.
fn token_url(
    reach: &Reach,
    domain: &str,
    realm: &str,
    service: Option<&str>,
    repository: &str,
) -> Result<Url, Cause> {
    let mut url = Url::parse(realm)
        .map_err(|e| Cause::BadChallenge(excerpt(&format!("realm {realm:?}: {e}"))))?;
    match url.scheme() {
        "https" => {}
        "http" if reach.is_insecure(domain) => {}
        "http" => {
            return Err(Cause::PlainHttpRealm {
                realm: excerpt(&domain_of(&url)),
            });
        }
        other => {
            return Err(Cause::BadChallenge(excerpt(&format!(
                "realm scheme {other:?}"
            ))));
        }
    }
    {
        let mut query = url.query_pairs_mut();
        if let Some(service) = service {
            query.append_pair("service", service);
        }
        query.append_pair("scope", &format!("repository:{repository}:pull"));
    }
    Ok(url)
}

fn bearer(token: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("Bearer {token}")).ok()
}

fn basic(login: Login<'_>) -> Option<HeaderValue> {
    let Login::Basic { username, password } = login else {
        return None;
    };
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// A digest the registry sent, if it is one.
fn valid_digest(text: &str) -> Result<String, Cause> {
    match validate_digest(text) {
        Ok(()) => Ok(text.to_string()),
        Err(_) => Err(Cause::InvalidDigest(excerpt(text))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_digests_of_the_exact_length_are_taken() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert_eq!(valid_digest(&good), Ok(good.clone()));
        for bad in [
            "sha256:zz".to_string(),
            format!("sha256:{}", "a".repeat(63)),
            format!("sha256:{}", "A".repeat(64)),
            format!("md5:{}", "a".repeat(32)),
            "x".repeat(10_000),
        ] {
            let Err(Cause::InvalidDigest(said)) = valid_digest(&bad) else {
                panic!("{bad} taken");
            };
            assert!(said.chars().count() <= crate::core::excerpt::EXCERPT_CHARS);
        }
    }

    #[test]
    fn a_realm_is_asked_over_https_unless_its_registry_is_insecure() {
        let reach = Reach {
            insecure: vec!["local:5000".into()],
            ..Reach::default()
        };
        let url = token_url(
            &reach,
            "r.example",
            "https://auth.example/token",
            Some("reg"),
            "team/app",
        )
        .unwrap();
        assert_eq!(
            url.as_str(),
            "https://auth.example/token?service=reg&scope=repository%3Ateam%2Fapp%3Apull"
        );
        assert_eq!(
            token_url(
                &reach,
                "r.example",
                "http://auth.example:8080/token",
                None,
                "app"
            ),
            Err(Cause::PlainHttpRealm {
                realm: "auth.example:8080".into()
            })
        );
        assert!(
            token_url(
                &reach,
                "local:5000",
                "http://localhost:1/token",
                None,
                "app"
            )
            .is_ok()
        );
        assert!(matches!(
            token_url(&reach, "r.example", "file:///etc/passwd", None, "app"),
            Err(Cause::BadChallenge(_))
        ));
        assert!(matches!(
            token_url(&reach, "r.example", "not a url", None, "app"),
            Err(Cause::BadChallenge(_))
        ));
    }

    #[test]
    fn basic_credentials_are_sent_only_for_a_basic_login() {
        let login = Login::Basic {
            username: "u",
            password: "p:w",
        };
        let value = basic(login).unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), "Basic dTpwOnc=");
        assert!(basic(Login::Anonymous).is_none());
        assert!(basic(Login::Token("t")).is_none());
    }
}
