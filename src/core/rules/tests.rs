use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;

use super::*;
use crate::core::allowed_registries::AllowedRegistries;
use crate::core::api::{MappingRule, RuleMatch};
use crate::core::reference::Reference;

fn rule(kind: &str, pattern: &str, to: Option<&str>) -> MappingRule {
    let mut m = RuleMatch::default();
    let v = Some(pattern.to_string());
    match kind {
        "exact" => m.exact = v,
        "repository" => m.repository = v,
        "prefix" => m.prefix = v,
        _ => m.regex = v,
    }
    MappingRule {
        match_: m,
        to: to.map(Into::into),
        ..MappingRule::default()
    }
}

fn ns_mapping(ns: &str, name: &str, priority: i32, rules: Vec<MappingRule>) -> MappingInput {
    MappingInput {
        scope: MappingScope::Namespaced,
        namespace: Some(ns.into()),
        name: name.into(),
        priority,
        selector: None,
        namespace_selector: None,
        dry_run: false,
        rules,
    }
}

fn cluster_mapping(name: &str, priority: i32, rules: Vec<MappingRule>) -> MappingInput {
    MappingInput {
        scope: MappingScope::Cluster,
        namespace: None,
        ..ns_mapping("", name, priority, rules)
    }
}

struct World {
    set: RuleSet,
}

impl World {
    fn new(inputs: &[MappingInput]) -> World {
        World {
            set: RuleSet::compile(inputs, &CompileOptions::default()),
        }
    }

    fn resolve_in(
        &self,
        ns: &str,
        labels: &BTreeMap<String, String>,
        image: &str,
    ) -> (String, Option<String>, usize) {
        let ns_labels: BTreeMap<String, String> =
            [("kubernetes.io/metadata.name".to_string(), ns.to_string())].into();
        let who = Requester {
            namespace: ns,
            labels,
            namespace_labels: &ns_labels,
            namespace_rules: true,
        };
        let r = Reference::parse_normalized(image).unwrap();
        let res = self.set.resolve(&r, &who, Mode::Live);
        assert_eq!(
            res,
            self.set.resolve_linear(&r, &who, Mode::Live),
            "index and scan differ for {image}"
        );
        let out = match &res.resolved {
            Ok(r) => r.to_string(),
            Err(e) => format!("ERR {e}"),
        };
        let source = res.rule.map(|id| {
            let s = self.set.rule_ref(id).source();
            format!("{}/{}#{}", s.kind, s.name, s.rule)
        });
        (out, source, res.conflicts.len())
    }

    fn resolve(&self, image: &str) -> (String, Option<String>, usize) {
        self.resolve_in("dev", &BTreeMap::new(), image)
    }
}

#[test]
fn no_rule_resolves_to_the_normalized_reference() {
    let w = World::new(&[]);
    assert_eq!(
        w.resolve("nginx"),
        ("docker.io/library/nginx".into(), None, 0)
    );
}

#[test]
fn precedence_kind_then_prefix_length() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("regex", ".*", Some("r.io/regex")),
            rule("prefix", "docker.io", Some("p.io")),
            rule("prefix", "docker.io/neondatabase", Some("p2.io/neon")),
            rule("repository", "neondatabase/vm", Some("repo.io/vm")),
            rule("exact", "neondatabase/vm:1", Some("exact.io/vm:1")),
        ],
    )]);
    assert_eq!(w.resolve("neondatabase/vm:1").0, "exact.io/vm:1");
    assert_eq!(w.resolve("neondatabase/vm:2").0, "repo.io/vm:2");
    assert_eq!(w.resolve("neondatabase/other:2").0, "p2.io/neon/other:2");
    assert_eq!(w.resolve("nginx").0, "p.io/library/nginx");
    assert_eq!(w.resolve("ghcr.io/x").0, "r.io/regex");
}

#[test]
fn priority_beats_kind_and_namespaced_beats_cluster() {
    let w = World::new(&[
        ns_mapping(
            "dev",
            "low",
            0,
            vec![rule("exact", "nginx", Some("low.io/nginx"))],
        ),
        ns_mapping(
            "dev",
            "high",
            5,
            vec![rule("regex", ".*nginx.*", Some("high.io/nginx"))],
        ),
        cluster_mapping(
            "c",
            0,
            vec![rule("exact", "busybox", Some("cluster.io/busybox"))],
        ),
        ns_mapping(
            "dev",
            "nsbox",
            0,
            vec![rule("regex", ".*busybox.*", Some("ns.io/busybox"))],
        ),
    ]);
    assert_eq!(w.resolve("nginx").0, "high.io/nginx");
    // Same priority: namespaced regex outranks cluster exact.
    assert_eq!(w.resolve("busybox").0, "ns.io/busybox");
    // Another namespace only sees the cluster mapping.
    assert_eq!(
        w.resolve_in("prod", &BTreeMap::new(), "busybox").0,
        "cluster.io/busybox"
    );
    assert_eq!(
        w.resolve_in("prod", &BTreeMap::new(), "nginx").0,
        "docker.io/library/nginx"
    );
}

#[test]
fn prefix_boundaries() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("prefix", "docker.io/neon", Some("a.io")),
            rule("prefix", "example.com", Some("b.io")),
            rule("prefix", "docker.io/library/busybox:1", Some("c.io/bb:one")),
        ],
    )]);
    assert_eq!(w.resolve("neondatabase/x").1, None);
    assert_eq!(w.resolve("neon/x").0, "a.io/x");
    assert_eq!(w.resolve("example.com:5000/x").1, None);
    assert_eq!(w.resolve("example.com/x").0, "b.io/x");
    assert_eq!(w.resolve("busybox:1").0, "c.io/bb:one");
    assert_eq!(w.resolve("busybox:1.36").1, None);
    let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_eq!(
        w.resolve(&format!("busybox:1@{d}")).0,
        format!("c.io/bb:one@{d}")
    );
}

#[test]
fn wildcards_match_subdomains_only_and_keep_the_port() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("prefix", "*.example.com", Some("mirror.local")),
            rule("prefix", "b.example.com/team", Some("team.io")),
        ],
    )]);
    assert_eq!(
        w.resolve("a.example.com:5000/x:1").0,
        "mirror.local:5000/x:1"
    );
    assert_eq!(w.resolve("a.b.example.com/x").0, "mirror.local/x");
    assert_eq!(w.resolve("example.com/x").1, None);
    assert_eq!(w.resolve("badexample.com/x").1, None);
    // A longer literal prefix beats the wildcard.
    assert_eq!(w.resolve("b.example.com/team/x").0, "team.io/x");
}

/// registries.conf drop-ins, one mapping each at equal priority: the longest prefix as
/// written wins (`*.` counted, as containers/image's `FindRegistry`), so nested wildcards and
/// hosts under them do not conflict; only equal prefixes that rewrite differently do.
#[test]
fn longest_prefix_wins_across_drop_ins() {
    let drop_in = |name: &str, prefix: &str, to: &str| {
        ns_mapping("dev", name, 0, vec![rule("prefix", prefix, Some(to))])
    };
    let w = World::new(&[
        drop_in("00-example", "*.example.com", "all.mirror"),
        drop_in("10-eu", "*.eu.example.com", "eu.mirror"),
        drop_in("20-registry", "registry.eu.example.com", "registry.mirror"),
        drop_in("30-team", "registry.eu.example.com/team", "team.mirror"),
    ]);
    let cases = [
        ("x.example.com/app:1", "all.mirror/app:1", "00-example"),
        ("b.eu.example.com/app:1", "eu.mirror/app:1", "10-eu"),
        ("x.b.eu.example.com/app", "eu.mirror/app", "10-eu"),
        (
            "registry.eu.example.com/app",
            "registry.mirror/app",
            "20-registry",
        ),
        (
            "registry.eu.example.com/team/app",
            "team.mirror/app",
            "30-team",
        ),
    ];
    for (image, out, winner) in cases {
        let (got, source, conflicts) = w.resolve(image);
        assert_eq!(got, out, "{image}");
        assert_eq!(source, Some(format!("ImageMapping/{winner}#0")), "{image}");
        assert_eq!(conflicts, 0, "{image}: a shorter prefix is no conflict");
    }
    assert!(
        w.set.problems().is_empty(),
        "nested prefixes are not conflicts: {:?}",
        w.set.problems()
    );

    // The same prefix in two drop-ins, rewriting differently: that conflicts.
    let w = World::new(&[
        drop_in("00-a", "*.eu.example.com", "a.mirror"),
        drop_in("10-b", "*.eu.example.com", "b.mirror"),
        drop_in("20-c", "*.example.com", "c.mirror"),
    ]);
    let (got, source, conflicts) = w.resolve("x.eu.example.com/app");
    assert_eq!(got, "a.mirror/app");
    assert_eq!(source.as_deref(), Some("ImageMapping/00-a#0"));
    assert_eq!(conflicts, 1);
    assert_eq!(w.set.problems().len(), 2, "{:?}", w.set.problems());
    // Different prefixes of equal length (13) that both match: the order of drop-ins would
    // decide, so they conflict (the winner is still the first by name).
    let w = World::new(&[
        drop_in("00-example", "*.example.com", "all.mirror"),
        drop_in("10-short", "a.example.com", "short.mirror"),
    ]);
    let (got, source, conflicts) = w.resolve("a.example.com/app");
    assert_eq!(got, "all.mirror/app");
    assert_eq!(source.as_deref(), Some("ImageMapping/00-example#0"));
    assert_eq!(conflicts, 1);
    assert_eq!(w.resolve("b.example.com/app").2, 0, "only one matches");
    // The same prefix rewriting alike is no conflict.
    let w = World::new(&[
        drop_in("00-a", "*.eu.example.com", "a.mirror"),
        drop_in("10-b", "*.eu.example.com", "a.mirror"),
    ]);
    assert_eq!(w.resolve("x.eu.example.com/app").2, 0);
    assert!(w.set.problems().is_empty());
}

#[test]
fn exception_outranks_less_specific_rules() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("prefix", "docker.io", Some("mirror.io")),
            rule("repository", "library/postgres", None),
        ],
    )]);
    let (out, source, _) = w.resolve("postgres:17");
    assert_eq!(out, "docker.io/library/postgres:17");
    assert_eq!(source.as_deref(), Some("ImageMapping/m#1"));
    assert_eq!(w.resolve("nginx").0, "mirror.io/library/nginx");
}

#[test]
fn single_pass_makes_cycles_harmless() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("repository", "a/x", Some("b/x")),
            rule("repository", "b/x", Some("a/x")),
        ],
    )]);
    assert_eq!(w.resolve("a/x:1").0, "docker.io/b/x:1");
    assert_eq!(w.resolve("b/x:1").0, "docker.io/a/x:1");
}

#[test]
fn ties_with_different_results_conflict_and_the_winner_is_deterministic() {
    let w = World::new(&[
        ns_mapping(
            "dev",
            "zeta",
            0,
            vec![rule("repository", "app", Some("z.io/app"))],
        ),
        ns_mapping(
            "dev",
            "alpha",
            0,
            vec![rule("repository", "app", Some("a.io/app"))],
        ),
        ns_mapping(
            "dev",
            "same",
            0,
            vec![rule("repository", "tool", Some("t.io/tool"))],
        ),
        ns_mapping(
            "dev",
            "same2",
            0,
            vec![rule("repository", "tool", Some("t.io/tool"))],
        ),
        ns_mapping(
            "dev",
            "regexes",
            0,
            vec![
                rule("regex", "docker.io/library/r(.*)", Some("x.io/r$1")),
                rule("regex", ".*/re(.*)", Some("y.io/re$1")),
            ],
        ),
    ]);
    assert_eq!(
        w.resolve("app:1"),
        ("a.io/app:1".into(), Some("ImageMapping/alpha#0".into()), 1)
    );
    // Identical results are no conflict.
    assert_eq!(w.resolve("tool").2, 0);
    // Dynamic conflict between two regexes.
    assert_eq!(
        w.resolve("redis"),
        (
            "docker.io/x.io/redis".replace("docker.io/", ""),
            Some("ImageMapping/regexes#0".into()),
            1
        )
    );
    let reasons: Vec<_> = w
        .set
        .problems()
        .iter()
        .map(|p| (p.mapping.name.as_str(), p.reason()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("alpha", ProblemReason::Conflict),
            ("zeta", ProblemReason::Conflict)
        ]
    );
}

#[test]
fn regex_captures_and_anchoring() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule(
                "regex",
                r"ghcr\.io/acme/(?P<name>[^:]+):(.*)",
                Some("mirror.local/acme/${name}:v$2"),
            ),
            rule("regex", "acme", Some("never.io/x")),
        ],
    )]);
    assert_eq!(
        w.resolve("ghcr.io/acme/tool:1.0").0,
        "mirror.local/acme/tool:v1.0"
    );
    // Implicitly anchored: `acme` does not match inside a longer reference.
    assert_eq!(w.resolve("ghcr.io/acme/tool").1, None);
}

#[test]
fn invalid_rewrite_is_an_error_for_that_image() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![rule(
            "regex",
            "docker.io/library/(.*)",
            Some("mirror.io/UPPER/$1"),
        )],
    )]);
    let (out, source, _) = w.resolve("nginx");
    assert!(
        out.starts_with("ERR rewrite produced \"mirror.io/UPPER/nginx\""),
        "{out}"
    );
    assert_eq!(source.as_deref(), Some("ImageMapping/m#0"));
}

#[test]
fn invalid_rules_are_reported_and_the_rest_still_apply() {
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("regex", "(", Some("x")),
            rule("exact", "nginx", Some("ok.io/nginx")),
        ],
    )]);
    assert_eq!(w.resolve("nginx").0, "ok.io/nginx");
    let p = &w.set.problems()[0];
    assert_eq!((p.rule, p.reason()), (Some(0), ProblemReason::InvalidRule));
    assert!(p.to_string().contains("not a valid RE2"), "{p}");
}

#[test]
fn selectors_pick_vms_and_namespaces() {
    let mut by_label = ns_mapping(
        "dev",
        "labelled",
        0,
        vec![rule("repository", "app", Some("l.io/app"))],
    );
    by_label.selector = Some(LabelSelector {
        match_labels: Some([("tier".to_string(), "db".to_string())].into()),
        ..Default::default()
    });
    let mut by_ns = cluster_mapping("c", 0, vec![rule("repository", "app", Some("c.io/app"))]);
    by_ns.namespace_selector = Some(LabelSelector {
        match_labels: Some(
            [(
                "kubernetes.io/metadata.name".to_string(),
                "prod".to_string(),
            )]
            .into(),
        ),
        ..Default::default()
    });
    let w = World::new(&[by_label, by_ns]);
    let db: BTreeMap<String, String> = [("tier".to_string(), "db".to_string())].into();
    assert_eq!(w.resolve_in("dev", &db, "app").0, "l.io/app");
    assert_eq!(w.resolve_in("dev", &BTreeMap::new(), "app").1, None);
    assert_eq!(w.resolve_in("prod", &BTreeMap::new(), "app").0, "c.io/app");
}

#[test]
fn dry_run_mappings_only_apply_in_preview() {
    let mut m = ns_mapping(
        "dev",
        "m",
        0,
        vec![rule("repository", "app", Some("d.io/app"))],
    );
    m.dry_run = true;
    let set = RuleSet::compile(&[m], &CompileOptions::default());
    let r = Reference::parse_normalized("app").unwrap();
    let none = BTreeMap::new();
    let who = Requester {
        namespace: "dev",
        labels: &none,
        namespace_labels: &none,
        namespace_rules: true,
    };
    assert_eq!(set.resolve(&r, &who, Mode::Live).rule, None);
    assert_eq!(
        set.resolve(&r, &who, Mode::Preview)
            .resolved
            .unwrap()
            .to_string(),
        "d.io/app"
    );
}

#[test]
fn allowed_registries_refuse_other_targets() {
    let inputs = vec![ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("repository", "a", Some("evil.io/a")),
            rule("repository", "b", Some("ok.io/b")),
            rule("regex", "docker.io/library/c", Some("evil.io/c")),
            rule("repository", "d", Some("x.mirror.io/d")),
        ],
    )];
    let options = CompileOptions {
        allowed_registries: AllowedRegistries::only(vec!["ok.io".into(), "*.mirror.io".into()]),
        follow_needs_list: true,
        ..CompileOptions::default()
    };
    let set = RuleSet::compile(&inputs, &options);
    assert_eq!(set.problems()[0].reason(), ProblemReason::DisallowedTarget);
    let none = BTreeMap::new();
    let who = Requester {
        namespace: "dev",
        labels: &none,
        namespace_labels: &none,
        namespace_rules: true,
    };
    let resolve = |s: &str| {
        set.resolve(&Reference::parse_normalized(s).unwrap(), &who, Mode::Live)
            .resolved
    };
    assert_eq!(resolve("a").unwrap().to_string(), "docker.io/library/a");
    assert_eq!(resolve("b").unwrap().to_string(), "ok.io/b");
    assert!(
        resolve("c")
            .unwrap_err()
            .to_string()
            .contains("not in the operator's allowed registries")
    );
    assert_eq!(resolve("d").unwrap().to_string(), "x.mirror.io/d");
}

fn follow(kind: &str, pattern: &str, to: Option<&str>) -> MappingRule {
    MappingRule {
        follow_tag: true,
        ..rule(kind, pattern, to)
    }
}

#[test]
fn a_followed_result_must_be_at_an_allowed_registry_even_when_the_rule_keeps_it() {
    let inputs = vec![ns_mapping(
        "dev",
        "m",
        0,
        vec![
            follow("repository", "10.0.0.1:5000/app", None),
            follow("regex", "svc\\.other\\.svc/(.*)", None),
            follow("prefix", "ok.io", None),
            follow("exact", "metadata.internal/x:1", None),
        ],
    )];
    let who_none = BTreeMap::new();
    let who = Requester {
        namespace: "dev",
        labels: &who_none,
        namespace_labels: &who_none,
        namespace_rules: true,
    };
    let resolve = |set: &RuleSet, s: &str| {
        set.resolve(&Reference::parse_normalized(s).unwrap(), &who, Mode::Live)
            .resolved
    };
    let listed = CompileOptions {
        allowed_registries: AllowedRegistries::only(vec!["ok.io".into()]),
        follow_needs_list: true,
        ..CompileOptions::default()
    };
    let set = RuleSet::compile(&inputs, &listed);
    for image in [
        "10.0.0.1:5000/app:1",
        "svc.other.svc/x:1",
        "metadata.internal/x:1",
    ] {
        let e = resolve(&set, image).unwrap_err();
        assert!(
            matches!(&e, ResolveError::DisallowedTarget(m) if m.contains("following its tag would ask")),
            "{image}: {e}"
        );
    }
    assert_eq!(
        resolve(&set, "ok.io/app:1").unwrap().to_string(),
        "ok.io/app:1"
    );
    // Without a list, the operator follows nothing, and says which flag to set.
    let unlisted = CompileOptions {
        follow_needs_list: true,
        ..CompileOptions::default()
    };
    let set = RuleSet::compile(&inputs, &unlisted);
    let e = resolve(&set, "ok.io/app:1").unwrap_err();
    assert!(
        matches!(&e, ResolveError::FollowRefused(m) if m.contains("--allowed-registries")),
        "{e}"
    );
    assert_eq!(set.problems().len(), 4);
    assert!(
        set.problems()
            .iter()
            .all(|p| p.reason() == ProblemReason::AllowedRegistriesRequired
                && p.to_string().contains("--allowed-registries"))
    );
    // `imagemap resolve`, on a user's machine, follows anywhere.
    let set = RuleSet::compile(&inputs, &CompileOptions::default());
    assert!(set.problems().is_empty());
    assert!(resolve(&set, "svc.other.svc/x:1").is_ok());
}

#[test]
fn huge_regex_rules_are_problems_naming_the_limit_and_cost_little() {
    let huge: Vec<MappingRule> = (0..256)
        .map(|i| rule("regex", &format!("x{i}\\w{{200}}"), Some("a.io/x")))
        .collect();
    let set = RuleSet::compile(
        &[ns_mapping("dev", "huge", 0, huge)],
        &CompileOptions::default(),
    );
    assert_eq!(set.problems().len(), 256);
    assert!(set.problems().iter().all(|p| {
        p.reason() == ProblemReason::InvalidRule
            && p.to_string()
                .contains("256 KiB, the operator's limit per regex")
    }));
    assert!(set.is_empty());
    // Many smaller ones: those past the mapping's budget are left out, and say so.
    let many: Vec<MappingRule> = (0..256)
        .map(|i| rule("regex", &format!("x{i}\\w{{2}}"), Some("a.io/x")))
        .collect();
    let set = RuleSet::compile(
        &[ns_mapping("dev", "many", 0, many)],
        &CompileOptions::default(),
    );
    assert!(!set.is_empty());
    let left_out: Vec<_> = set
        .problems()
        .iter()
        .filter(|p| p.to_string().contains("limit per mapping"))
        .collect();
    assert_eq!(
        left_out.len() + set.len(),
        256,
        "{:?}",
        set.problems().first()
    );
    assert!(!left_out.is_empty());
}

// ---- property tests: the index equals the linear scan; resolution never panics and
// yields a valid reference or an error.

fn image_strategy() -> impl Strategy<Value = String> {
    let host = prop::sample::select(vec![
        "",
        "docker.io/",
        "ghcr.io/",
        "a.example.com/",
        "b.example.com:5000/",
        "localhost:5000/",
    ]);
    let path = prop::sample::select(vec![
        "nginx",
        "library/nginx",
        "neon/vm",
        "neon/vm/x",
        "acme/tool",
        "busybox",
    ]);
    let tag = prop::sample::select(vec!["", ":1", ":latest", ":1.36", ":v2.0"]);
    (host, path, tag).prop_map(|(h, p, t)| format!("{h}{p}{t}"))
}

fn rule_strategy() -> impl Strategy<Value = MappingRule> {
    let kind = prop::sample::select(vec!["exact", "repository", "prefix", "regex"]);
    let pattern = prop::sample::select(vec![
        "nginx",
        "neon/vm",
        "docker.io",
        "docker.io/neon",
        "ghcr.io",
        "*.example.com",
        "localhost:5000",
        "docker.io/library",
        ".*",
        "(.*)/(.*)",
        "ghcr\\.io/(.*)",
        "busybox:1.36",
        "[",
    ]);
    let to = prop::sample::select(vec![
        None,
        Some("mirror.io"),
        Some("mirror.io/x"),
        Some("$1/y"),
        Some("m.io:5000"),
        Some("Bad/"),
        Some("x:1"),
    ]);
    let tag = prop::sample::select(vec![None, Some("t1")]);
    (kind, pattern, to, tag).prop_map(|(k, p, to, tag)| {
        let mut r = rule(k, p, to);
        r.tag = tag.map(Into::into);
        r
    })
}

proptest! {
    #[test]
    fn index_equals_scan_and_never_panics(
        rules in prop::collection::vec((rule_strategy(), 0..2i32, any::<bool>(), 0..3usize), 0..24),
        images in prop::collection::vec(image_strategy(), 1..8),
    ) {
        let inputs: Vec<MappingInput> = rules
            .into_iter()
            .enumerate()
            .map(|(i, (r, prio, cluster, name))| {
                let name = format!("m{name}-{}", i % 3);
                if cluster { cluster_mapping(&name, prio, vec![r]) } else { ns_mapping("dev", &name, prio, vec![r]) }
            })
            .collect();
        let set = RuleSet::compile(&inputs, &CompileOptions::default());
        let none = BTreeMap::new();
        let who = Requester { namespace: "dev", labels: &none, namespace_labels: &none , namespace_rules: true};
        for image in images {
            let r = Reference::parse_normalized(&image).unwrap();
            let fast = set.resolve(&r, &who, Mode::Live);
            let slow = set.resolve_linear(&r, &who, Mode::Live);
            prop_assert_eq!(&fast, &slow);
            if let Ok(out) = &fast.resolved {
                let again = Reference::parse_normalized(out.as_str()).unwrap();
                prop_assert_eq!(again.as_str(), out.as_str());
            }
        }
    }

    #[test]
    fn arbitrary_rules_and_images_never_panic(pattern in ".{0,40}", to in ".{0,40}", image in "[a-z0-9./:@_-]{1,60}") {
        for kind in ["exact", "repository", "prefix", "regex"] {
            let set = RuleSet::compile(&[ns_mapping("dev", "m", 0, vec![rule(kind, &pattern, Some(&to))])], &CompileOptions::default());
            if let Ok(r) = Reference::parse_normalized(&image) {
                let none = BTreeMap::new();
                let who = Requester { namespace: "dev", labels: &none, namespace_labels: &none , namespace_rules: true};
                let _ = set.resolve(&r, &who, Mode::Live);
            }
        }
    }
}

#[test]
fn colliding_rules_are_reported_once_each_however_many_collide() {
    // One tenant: 8 mappings of 256 rules, all `exact: busybox`, each to its own target.
    let inputs: Vec<MappingInput> = (0..8)
        .map(|m| {
            let rules = (0..256)
                .map(|r| rule("exact", "busybox", Some(&format!("t.io/m{m}/r{r}"))))
                .collect();
            ns_mapping("tenant", &format!("m{m}"), 0, rules)
        })
        .collect();
    let w = World::new(&inputs);
    let problems = w.set.problems();
    assert_eq!(problems.len(), 2048, "one problem per rule");
    // Each conflicts with every other rule: one named, 2,046 counted.
    assert!(
        problems.iter().all(|p| p
            .to_string()
            .contains(" and 2046 more: same match and priority")),
        "{}",
        problems[0]
    );
    // Rules with the same result as each other are counted apart from those that differ.
    let w = World::new(&[ns_mapping(
        "dev",
        "m",
        0,
        vec![
            rule("exact", "busybox", Some("a.io/busybox")),
            rule("exact", "busybox", Some("a.io/busybox")),
            rule("exact", "busybox", Some("b.io/busybox")),
        ],
    )]);
    let messages: Vec<String> = w.set.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "rule 0 conflicts with ImageMapping dev/m rule 2: same match and priority, different result",
            "rule 1 conflicts with ImageMapping dev/m rule 2: same match and priority, different result",
            "rule 2 conflicts with ImageMapping dev/m rule 0 and 1 more: same match and priority, different result",
        ]
    );
}

#[test]
fn follow_tag_marks_the_result_and_refuses_what_has_no_tag_to_follow() {
    let follow = |mut r: MappingRule| {
        r.follow_tag = true;
        r
    };
    let pinned = MappingRule {
        digest: Some(format!("sha256:{}", "a".repeat(64))),
        ..follow(rule("repository", "pinned", Some("p.io/pinned")))
    };
    let w = World::new(&[ns_mapping(
        "dev",
        "tilt",
        0,
        vec![
            follow(rule("repository", "app", Some("local:5000/app:dev"))),
            // No `to`: keep the local registry's images, followed.
            follow(rule("prefix", "local:5000", None)),
            rule("repository", "plain", Some("p.io/plain")),
            pinned,
        ],
    )]);
    let res = |image: &str| {
        let ns_labels: BTreeMap<String, String> = BTreeMap::new();
        let who = Requester {
            namespace: "dev",
            labels: &BTreeMap::new(),
            namespace_labels: &ns_labels,
            namespace_rules: true,
        };
        w.set.resolve(
            &Reference::parse_normalized(image).unwrap(),
            &who,
            Mode::Live,
        )
    };
    let app = res("app:latest");
    assert_eq!(
        app.resolved.as_ref().unwrap().to_string(),
        "local:5000/app:dev"
    );
    assert!(app.follow_tag);
    let kept = res("local:5000/tools:1");
    assert_eq!(
        kept.resolved.as_ref().unwrap().to_string(),
        "local:5000/tools:1"
    );
    assert!(kept.follow_tag);
    assert!(!res("plain:1").follow_tag);
    // A requested image that already names a digest: nothing to follow.
    let digest = format!("local:5000/tools@sha256:{}", "b".repeat(64));
    let err = res(&digest).resolved.unwrap_err().to_string();
    assert!(err.contains("no tag to follow"), "{err}");
    // followTag with a digest setter is an invalid rule (the CRD refuses it too).
    let problems: Vec<String> = w.set.problems().iter().map(ToString::to_string).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("followTag cannot be combined with digest")),
        "{problems:?}"
    );
}

#[test]
fn tied_rules_that_differ_only_in_following_the_tag_conflict() {
    let followed = MappingRule {
        follow_tag: true,
        ..rule("repository", "app", Some("a.io/app:dev"))
    };
    let w = World::new(&[
        ns_mapping("dev", "a", 0, vec![followed]),
        ns_mapping(
            "dev",
            "b",
            0,
            vec![rule("repository", "app", Some("a.io/app:dev"))],
        ),
    ]);
    assert_eq!(w.resolve("app").2, 1);
}

/// k3d's registry: pods pull from `k3d-reg:5000`, the laptop pushes to `localhost:5000`.
fn k3d_registry() -> CompileOptions {
    let data = BTreeMap::from([(
        crate::core::local_registry::KEY_V1.to_string(),
        "host: localhost:5000\nhostFromContainerRuntime: k3d-reg:5000\n\
         hostFromClusterNetwork: k3d-reg:5000\n"
            .to_string(),
    )]);
    let local = crate::core::local_registry::LocalRegistry::from_data(&data)
        .unwrap()
        .unwrap();
    CompileOptions {
        follow_needs_list: true,
        local_registry: Some(std::sync::Arc::new(local)),
        ..CompileOptions::default()
    }
}

#[test]
fn the_local_registry_is_one_registry_by_any_of_its_names() {
    let inputs = vec![ns_mapping(
        "dev",
        "m",
        0,
        vec![
            // Written with the name the laptop pushes to.
            follow(
                "repository",
                "neondatabase/vm-compute-node-v17",
                Some("localhost:5000/compute:dev"),
            ),
            rule("prefix", "localhost:5000/team", Some("ghcr.io/team")),
            rule(
                "exact",
                "k3d-reg:5000/runner:1",
                Some("localhost:5000/runner:2"),
            ),
            // No `to`: every image under it is kept there, and followed.
            follow("prefix", "localhost:5000/followed", None),
        ],
    )];
    let set = RuleSet::compile(&inputs, &k3d_registry());
    assert!(set.problems().is_empty(), "{:?}", set.problems());
    let none = BTreeMap::new();
    let who = Requester {
        namespace: "dev",
        labels: &none,
        namespace_labels: &none,
        namespace_rules: true,
    };
    let resolve = |s: &str| {
        let r = Reference::parse_normalized(s).unwrap();
        let res = set.resolve(&r, &who, Mode::Live);
        assert_eq!(res, set.resolve_linear(&r, &who, Mode::Live), "{s}");
        res.resolved.map(|r| r.to_string())
    };
    // Pods get the container runtime's name; a followed tag there needs no allow list.
    assert_eq!(
        resolve("neondatabase/vm-compute-node-v17:latest").unwrap(),
        "k3d-reg:5000/compute:dev"
    );
    // A rule written with one name matches references written with another.
    assert_eq!(
        resolve("k3d-reg:5000/team/app:1").unwrap(),
        "ghcr.io/team/app:1"
    );
    assert_eq!(
        resolve("localhost:5000/team/app:1").unwrap(),
        "ghcr.io/team/app:1"
    );
    assert_eq!(
        resolve("localhost:5000/runner:1").unwrap(),
        "k3d-reg:5000/runner:2"
    );
    assert_eq!(
        resolve("k3d-reg:5000/followed/app:dev").unwrap(),
        "k3d-reg:5000/followed/app:dev"
    );
    // Unmapped references by another name get the runtime's name too.
    assert_eq!(
        resolve("localhost:5000/other:1").unwrap(),
        "k3d-reg:5000/other:1"
    );
    assert_eq!(resolve("ghcr.io/other:1").unwrap(), "ghcr.io/other:1");
    // Without the ConfigMap, the same rules follow nothing without a list.
    let plain = RuleSet::compile(
        &inputs,
        &CompileOptions {
            follow_needs_list: true,
            ..CompileOptions::default()
        },
    );
    assert_eq!(plain.problems().len(), 2, "{:?}", plain.problems());
}

#[test]
#[allow(clippy::too_many_lines)] // One rule set, each case read top to bottom.
fn refused_rules_that_match_are_told_when_they_would_have_decided() {
    let invalid_rewrite = MappingRule {
        tag: Some("not a tag".into()),
        ..rule("exact", "docker.io/library/broken:1", None)
    };
    let inputs = vec![
        ns_mapping(
            "dev",
            "evil",
            0,
            vec![
                rule("repository", "acme/evil", Some("evil.io/evil")),
                rule("repository", "acme/outranked", Some("evil.io/outranked")),
                rule("regex", "^docker\\.io/acme/rx.*$", Some("evil.io/rx")),
                invalid_rewrite,
            ],
        ),
        ns_mapping(
            "dev",
            "good",
            10,
            vec![rule(
                "repository",
                "acme/outranked",
                Some("ok.io/outranked"),
            )],
        ),
        ns_mapping(
            "dev",
            "low",
            -5,
            vec![rule("repository", "acme/evil", Some("ok.io/evil"))],
        ),
        cluster_mapping(
            "admin",
            0,
            vec![rule("repository", "acme/cluster", Some("evil.io/cluster"))],
        ),
    ];
    let options = CompileOptions {
        allowed_registries: AllowedRegistries::only(vec!["ok.io".into()]),
        follow_needs_list: true,
        ..CompileOptions::default()
    };
    let set = RuleSet::compile(&inputs, &options);
    let none = BTreeMap::new();
    let in_ns = |namespace_rules: bool| Requester {
        namespace: "dev",
        labels: &none,
        namespace_labels: &none,
        namespace_rules,
    };
    let refused = |s: &str, who: &Requester<'_>| -> Vec<String> {
        set.resolve(&Reference::parse_normalized(s).unwrap(), who, Mode::Live)
            .refused
            .iter()
            .map(|r| format!("{}: {}", r.rule, r.problem))
            .collect()
    };
    let who = in_ns(true);
    // Refused, and outranking the rule that applies (priority 0 over -5).
    assert_eq!(
        refused("acme/evil:1", &who),
        [
            "ImageMapping dev/evil rule 0: rewrites to registry evil.io, which is not in the operator's allowed registries"
        ]
    );
    assert_eq!(
        set.resolve(
            &Reference::parse_normalized("acme/evil:1").unwrap(),
            &who,
            Mode::Live
        )
        .resolved
        .unwrap()
        .to_string(),
        "ok.io/evil:1",
        "mapping itself does not change"
    );
    // Outranked by a rule that applies: nothing to tell.
    assert!(refused("acme/outranked:1", &who).is_empty());
    // A regex rule's target is known only at admission: its error is the resolution's.
    assert!(refused("acme/rx-1:2", &who).is_empty());
    assert!(
        set.resolve(
            &Reference::parse_normalized("acme/rx-1:2").unwrap(),
            &who,
            Mode::Live
        )
        .resolved
        .is_err()
    );
    // Where no rule applies: a cluster rule, an invalid rewrite.
    assert_eq!(
        refused("acme/cluster:1", &who),
        [
            "ClusterImageMapping admin rule 0: rewrites to registry evil.io, which is not in the operator's allowed registries"
        ]
    );
    assert_eq!(refused("broken:1", &who).len(), 1);
    // A pod that opts out of its namespace's rules meets only the cluster's.
    let opted_out = in_ns(false);
    assert!(refused("acme/evil:1", &opted_out).is_empty());
    assert_eq!(refused("acme/cluster:1", &opted_out).len(), 1);
    // Nothing refused: nothing looked up.
    assert!(refused("nginx", &who).is_empty());
    let clean = RuleSet::compile(&inputs[1..3], &options);
    assert!(clean.refused.is_empty());
}
