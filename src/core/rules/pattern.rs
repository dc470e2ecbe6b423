//! A rule's `match`, validated and turned into the key it is indexed under.

use regex::Regex;

use crate::core::api::RuleMatch;
use crate::core::reference::{self, Reference};

/// The four match kinds, in precedence order (earlier wins at equal priority and scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchKind {
    Exact,
    Repository,
    Prefix,
    Regex,
}

impl MatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MatchKind::Exact => "exact",
            MatchKind::Repository => "repository",
            MatchKind::Prefix => "prefix",
            MatchKind::Regex => "regex",
        }
    }
}

/// A validated pattern.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// Key: [`Reference::exact_key`] of the pattern.
    Exact(String),
    /// Key: the normalized repository name.
    Repository(String),
    /// A literal prefix, compared as written.
    Prefix(String),
    /// `*.example.com`, stored as `.example.com`.
    Wildcard(String),
    /// The user's pattern wrapped in `^(?:…)$`, and the memory it takes.
    Regex(Regex, usize),
}

impl Pattern {
    /// The registry every reference it matches is at, when the pattern names one.
    pub fn static_domain(&self) -> Option<&str> {
        match self {
            Pattern::Exact(k) | Pattern::Repository(k) | Pattern::Prefix(k) => {
                Some(crate::core::reference::domain_of_normalized(k))
            }
            Pattern::Wildcard(_) | Pattern::Regex(..) => None,
        }
    }

    pub fn kind(&self) -> MatchKind {
        match self {
            Pattern::Exact(_) => MatchKind::Exact,
            Pattern::Repository(_) => MatchKind::Repository,
            Pattern::Prefix(_) | Pattern::Wildcard(_) => MatchKind::Prefix,
            Pattern::Regex(..) => MatchKind::Regex,
        }
    }

    /// The memory a regex takes (0 for the other kinds, which cost their text).
    pub fn cost(&self) -> usize {
        match self {
            Pattern::Regex(_, cost) => *cost,
            _ => 0,
        }
    }

    /// Validates a rule's `match`. The error says what to write instead.
    pub fn compile(m: &RuleMatch) -> Result<Pattern, String> {
        Self::compile_with(m, &mut super::regex_cost::RegexCache::default())
    }

    /// [`Pattern::compile`], taking regexes from `cache` when it compiled them already.
    pub fn compile_with(
        m: &RuleMatch,
        cache: &mut super::regex_cost::RegexCache,
    ) -> Result<Pattern, String> {
        let set: Vec<(&str, &String)> = [
            ("exact", &m.exact),
            ("repository", &m.repository),
            ("prefix", &m.prefix),
            ("regex", &m.regex),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect();
        let [(kind, value)] = set.as_slice() else {
            let names: Vec<&str> = set.iter().map(|(k, _)| *k).collect();
            return Err(if names.is_empty() {
                "match needs exactly one of exact, repository, prefix or regex; none is set"
                    .to_string()
            } else {
                format!(
                    "match needs exactly one of exact, repository, prefix or regex; {} are set",
                    names.join(" and ")
                )
            });
        };
        if value.is_empty() {
            return Err(format!("match.{kind} is empty"));
        }
        match *kind {
            "exact" => Reference::parse_normalized(value)
                .map(|r| Pattern::Exact(r.exact_key().to_string()))
                .map_err(|e| format!("match.exact {value:?} is not an image reference: {e}")),
            "repository" => {
                let r = Reference::parse_normalized(value).map_err(|e| {
                    format!("match.repository {value:?} is not a repository name: {e}")
                })?;
                if r.tag().is_some() || r.digest().is_some() {
                    return Err(format!(
                        "match.repository {value:?} carries a tag or digest; use match.exact for one tag, or write the repository alone ({})",
                        r.name()
                    ));
                }
                Ok(Pattern::Repository(r.name().to_string()))
            }
            "prefix" => compile_prefix(value),
            _ => cache
                .compile(&format!("^(?:{value})$"))
                .map(|(regex, cost)| Pattern::Regex(regex, cost))
                .map_err(|e| format!("match.regex {:?} {e}", crate::core::excerpt::excerpt(value))),
        }
    }
}

fn compile_prefix(value: &str) -> Result<Pattern, String> {
    if let Some(domain) = value.strip_prefix("*.") {
        if reference::is_domain_name(domain) {
            return Ok(Pattern::Wildcard(format!(".{domain}")));
        }
        return Err(format!(
            "match.prefix {value:?}: a wildcard is written `*.` followed by a domain name, without port or path (for example *.example.com)"
        ));
    }
    let host = value.split('/').next().unwrap_or_default();
    let host = host.split('@').next().unwrap_or_default();
    if !reference::is_registry_host(host) {
        return Err(format!(
            "match.prefix {value:?} must start with a registry host, as images are written once normalized (for example docker.io/{value} or ghcr.io/{value})"
        ));
    }
    if host == reference::LEGACY_DEFAULT_DOMAIN {
        return Err(format!(
            "match.prefix {value:?} never matches: images of {} are normalized to {}",
            reference::LEGACY_DEFAULT_DOMAIN,
            reference::DEFAULT_DOMAIN
        ));
    }
    if host.len() < value.len() {
        // A host followed by a path (and possibly tag or digest): the rest must be a
        // reference as written, not normalized.
        match Reference::parse(value) {
            Ok(r) if r.domain() == host => {}
            Ok(_) | Err(_) => {
                return Err(format!(
                    "match.prefix {value:?} is not a registry host followed by a valid repository path"
                ));
            }
        }
    }
    Ok(Pattern::Prefix(value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: &str, v: &str) -> RuleMatch {
        let mut r = RuleMatch::default();
        let v = Some(v.to_string());
        match kind {
            "exact" => r.exact = v,
            "repository" => r.repository = v,
            "prefix" => r.prefix = v,
            _ => r.regex = v,
        }
        r
    }

    fn compiled(kind: &str, v: &str) -> Result<String, String> {
        Pattern::compile(&m(kind, v)).map(|p| match p {
            Pattern::Exact(k) | Pattern::Repository(k) | Pattern::Prefix(k) => k,
            Pattern::Wildcard(k) => format!("*{k}"),
            Pattern::Regex(r, _) => r.as_str().to_string(),
        })
    }

    #[test]
    fn patterns_are_normalized_like_references() {
        assert_eq!(
            compiled("exact", "busybox").unwrap(),
            "docker.io/library/busybox"
        );
        assert_eq!(
            compiled("exact", "busybox:1.36").unwrap(),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(
            compiled("repository", "neondatabase/vm").unwrap(),
            "docker.io/neondatabase/vm"
        );
        assert_eq!(
            compiled("prefix", "docker.io/neondatabase").unwrap(),
            "docker.io/neondatabase"
        );
        assert_eq!(
            compiled("prefix", "localhost:5000").unwrap(),
            "localhost:5000"
        );
        assert_eq!(
            compiled("prefix", "docker.io/library").unwrap(),
            "docker.io/library"
        );
        assert_eq!(
            compiled("prefix", "*.example.com").unwrap(),
            "*.example.com"
        );
        assert_eq!(
            compiled("regex", "ghcr.io/(.*)").unwrap(),
            "^(?:ghcr.io/(.*))$"
        );
    }

    #[test]
    fn invalid_patterns_say_what_to_fix() {
        let cases = [
            ("exact", "Nginx", "must be lowercase"),
            ("repository", "nginx:1", "use match.exact"),
            ("prefix", "neondatabase", "must start with a registry host"),
            ("prefix", "index.docker.io/x", "normalized to docker.io"),
            ("prefix", "*.example.com:5000", "wildcard"),
            ("prefix", "ghcr.io/Acme", "valid repository path"),
            ("regex", "(", "not a valid RE2"),
            ("regex", "(a)\\1", "not a valid RE2"),
            ("exact", "", "is empty"),
        ];
        for (kind, value, fragment) in cases {
            let err = compiled(kind, value).unwrap_err();
            assert!(err.contains(fragment), "{kind} {value}: {err}");
        }
        let two = RuleMatch {
            exact: Some("a".into()),
            regex: Some("b".into()),
            ..Default::default()
        };
        assert!(
            Pattern::compile(&two)
                .unwrap_err()
                .contains("exact and regex are set")
        );
        assert!(
            Pattern::compile(&RuleMatch::default())
                .unwrap_err()
                .contains("none is set")
        );
    }
}
