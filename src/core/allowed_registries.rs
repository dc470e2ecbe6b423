//! `--allowed-registries`: the one list of registries the operator's rules may point to and
//! the operator may contact — digest checks, the token services registries name and the
//! redirects they send. Pure.

use crate::core::reference;

/// The registries (`host[:port]` or `*.domain`) an administrator allowed; `None`: any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedRegistries(Option<Vec<String>>);

impl AllowedRegistries {
    /// Any registry (no list given).
    #[must_use]
    pub fn any() -> Self {
        AllowedRegistries(None)
    }

    /// Only the registries of `list`.
    #[must_use]
    pub fn only(list: Vec<String>) -> Self {
        AllowedRegistries(Some(list))
    }

    /// The registries listed (none when any is allowed).
    #[must_use]
    pub fn list(&self) -> &[String] {
        self.0.as_deref().unwrap_or_default()
    }

    /// Whether a list was given.
    #[must_use]
    pub fn is_listed(&self) -> bool {
        self.0.is_some()
    }

    /// Whether `domain` (`host[:port]`) is allowed: named as it is, by its host alone (any
    /// port), or under a `*.domain` entry.
    #[must_use]
    pub fn allows(&self, domain: &str) -> bool {
        let Some(allowed) = &self.0 else {
            return true;
        };
        let domain = domain.to_ascii_lowercase();
        let host = reference::host_of(&domain);
        allowed.iter().any(|a| {
            let a = a.to_ascii_lowercase();
            match a.strip_prefix("*.") {
                Some(suffix) => {
                    host.len() > suffix.len() + 1
                        && host.ends_with(suffix)
                        && host[..host.len() - suffix.len()].ends_with('.')
                }
                None => a == domain || a == host,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ports_and_wildcards_are_allowed_as_listed() {
        let list = AllowedRegistries::only(vec![
            "ok.io".into(),
            "local:5000".into(),
            "*.mirror.io".into(),
        ]);
        assert!(list.is_listed());
        assert!(list.allows("ok.io"));
        assert!(list.allows("ok.io:443"), "a host alone allows any port");
        assert!(list.allows("OK.io"));
        assert!(list.allows("local:5000"));
        assert!(!list.allows("local:5001"));
        assert!(!list.allows("local"));
        assert!(list.allows("eu.mirror.io"));
        assert!(list.allows("a.b.mirror.io:5000"));
        assert!(!list.allows("mirror.io"));
        assert!(!list.allows("evilmirror.io"));
        assert!(!list.allows("ok.io.evil"));
        assert!(AllowedRegistries::any().allows("anything:1"));
        assert!(!AllowedRegistries::any().is_listed());
    }
}
