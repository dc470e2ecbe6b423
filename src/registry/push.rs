//! The CNCF distribution registry's push notifications, read: which tags an envelope says
//! were pushed. Only manifest pushes that name a tag count (a push sends an event per blob
//! too). The event's digest is never used: a pushed tag is checked at the registry.

use serde::Deserialize;

use crate::core::reference::Reference;

/// The notification envelope (`application/vnd.docker.distribution.events.v2+json`).
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(default)]
    events: Vec<Event>,
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: Target,
    #[serde(default)]
    request: Request,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    repository: String,
    #[serde(default)]
    tag: String,
}

#[derive(Debug, Default, Deserialize)]
struct Request {
    /// The registry's host as the pusher addressed it (`host[:port]`).
    #[serde(default)]
    host: String,
}

/// The references (`host/repository:tag`, normalized) whose tags an envelope says were
/// pushed, each once.
pub fn pushed_tags(body: &[u8]) -> Result<Vec<Reference>, String> {
    let envelope: Envelope = serde_json::from_slice(body)
        .map_err(|e| format!("not a registry notification envelope: {e}"))?;
    let mut out = Vec::new();
    for event in envelope.events {
        let manifest = event.target.media_type.contains("manifest")
            || event.target.media_type.contains("image.index");
        if event.action != "push" || !manifest || event.target.tag.is_empty() {
            continue;
        }
        let text = format!(
            "{}/{}:{}",
            event.request.host, event.target.repository, event.target.tag
        );
        if let Ok(r) = Reference::parse_normalized(&text)
            && !out.contains(&r)
        {
            out.push(r);
        }
    }
    Ok(out)
}

/// Whether `header` (an `Authorization` value) carries `token` as a bearer token; compared
/// in constant time.
pub fn authorized(header: Option<&str>, token: &str) -> bool {
    let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUSH: &str = r#"{"events": [
      {"action": "push", "target": {"mediaType": "application/octet-stream",
        "digest": "sha256:aa", "repository": "acme/app"}, "request": {"host": "127.0.0.1:5056"}},
      {"action": "push", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:bb", "repository": "acme/app", "tag": "dev"},
        "request": {"host": "127.0.0.1:5056"}},
      {"action": "push", "target": {"mediaType": "application/vnd.oci.image.index.v1+json",
        "repository": "acme/app", "tag": "dev"}, "request": {"host": "127.0.0.1:5056"}},
      {"action": "pull", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
        "repository": "acme/app", "tag": "prod"}, "request": {"host": "127.0.0.1:5056"}},
      {"action": "push", "target": {"mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "repository": "library/busybox", "tag": "1"}, "request": {"host": "docker.io"}}
    ]}"#;

    #[test]
    fn manifest_pushes_with_a_tag_name_the_tags_to_check() {
        assert_eq!(
            pushed_tags(PUSH.as_bytes())
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["127.0.0.1:5056/acme/app:dev", "docker.io/library/busybox:1"]
        );
        assert!(pushed_tags(br#"{"events": []}"#).unwrap().is_empty());
        assert!(pushed_tags(b"not json").unwrap_err().contains("envelope"));
    }

    #[test]
    fn only_the_configured_bearer_token_is_accepted() {
        assert!(authorized(Some("Bearer s3cret"), "s3cret"));
        assert!(!authorized(Some("Bearer s3cre"), "s3cret"));
        assert!(!authorized(Some("Bearer s3cretX"), "s3cret"));
        assert!(!authorized(Some("Basic s3cret"), "s3cret"));
        assert!(!authorized(None, "s3cret"));
    }
}
