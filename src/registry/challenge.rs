//! A registry's `WWW-Authenticate` challenge, read: HTTP basic, or a bearer token from the
//! token service its `realm` names (the distribution token protocol). Pure.

/// How a registry wants to be asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// HTTP basic authentication.
    Basic,
    /// A token from `realm`, for `service`.
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// The challenge to follow among those of one `WWW-Authenticate` value: a bearer one
/// before basic. `Err` says why none can be followed.
pub fn parse(header: &str) -> Result<Challenge, String> {
    let mut basic = false;
    for (scheme, params) in challenges(header) {
        if scheme.eq_ignore_ascii_case("bearer") {
            let get = |name: &str| {
                params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            let Some(realm) = get("realm").filter(|r| !r.is_empty()) else {
                return Err("a bearer challenge without a realm".into());
            };
            return Ok(Challenge::Bearer {
                realm,
                service: get("service"),
                scope: get("scope"),
            });
        }
        basic |= scheme.eq_ignore_ascii_case("basic");
    }
    if basic {
        Ok(Challenge::Basic)
    } else {
        Err("no basic or bearer challenge".into())
    }
}

/// The challenges of a header value: each scheme with its parameters.
fn challenges(header: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut rest = header.trim_start();
    while !rest.is_empty() {
        let (word, after) = token(rest);
        if word.is_empty() {
            // A stray separator.
            rest = after.get(1..).unwrap_or_default().trim_start();
            continue;
        }
        let after = after.trim_start();
        match after.strip_prefix('=') {
            // A parameter of the challenge before it.
            Some(value) if !out.is_empty() && !value.starts_with('=') => {
                let (value, next) = param_value(value.trim_start());
                if let Some((_, params)) = out.last_mut() {
                    params.push((word.to_string(), value));
                }
                rest = next.trim_start().trim_start_matches(',').trim_start();
            }
            // A new challenge (token68 values are skipped: no scheme here uses them).
            _ => {
                out.push((word.to_string(), Vec::new()));
                rest = after.trim_start_matches(',').trim_start();
            }
        }
    }
    out
}

/// The token at the start of `s` and what follows it.
fn token(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| c.is_whitespace() || matches!(c, ',' | '=' | '"'))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// A quoted string (with `\` escapes) or a token, and what follows it.
fn param_value(s: &str) -> (String, &str) {
    let Some(quoted) = s.strip_prefix('"') else {
        let (value, rest) = token(s);
        return (value.to_string(), rest);
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '"' => return (value, &quoted[i + 1..]),
            c => value.push(c),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_and_distribution_challenges_are_read() {
        assert_eq!(
            parse(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#
            ),
            Ok(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/nginx:pull".into()),
            })
        );
        assert_eq!(
            parse(r#"Basic realm="imagemap-test""#),
            Ok(Challenge::Basic)
        );
        assert_eq!(
            parse(r#"bearer realm=https://t.example/token, service = "reg""#),
            Ok(Challenge::Bearer {
                realm: "https://t.example/token".into(),
                service: Some("reg".into()),
                scope: None,
            })
        );
    }

    #[test]
    fn bearer_wins_over_basic_and_escapes_are_read() {
        assert_eq!(
            parse(r#"Basic realm="a, b", Bearer realm="https://t.example/\"x\"""#),
            Ok(Challenge::Bearer {
                realm: r#"https://t.example/"x""#.into(),
                service: None,
                scope: None,
            })
        );
    }

    #[test]
    fn unusable_challenges_say_why() {
        assert!(parse("Bearer service=x").unwrap_err().contains("realm"));
        assert!(parse("Negotiate abc==").unwrap_err().contains("no basic"));
        assert!(parse("").is_err());
        assert!(parse(",,, =\"").is_err());
    }
}
