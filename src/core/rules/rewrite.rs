//! What a matching rule does to a reference: `to`, then the `tag` / `digest` setters.

use crate::core::api::MappingRule;
use crate::core::reference::{self, Reference};

use super::pattern::Pattern;

/// A rule's validated action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Action {
    to: Option<Target>,
    tag: Option<String>,
    digest: Option<String>,
    follow_tag: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    /// `exact` and `repository`: a parsed reference.
    Reference(Reference),
    /// `prefix`: replaces the matched prefix.
    Prefix(String),
    /// `*.domain` prefix: replaces the host (and the port when it has one).
    Host(String),
    /// `regex`: a `$1` / `${name}` template.
    Template(String),
}

impl Action {
    /// Validates `to`, `tag` and `digest` of a rule whose pattern is `pattern`.
    pub fn compile(rule: &MappingRule, pattern: &Pattern) -> Result<Action, String> {
        if let Some(tag) = &rule.tag {
            reference::validate_tag(tag).map_err(|_| {
                format!("tag {tag:?} is not a valid tag (letters, digits, '_', '.', '-'; at most 128; not starting with '.' or '-')")
            })?;
        }
        if let Some(digest) = &rule.digest {
            reference::validate_digest(digest)
                .map_err(|e| format!("digest {digest:?} is not valid: {e}"))?;
        }
        let to = match &rule.to {
            None => None,
            Some(to) if to.is_empty() => {
                return Err("to is empty; omit it to keep images as they are".into());
            }
            Some(to) => Some(match pattern {
                Pattern::Exact(_) | Pattern::Repository(_) => Target::Reference(
                    Reference::parse_normalized(to)
                        .map_err(|e| format!("to {to:?} is not an image reference: {e}"))?,
                ),
                Pattern::Prefix(_) => {
                    if !reference::is_registry_host(to) && Reference::parse_normalized(to).is_err()
                    {
                        return Err(format!(
                            "to {to:?} is neither a registry host nor the start of an image reference"
                        ));
                    }
                    Target::Prefix(to.clone())
                }
                Pattern::Wildcard(_) => {
                    let host = to.split('/').next().unwrap_or_default();
                    let location =
                        !to.contains('/') || Reference::parse(to).is_ok_and(|r| r.domain() == host);
                    if !reference::is_registry_host(host) || !location {
                        return Err(format!(
                            "to {to:?}: a *.domain prefix rewrites the registry host; write a host, optionally with a port and a path (mirror.example.net/mapped)"
                        ));
                    }
                    Target::Host(to.clone())
                }
                Pattern::Regex(..) => Target::Template(to.clone()),
            }),
        };
        if rule.follow_tag && rule.digest.is_some() {
            return Err(
                "followTag cannot be combined with digest: a pinned digest never moves".into(),
            );
        }
        Ok(Action {
            to,
            tag: rule.tag.clone(),
            digest: rule.digest.clone(),
            follow_tag: rule.follow_tag,
        })
    }

    /// Whether results of this rule are pinned to their tag's digest and follow it.
    pub fn follows_tag(&self) -> bool {
        self.follow_tag
    }

    /// A rule with neither `to` nor setters keeps matching references as they are.
    #[cfg(test)]
    pub fn is_exception(&self) -> bool {
        self.to.is_none() && self.tag.is_none() && self.digest.is_none()
    }

    /// Whether results keep the matched reference's registry (no `to`).
    pub fn keeps_registry(&self) -> bool {
        self.to.is_none()
    }

    /// The registry every result of this rule lands in, when it is known without a reference.
    pub fn static_domain(&self) -> Option<String> {
        match self.to.as_ref()? {
            Target::Reference(r) => Some(r.domain().to_string()),
            Target::Prefix(p) if reference::is_registry_host(p) => Some(p.clone()),
            Target::Prefix(p) => Reference::parse_normalized(p)
                .ok()
                .map(|r| r.domain().to_string()),
            Target::Host(h) => Some(h.split('/').next().unwrap_or_default().to_string()),
            Target::Template(_) => None,
        }
    }

    /// Applies the action to `r`, which `pattern` matched.
    pub fn apply(&self, r: &Reference, pattern: &Pattern) -> Result<Reference, String> {
        let base = match (&self.to, pattern) {
            (None, _) => r.clone(),
            (Some(Target::Reference(to)), Pattern::Repository(_)) => {
                if to.tag().is_some() || to.digest().is_some() {
                    to.clone()
                } else {
                    to.with_tag_digest(r.tag(), r.digest())
                }
            }
            (Some(Target::Reference(to)), _) => to.clone(),
            (Some(Target::Prefix(to)), Pattern::Prefix(p)) => {
                parse_result(&format!("{to}{}", &r.as_str()[p.len()..]))?
            }
            (Some(Target::Host(to)), _) => {
                let host = r.host();
                let rest = &r.as_str()[host.len()..];
                let after_port = &r.as_str()[r.domain().len()..];
                let text = if to.contains('/') || (to.contains(':') && !to.ends_with(']')) {
                    // `to` carries a port, or is a location with a path (as in CRI-O's
                    // registries.conf): it replaces the original port too, and the rest of
                    // the reference follows it.
                    format!("{to}{after_port}")
                } else {
                    format!("{to}{rest}")
                };
                parse_result(&text)?
            }
            (Some(Target::Template(t)), Pattern::Regex(re, _)) => {
                let caps = re
                    .captures(r.as_str())
                    .ok_or_else(|| "regex did not match during rewrite".to_string())?;
                let mut out = String::new();
                caps.expand(t, &mut out);
                parse_result(&out)?
            }
            (Some(_), _) => return Err("rule target does not fit its match kind".into()),
        };
        let out = match (&self.tag, &self.digest) {
            (None, None) => base,
            (tag, digest) => base.with_tag_digest(tag.as_deref(), digest.as_deref()),
        };
        if self.follow_tag && out.digest().is_some() {
            return Err(format!(
                "followTag: {out} already names a digest, so there is no tag to follow (drop the digest or followTag)"
            ));
        }
        Ok(out)
    }
}

fn parse_result(text: &str) -> Result<Reference, String> {
    Reference::parse_normalized(text)
        .map_err(|e| format!("rewrite produced {text:?}, which is not an image reference: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::api::RuleMatch;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn rule(
        kind: &str,
        pat: &str,
        to: Option<&str>,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> (Pattern, Action) {
        let mut matcher = RuleMatch::default();
        let value = Some(pat.to_string());
        match kind {
            "exact" => matcher.exact = value,
            "repository" => matcher.repository = value,
            "prefix" => matcher.prefix = value,
            _ => matcher.regex = value,
        }
        let rule = MappingRule {
            match_: matcher,
            to: to.map(Into::into),
            tag: tag.map(Into::into),
            digest: digest.map(Into::into),
            follow_tag: false,
        };
        let pattern = Pattern::compile(&rule.match_).unwrap();
        let action = Action::compile(&rule, &pattern).unwrap();
        (pattern, action)
    }

    fn apply(rule: &(Pattern, Action), image: &str) -> String {
        let r = Reference::parse_normalized(image).unwrap();
        match rule.1.apply(&r, &rule.0) {
            Ok(r) => r.to_string(),
            Err(e) => format!("ERR {e}"),
        }
    }

    #[test]
    fn repository_keeps_tag_and_digest_unless_to_has_its_own() {
        let keep = rule(
            "repository",
            "neondatabase/vm",
            Some("localhost:5000/vm"),
            None,
            None,
        );
        assert_eq!(apply(&keep, "neondatabase/vm:1"), "localhost:5000/vm:1");
        assert_eq!(
            apply(&keep, &format!("neondatabase/vm@{D}")),
            format!("localhost:5000/vm@{D}")
        );
        let own = rule(
            "repository",
            "neondatabase/vm",
            Some("localhost:5000/vm:tilt-1"),
            None,
            None,
        );
        assert_eq!(
            apply(&own, &format!("neondatabase/vm:1@{D}")),
            "localhost:5000/vm:tilt-1"
        );
    }

    #[test]
    fn setters_follow_kustomize() {
        let tag = rule("exact", "busybox:1.36", None, Some("1.37"), None);
        assert_eq!(
            apply(&tag, "busybox:1.36"),
            "docker.io/library/busybox:1.37"
        );
        let tag = rule("repository", "busybox", None, Some("1.37"), None);
        assert_eq!(
            apply(&tag, &format!("busybox:1.36@{D}")),
            "docker.io/library/busybox:1.37"
        );
        let digest = rule("repository", "busybox", None, None, Some(D));
        assert_eq!(
            apply(&digest, "busybox:1.36"),
            format!("docker.io/library/busybox@{D}")
        );
        let both = rule(
            "repository",
            "busybox",
            Some("mirror.io/busybox"),
            Some("x"),
            Some(D),
        );
        assert_eq!(
            apply(&both, "busybox:1.36"),
            format!("mirror.io/busybox:x@{D}")
        );
    }

    #[test]
    fn a_wildcard_rewrites_to_a_location_with_a_path() {
        let location = rule(
            "prefix",
            "*.example.com",
            Some("mirror.example.net/mapped"),
            None,
            None,
        );
        assert_eq!(
            apply(&location, "sub.example.com/foo/bar"),
            "mirror.example.net/mapped/foo/bar"
        );
        assert_eq!(
            apply(&location, "sub.example.com:5000/foo/bar:1"),
            "mirror.example.net/mapped/foo/bar:1"
        );
        assert_eq!(
            location.1.static_domain().as_deref(),
            Some("mirror.example.net")
        );
        for bad in [
            "mirror.example.net/Mapped",
            "mirror.example.net/",
            "/mapped",
            "mapped",
        ] {
            let m = RuleMatch {
                prefix: Some("*.example.com".into()),
                ..Default::default()
            };
            let r = MappingRule {
                match_: m,
                to: Some(bad.into()),
                ..Default::default()
            };
            let p = Pattern::compile(&r.match_).unwrap();
            assert!(Action::compile(&r, &p).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefix_wildcard_and_regex_rewrites() {
        let p = rule(
            "prefix",
            "docker.io/neondatabase",
            Some("registry.internal:5000/neon"),
            None,
            None,
        );
        assert_eq!(
            apply(&p, "neondatabase/vm:1"),
            "registry.internal:5000/neon/vm:1"
        );
        let host = rule("prefix", "*.example.com", Some("mirror.local"), None, None);
        assert_eq!(
            apply(&host, "a.example.com:5000/x/y:1"),
            "mirror.local:5000/x/y:1"
        );
        let host_port = rule(
            "prefix",
            "*.example.com",
            Some("mirror.local:6000"),
            None,
            None,
        );
        assert_eq!(
            apply(&host_port, "a.example.com:5000/x:1"),
            "mirror.local:6000/x:1"
        );
        assert_eq!(
            apply(&host_port, "a.example.com/x:1"),
            "mirror.local:6000/x:1"
        );
        let re = rule(
            "regex",
            r"ghcr\.io/acme/(?P<img>.*)",
            Some("mirror.local/acme/${img}"),
            None,
            None,
        );
        assert_eq!(apply(&re, "ghcr.io/acme/a/b:2"), "mirror.local/acme/a/b:2");
        let re1 = rule(
            "regex",
            r"docker\.io/library/(\w+):(.*)",
            Some("m.io/$1:v$2"),
            None,
            None,
        );
        assert_eq!(apply(&re1, "nginx:1.27"), "m.io/nginx:v1.27");
    }

    #[test]
    fn invalid_rewrite_is_an_error_not_a_reference() {
        let re = rule(
            "regex",
            r"docker\.io/library/(.*)",
            Some("mirror.io/Bad/$1"),
            None,
            None,
        );
        assert!(apply(&re, "nginx").starts_with("ERR rewrite produced \"mirror.io/Bad/nginx\""));
        // The path `a…a/library/nginx` is over 255 characters (the host does not count).
        let long = format!("mirror.io/{}", "a".repeat(250));
        let p = rule("prefix", "docker.io", Some(&long), None, None);
        assert!(
            apply(&p, "nginx").ends_with("repository name must not be more than 255 characters")
        );
    }

    #[test]
    fn exception_keeps_the_reference() {
        let ex = rule("prefix", "docker.io/library", None, None, None);
        assert!(ex.1.is_exception());
        assert_eq!(apply(&ex, "nginx:1"), "docker.io/library/nginx:1");
    }
}
