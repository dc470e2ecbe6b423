//! The rule mix of the benchmarks (resolve, admission, admission_pods): 40% exact, 30%
//! repository, 25% prefix (a fifth of them `*.` wildcards), 5% regex, spread over mappings of
//! at most 200 rules (at least 11 mappings), one in eleven cluster-scoped.

#![allow(dead_code)] // each benchmark uses part of it

use imagemap::core::api::{MappingRule, RuleMatch};
use imagemap::core::rules::{MappingInput, MappingScope};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Rule `i` of the mix.
pub fn rule(i: usize) -> MappingRule {
    let mut m = RuleMatch::default();
    let to;
    match i % 20 {
        0..=7 => {
            m.exact = Some(format!("team{}/app{i}:v{i}", i % 50));
            to = format!("mirror.io/exact/app{i}:v{i}");
        }
        8..=13 => {
            m.repository = Some(format!("team{}/svc{i}", i % 50));
            to = format!("mirror.io/repo/svc{i}");
        }
        14..=17 => {
            m.prefix = Some(format!("registry{i}.example.org/group{i}"));
            to = format!("mirror.io/prefix{i}");
        }
        18 => {
            m.prefix = Some(format!("*.zone{i}.example.net"));
            to = "mirror.io".to_string();
        }
        _ => {
            m.regex = Some(format!(r"regex{i}\.example\.com/(.*)"));
            to = format!("mirror.io/regex{i}/$1");
        }
    }
    MappingRule {
        match_: m,
        to: Some(to),
        ..Default::default()
    }
}

/// `n` rules of the mix in their mappings: the namespaced ones in `namespace`, the
/// cluster-scoped ones selecting namespaces by `namespace_selector` (`None`: all).
pub fn mappings(
    n: usize,
    namespace: &str,
    namespace_selector: Option<&LabelSelector>,
) -> Vec<MappingInput> {
    // At most 200 rules per mapping; one mapping in eleven is cluster-scoped.
    let count = (n / 200 + 1).max(11);
    let mut inputs: Vec<MappingInput> = (0..count)
        .map(|m| {
            let cluster = m % 11 == 10;
            MappingInput {
                scope: if cluster {
                    MappingScope::Cluster
                } else {
                    MappingScope::Namespaced
                },
                namespace: (!cluster).then(|| namespace.to_string()),
                name: format!("mapping-{m}"),
                priority: 0,
                selector: None,
                namespace_selector: if cluster {
                    namespace_selector.cloned()
                } else {
                    None
                },
                dry_run: false,
                rules: Vec::new(),
            }
        })
        .collect();
    for i in 0..n {
        inputs[i % count].rules.push(rule(i));
    }
    inputs
}

/// An image that rule `i` of the mix matches (`path`: what follows a prefix or regex match),
/// and what it becomes.
pub fn hit(i: usize, path: &str) -> (String, String) {
    match i % 20 {
        0..=7 => (
            format!("team{}/app{i}:v{i}", i % 50),
            format!("mirror.io/exact/app{i}:v{i}"),
        ),
        8..=13 => (
            format!("team{}/svc{i}:1.2", i % 50),
            format!("mirror.io/repo/svc{i}:1.2"),
        ),
        14..=17 => (
            format!("registry{i}.example.org/group{i}/{path}"),
            format!("mirror.io/prefix{i}/{path}"),
        ),
        18 => (
            format!("eu.zone{i}.example.net/{path}"),
            format!("mirror.io/{path}"),
        ),
        _ => (
            format!("regex{i}.example.com/{path}"),
            format!("mirror.io/regex{i}/{path}"),
        ),
    }
}
