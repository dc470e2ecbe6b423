use super::*;

const H64: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn norm(s: &str) -> String {
    match Reference::parse_normalized(s) {
        Ok(r) => r.to_string(),
        Err(e) => format!("ERR {e}"),
    }
}

#[test]
#[allow(clippy::too_many_lines)] // One table of cases.
fn normalization_table() {
    let digest = format!("sha256:{H64}");
    let cases: Vec<(String, String)> = vec![
        ("nginx".into(), "docker.io/library/nginx".into()),
        ("nginx:1.27".into(), "docker.io/library/nginx:1.27".into()),
        ("library/nginx".into(), "docker.io/library/nginx".into()),
        ("docker.io/nginx".into(), "docker.io/library/nginx".into()),
        (
            "index.docker.io/nginx".into(),
            "docker.io/library/nginx".into(),
        ),
        (
            "index.docker.io/user/app:v1".into(),
            "docker.io/user/app:v1".into(),
        ),
        (
            "neondatabase/vm-compute-node-v17:latest".into(),
            "docker.io/neondatabase/vm-compute-node-v17:latest".into(),
        ),
        ("localhost/foo".into(), "localhost/foo".into()),
        ("localhost:5000/foo:1".into(), "localhost:5000/foo:1".into()),
        (
            "k3d-neon-local-registry:5000/vm-compute-node-v17:tilt-bce03df2bbb7ad9d".into(),
            "k3d-neon-local-registry:5000/vm-compute-node-v17:tilt-bce03df2bbb7ad9d".into(),
        ),
        ("[::1]:5000/foo".into(), "[::1]:5000/foo".into()),
        ("[2001:db8::1]/a/b:c".into(), "[2001:db8::1]/a/b:c".into()),
        ("192.168.0.1:8080/x".into(), "192.168.0.1:8080/x".into()),
        ("Foo/bar".into(), "Foo/bar".into()),
        ("ghcr.io/acme/a/b/c".into(), "ghcr.io/acme/a/b/c".into()),
        ("foo_bar.com/x".into(), "foo_bar.com/x".into()),
        ("a__b/c-d---e".into(), "docker.io/a__b/c-d---e".into()),
        (
            format!("busybox@{digest}"),
            format!("docker.io/library/busybox@{digest}"),
        ),
        (
            format!("busybox:1.36@{digest}"),
            format!("docker.io/library/busybox:1.36@{digest}"),
        ),
        (
            "localhost:5000".into(),
            "docker.io/library/localhost:5000".into(),
        ),
        // errors
        (String::new(), "ERR invalid reference format".into()),
        (
            "Nginx".into(),
            "ERR invalid reference format: repository name (library/Nginx) must be lowercase"
                .into(),
        ),
        (
            "ghcr.io/Acme/x".into(),
            "ERR invalid reference format: repository name (Acme/x) must be lowercase".into(),
        ),
        (
            H64.into(),
            format!(
                "ERR invalid repository name ({H64}), cannot specify 64-byte hexadecimal strings"
            ),
        ),
        ("nginx:".into(), "ERR invalid reference format".into()),
        ("nginx:-x".into(), "ERR invalid reference format".into()),
        ("a/_b".into(), "ERR invalid reference format".into()),
        ("a/b_".into(), "ERR invalid reference format".into()),
        ("a/b___c".into(), "ERR invalid reference format".into()),
        ("a/b..c".into(), "ERR invalid reference format".into()),
        ("a//b".into(), "ERR invalid reference format".into()),
        (
            "ex ample.com/x".into(),
            "ERR invalid reference format".into(),
        ),
        (
            format!("x:{}", "t".repeat(128)),
            format!("docker.io/library/x:{}", "t".repeat(128)),
        ),
        (
            format!("x:{}", "t".repeat(129)),
            "ERR invalid reference format".into(),
        ),
        ("x@sha256:abc".into(), "ERR invalid reference format".into()),
        (
            format!("x@sha256:{}", "a".repeat(63)),
            "ERR invalid checksum digest length".into(),
        ),
        (
            format!("x@sha256:{}", "A".repeat(64)),
            "ERR invalid digest format".into(),
        ),
        (
            format!("x@sha384:{}", "a".repeat(96)),
            format!("docker.io/library/x@sha384:{}", "a".repeat(96)),
        ),
        (
            format!("x@sha512:{}", "a".repeat(128)),
            format!("docker.io/library/x@sha512:{}", "a".repeat(128)),
        ),
        (
            format!("x@md5:{}", "a".repeat(32)),
            "ERR unsupported digest algorithm".into(),
        ),
        (
            format!("x@sha256:{}", "a".repeat(128)),
            "ERR invalid checksum digest length".into(),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(norm(&input), want, "input {input:?}");
    }
}

#[test]
fn name_length_limit_counts_the_path_only() {
    // As distribution/reference v0.6: `library/` is 8 characters of the path, 247 + 8 = 255;
    // neither the registry host nor the tag counts.
    assert!(Reference::parse_normalized(&"a".repeat(247)).is_ok());
    assert_eq!(
        Reference::parse_normalized(&"a".repeat(248)),
        Err(ReferenceError::NameTooLong)
    );
    let long_host = format!("{}.io/x", "h".repeat(251));
    assert!(Reference::parse_normalized(&long_host).is_ok());
    let long_tag = format!("{}:{}", "a".repeat(247), "t".repeat(128));
    assert!(Reference::parse_normalized(&long_tag).is_ok());
    let long_path = format!("localhost:5000/{}", "p".repeat(256));
    assert_eq!(
        Reference::parse_normalized(&long_path),
        Err(ReferenceError::NameTooLong)
    );
}

#[test]
fn split_parts_and_familiar_forms() {
    let cases = [
        ("nginx", "docker.io", "library/nginx", "nginx"),
        ("user/app:v1", "docker.io", "user/app", "user/app:v1"),
        (
            "docker.io/library/a/b",
            "docker.io",
            "library/a/b",
            "library/a/b",
        ),
        (
            "localhost:5000/x:1",
            "localhost:5000",
            "x",
            "localhost:5000/x:1",
        ),
        ("foo_bar.com/x", "", "foo_bar.com/x", "foo_bar.com/x"),
        // As in Docker, the familiar form of a Docker Hub path whose first component
        // looks like a host reads back as another registry.
        ("docker.io/a.b/c", "docker.io", "a.b/c", "a.b/c"),
    ];
    for (input, domain, path, familiar) in cases {
        let r = Reference::parse_normalized(input).unwrap();
        assert_eq!(r.domain(), domain, "{input}");
        assert_eq!(r.path(), path, "{input}");
        assert_eq!(r.familiar(), familiar, "{input}");
    }
}

#[test]
fn boundaries_treat_host_and_port_as_one_component() {
    let prefixes_of = |r: &Reference| {
        let mut out = Vec::new();
        r.for_each_boundary(|n| out.push(r.as_str()[..n].to_string()));
        out
    };
    let r = Reference::parse_normalized("example.com:5000/a/b:1").unwrap();
    let prefixes = prefixes_of(&r);
    assert_eq!(
        prefixes,
        [
            "example.com:5000",
            "example.com:5000/a",
            "example.com:5000/a/b",
            "example.com:5000/a/b:1"
        ]
    );
    let d = Reference::parse_normalized(&format!("[::1]:5/x@sha256:{H64}")).unwrap();
    let prefixes = prefixes_of(&d);
    assert_eq!(prefixes, ["[::1]:5", "[::1]:5/x", d.as_str()]);
}

#[test]
fn hosts() {
    for ok in [
        "ghcr.io",
        "localhost",
        "localhost:5000",
        "[::1]:5000",
        "Registry",
    ] {
        assert!(is_registry_host(ok), "{ok}");
    }
    for bad in ["docker", "ghcr.io/x", "-a.io", "a.io:", ""] {
        assert!(!is_registry_host(bad), "{bad}");
    }
}

#[test]
fn normalized_form_is_a_fixed_point() {
    for s in [
        "nginx",
        "Foo/bar:v",
        "foo_bar.com/x",
        "[::1]:5000/foo",
        "index.docker.io/x",
    ] {
        let once = Reference::parse_normalized(s).unwrap().to_string();
        let twice = Reference::parse_normalized(&once).unwrap().to_string();
        assert_eq!(once, twice);
    }
}

proptest::proptest! {
    #[test]
    fn parsing_never_panics_and_normal_forms_are_fixed_points(
        s in "[a-zA-Z0-9._:/@\\[\\]-]{0,80}",
    ) {
        let _ = Reference::parse(&s);
        if let Ok(r) = Reference::parse_normalized(&s) {
            let again = Reference::parse_normalized(r.as_str()).unwrap();
            proptest::prop_assert_eq!(&again, &r);
        }
    }
}

#[test]
fn the_domain_of_a_normalized_reference_is_its_first_part() {
    assert_eq!(
        domain_of_normalized("127.0.0.1:5000/app:dev"),
        "127.0.0.1:5000"
    );
    assert_eq!(
        domain_of_normalized("docker.io/library/nginx:1.27"),
        "docker.io"
    );
}
