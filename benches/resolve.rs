//! Rule matching: the indexed rule set against a linear scan of the same rules, at 10,
//! 1,000 and 10,000 rules. References are parsed before timing. `*_find` is matching
//! alone (the winner and its ties); `*_resolve` adds the rewrite, whose cost (building and
//! re-parsing the new reference) is the same for both.
//!
//! Rule mix: 40% exact, 30% repository, 25% prefix (a fifth of them `*.` wildcards), 5% regex,
//! spread over mappings of at most 200 rules, one in eleven cluster-scoped. Queries: half hit an exact or
//! repository rule, a quarter hit a prefix, a quarter match no rule (the worst case for the
//! index: every table is probed and the regex set runs).

#![allow(clippy::unwrap_used)] // benchmark code

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use imagemap::api::{MappingRule, RuleMatch};
use imagemap::reference::Reference;
use imagemap::rules::{CompileOptions, MappingInput, Mode, Requester, RuleSet, Scope};

fn rule(i: usize) -> MappingRule {
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

fn rule_set(n: usize) -> RuleSet {
    // At most 200 rules per mapping; one mapping in eleven is cluster-scoped.
    let mappings = (n / 200 + 1).max(11);
    let mut inputs: Vec<MappingInput> = (0..mappings)
        .map(|m| MappingInput {
            scope: if m % 11 == 10 {
                Scope::Cluster
            } else {
                Scope::Namespaced
            },
            namespace: (m % 11 != 10).then(|| "bench".to_string()),
            name: format!("mapping-{m}"),
            priority: 0,
            selector: None,
            namespace_selector: None,
            dry_run: false,
            rules: Vec::new(),
        })
        .collect();
    for i in 0..n {
        inputs[i % mappings].rules.push(rule(i));
    }
    let set = RuleSet::compile(&inputs, &CompileOptions::default());
    assert!(set.problems().is_empty(), "{:?}", &set.problems()[..1]);
    set
}

fn queries(n: usize) -> Vec<Reference> {
    let mut out = Vec::new();
    for k in 0..64 {
        let i = (k * 7919) % n.max(1);
        let text = match k % 4 {
            0 => match i % 20 {
                0..=7 => format!("team{}/app{i}:v{i}", i % 50),
                8..=13 => format!("team{}/svc{i}:1.2", i % 50),
                _ => format!("team{}/app{k}:v{k}", k % 50),
            },
            1 => format!("team{}/svc{}:2", (i / 20 * 20 + 8) % 50, i / 20 * 20 + 8),
            2 => format!(
                "registry{}.example.org/group{}/x/y:3",
                i / 20 * 20 + 14,
                i / 20 * 20 + 14
            ),
            _ => format!("ghcr.io/nobody/tool{k}:latest"),
        };
        out.push(Reference::parse_normalized(&text).unwrap());
    }
    out
}

/// One way of handling one reference, timed per reference.
type Run<'a> = dyn Fn(&Reference) + 'a;

fn bench(c: &mut Criterion) {
    let no_labels = BTreeMap::new();
    let who = Requester {
        namespace: "bench",
        labels: &no_labels,
        namespace_labels: &no_labels,
        namespace_rules: true,
    };
    let mut group = c.benchmark_group("resolve");
    for n in [10usize, 1_000, 10_000] {
        let set = rule_set(n);
        let refs = queries(n);
        for r in &refs {
            assert_eq!(
                set.resolve(r, &who, Mode::Live),
                set.resolve_linear(r, &who, Mode::Live)
            );
        }
        group.throughput(criterion::Throughput::Elements(refs.len() as u64));
        let cases: [(&str, &Run); 4] = [
            ("index_find", &|r| {
                drop(black_box(set.find(r, &who, Mode::Live)));
            }),
            ("linear_find", &|r| {
                drop(black_box(set.find_linear(r, &who, Mode::Live)));
            }),
            ("index_resolve", &|r| {
                drop(black_box(set.resolve(r, &who, Mode::Live)));
            }),
            ("linear_resolve", &|r| {
                drop(black_box(set.resolve_linear(r, &who, Mode::Live)));
            }),
        ];
        for (name, run) in cases {
            group.bench_with_input(BenchmarkId::new(name, n), &refs, |b, refs| {
                b.iter(|| refs.iter().for_each(|r| run(black_box(r))));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
