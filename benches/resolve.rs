//! Rule matching: the indexed rule set against a linear scan of the same rules, at 10,
//! 1,000 and 10,000 rules. References are parsed before timing. `*_find` is matching
//! alone (the winner and its ties); `*_resolve` adds the rewrite, whose cost (building and
//! re-parsing the new reference) is the same for both.
//!
//! Rule mix (benches/support/rule_mix.rs): 40% exact, 30% repository, 25% prefix (a fifth of
//! them `*.` wildcards), 5% regex, spread over mappings of at most 200 rules, one in eleven
//! cluster-scoped. Queries: half hit an exact or repository rule, a quarter hit a prefix, a
//! quarter match no rule (the worst case for the index: every table is probed and the regex
//! set runs).

#![allow(clippy::unwrap_used)] // benchmark code

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use imagemap::core::reference::Reference;
use imagemap::core::rules::{CompileOptions, Mode, Requester, RuleSet};

#[path = "support/rule_mix.rs"]
mod rule_mix;

fn rule_set(n: usize) -> RuleSet {
    let set = RuleSet::compile(
        &rule_mix::mappings(n, "bench", None),
        &CompileOptions::default(),
    );
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
