//! The rules nearest to a reference that none matches, by the edit distance between its
//! repository and what each rule matches: so that a typo in a rule, or in an image, shows.
//! For `imagemap explain`, which asks for few; it scans the rules in scope.

use super::compiled_rule::RuleId;
use super::mapping_input::{MappingScope, RuleRef};
use super::pattern::Pattern;
use super::requester::{Mode, Requester};
use super::rule_set::RuleSet;
use crate::core::reference::Reference;

impl RuleSet {
    /// At most `n` rules that apply to `who` whose exact, repository or prefix match is
    /// nearest to `r`'s repository, nearest first; each with what it matches. Rules farther
    /// than half the repository's length are left out.
    #[must_use]
    pub fn nearest(&self, r: &Reference, who: &Requester<'_>, n: usize) -> Vec<(RuleRef, String)> {
        let name = r.name();
        let limit = name.len() / 2;
        let mut found: Vec<(usize, RuleId, &str)> = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let key = &self.mappings[rule.mapping].key;
            if key.scope == MappingScope::Namespaced
                && (!who.namespace_rules || key.namespace.as_deref() != Some(who.namespace))
            {
                continue;
            }
            if !self.mapping_applies(rule.mapping, who, Mode::Live) {
                continue;
            }
            let matched = match &rule.pattern {
                Pattern::Exact(k) | Pattern::Repository(k) | Pattern::Prefix(k) => k.as_str(),
                Pattern::Wildcard(_) | Pattern::Regex(..) => continue,
            };
            let compared = matched.split([':', '@']).next().unwrap_or(matched);
            let distance = edit_distance(name, compared);
            if distance <= limit {
                found.push((
                    distance,
                    RuleId::try_from(i).unwrap_or(RuleId::MAX),
                    matched,
                ));
            }
        }
        found.sort_unstable();
        found
            .into_iter()
            .take(n)
            .map(|(_, id, matched)| (self.rule_ref(id), matched.to_string()))
            .collect()
    }
}

/// Levenshtein distance, by bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_changes() {
        assert_eq!(edit_distance("nginx", "nginx"), 0);
        assert_eq!(
            edit_distance("docker.io/library/ngnix", "docker.io/library/nginx"),
            2
        );
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
