//! The operator's reach, tried as a namespace editor would: registries that send huge
//! bodies or malformed digests, rules that name hosts nobody allowed, token realms and
//! redirects that point elsewhere. Against the real control plane, with a registry that
//! misbehaves on purpose. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::Duration;

use imagemap::core::allowed_registries::AllowedRegistries;
use imagemap::core::api::{ImageMapping, VirtualMachine};
use imagemap::operator::Options;
use kube::ResourceExt;
use kube::runtime::watcher;
use serde_json::json;
use support::hostile_registry::{Behaviour, HostileRegistry, Listener};
use support::vms::*;
use support::*;

const KERNEL: &str = "neondatabase/vm-kernel:6.6";

/// Waits until every VM named has `ImagesResolved` with `reason` and a message containing
/// the text given for it.
async fn wait_reasons(e: &Env, expected: &[(&str, &str, &str)]) -> Vec<VirtualMachine> {
    let vms = wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        "VM reasons",
        |vms| {
            expected.iter().all(|(name, reason, text)| {
                vms.iter().any(|v| {
                    v.name_any() == *name
                        && condition(v, "ImagesResolved")
                            .is_some_and(|c| c.1 == *reason && c.2.contains(text))
                })
            })
        },
    )
    .await;
    vms.iter().map(|v| (**v).clone()).collect()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn huge_manifests_and_error_bodies_are_read_to_a_bound() {
    const HUGE: usize = 400 << 20;
    let e = env("reach-bytes").await;
    let registry = HostileRegistry::start();
    let host = registry.host();
    registry.set("huge-manifest", Behaviour::HugeManifest(HUGE));
    registry.set("huge-error", Behaviour::HugeError(HUGE));
    e.add_mapping(
        "hostile",
        json!([
            {"match": {"repository": "neondatabase/vm-compute-node-v17"},
             "to": format!("{host}/huge-manifest:dev"), "followTag": true},
            {"match": {"repository": "neondatabase/vm-kernel"},
             "to": format!("{host}/huge-error:dev"), "followTag": true},
        ]),
    )
    .await;
    e.add_vm("manifest", true, "Always", COMPUTE).await;
    e.add_vm("error", true, "Always", KERNEL).await;
    let mut op = OperatorProcess::start(&[
        "--namespace",
        &e.ns,
        "--allowed-registries",
        &host,
        "--insecure-registries",
        &host,
        "--tag-poll-interval",
        "500ms",
    ])
    .await;
    let vms = wait_reasons(
        &e,
        &[
            (
                "manifest",
                "DigestUnverified",
                "manifest is larger than the 4096 KiB",
            ),
            ("error", "DigestUnverified", "answered 500"),
        ],
    )
    .await;
    // Several rounds of both: each check stops reading at its bound.
    wait_until(WAIT, "three checks of each huge answer", || {
        registry.requests_for("huge-manifest") >= 6 && registry.requests_for("huge-error") >= 6
    })
    .await;
    let (rss, peak) = op.rss_mib();
    let sizes: Vec<usize> = vms
        .iter()
        .map(|v| serde_json::to_string(&v.status).unwrap().len())
        .collect();
    println!(
        "400 MiB manifest and error body, {} and {} requests: operator RSS {rss:.0} MiB, peak {peak:.0} MiB; VM statuses {sizes:?} bytes",
        registry.requests_for("huge-manifest"),
        registry.requests_for("huge-error"),
    );
    assert!(op.running(), "the operator never restarts:\n{}", op.logs());
    assert!(peak < 128.0, "peak RSS {peak:.0} MiB");
    assert!(sizes.iter().all(|&s| s < 8 << 10), "{sizes:?}");
    // The pods run the tags unpinned: no digest was ever known.
    wait_single_pod(&e, "manifest", &format!("{host}/huge-manifest:dev")).await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn no_host_outside_the_allowed_registries_is_ever_contacted() {
    let e = env("reach-allowed").await;
    let outside = Listener::start();
    let out = outside.host();
    let registry = HostileRegistry::start();
    let host = registry.host();
    registry.set("realm", Behaviour::Realm(format!("http://{out}/token")));
    registry.set(
        "redirect",
        Behaviour::Redirect(format!("http://{out}/v2/redirect/manifests/dev")),
    );
    let _op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: Duration::from_millis(500),
            allowed_registries: AllowedRegistries::only(vec![host.clone()]),
            insecure_registries: vec![host.clone(), out.clone()],
            ..Options::default()
        },
    )
    .await;
    // Rules of every kind that follow the tag of whatever the VM names, at the outside
    // host; a realm and a redirect that point there.
    let escaped = out.replace('.', "\\.");
    e.add_mapping(
        "reach",
        json!([
            {"match": {"repository": format!("{out}/repo")}, "followTag": true},
            {"match": {"regex": format!("{escaped}/rx/.*")}, "followTag": true},
            {"match": {"prefix": format!("{out}/pre")}, "followTag": true},
            {"match": {"exact": format!("{out}/ex:dev")}, "followTag": true},
            {"match": {"repository": "neondatabase/vm-compute-node-v17"},
             "to": format!("{host}/realm:dev"), "followTag": true},
            {"match": {"repository": "neondatabase/vm-kernel"},
             "to": format!("{host}/redirect:dev"), "followTag": true},
        ]),
    )
    .await;
    for (name, image) in [
        ("repository", format!("{out}/repo:dev")),
        ("regex", format!("{out}/rx/app:dev")),
        ("prefix", format!("{out}/pre/app:dev")),
        ("exact", format!("{out}/ex:dev")),
        ("realm", COMPUTE.to_string()),
        ("redirect", KERNEL.to_string()),
    ] {
        e.add_vm(name, true, "Always", &image).await;
    }
    let not_allowed = "which is not in the operator's allowed registries";
    wait_reasons(
        &e,
        &[
            ("repository", "DisallowedTarget", not_allowed),
            ("regex", "DisallowedTarget", not_allowed),
            ("prefix", "DisallowedTarget", not_allowed),
            ("exact", "DisallowedTarget", not_allowed),
            (
                "realm",
                "DigestUnverified",
                &format!("token service {out} is not in"),
            ),
            (
                "redirect",
                "DigestUnverified",
                &format!("redirected to http://{out}"),
            ),
        ],
    )
    .await;
    // The realm and the redirect were met again and again, and never followed.
    wait_until(WAIT, "three checks of the realm and the redirect", || {
        registry.requests_for("realm") >= 3 && registry.requests_for("redirect") >= 3
    })
    .await;
    assert_eq!(outside.count(), 0, "connections to a host nobody allowed");
    // The VMs whose images the operator may not follow get no pod from a guess.
    for name in ["repository", "regex", "prefix", "exact"] {
        let vm = e.vms.get(name).await.unwrap();
        assert_eq!(kstatus(&[&vm]), ["Failed"], "{name}");
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn without_allowed_registries_no_tag_is_followed() {
    let e = env("reach-unlisted").await;
    let outside = Listener::start();
    let out = outside.host();
    let _op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: Duration::from_millis(500),
            insecure_registries: vec![out.clone()],
            ..Options::default()
        },
    )
    .await;
    e.add_mapping(
        "follow",
        json!([{"match": {"prefix": out.clone()}, "followTag": true}]),
    )
    .await;
    e.add_vm("vm", true, "Always", &format!("{out}/app:dev"))
        .await;
    let vms = wait_reasons(
        &e,
        &[("vm", "AllowedRegistriesRequired", "--allowed-registries")],
    )
    .await;
    let mapping: ImageMapping =
        wait_for(e.mappings.clone(), "follow", |m: Option<&ImageMapping>| {
            m.and_then(|m| m.status.as_ref()).is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.reason == "AllowedRegistriesRequired"
                        && c.message.contains("--allowed-registries")
                })
            })
        })
        .await;
    assert_eq!(kstatus(&[&mapping]), ["Failed"]);
    assert_eq!(kstatus(&[&vms[0]]), ["Failed"]);
    assert_eq!(outside.count(), 0);
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_malformed_digest_never_replaces_a_working_pod() {
    let e = env("reach-digest").await;
    let registry = HostileRegistry::start();
    let host = registry.host();
    let good = format!("sha256:{}", "ab".repeat(32));
    registry.set("app", Behaviour::Digest(good.clone()));
    let _op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: Duration::from_millis(500),
            allowed_registries: AllowedRegistries::only(vec![host.clone()]),
            insecure_registries: vec![host.clone()],
            ..Options::default()
        },
    )
    .await;
    e.add_mapping(
        "follow",
        json!([{"match": {"repository": "neondatabase/vm-compute-node-v17"},
                "to": format!("{host}/app:dev"), "followTag": true}]),
    )
    .await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    let pinned = format!("{host}/app:dev@{good}");
    let before = wait_single_pod(&e, "live", &pinned).await;
    let never_two = NeverTwoLivePods::watch(&e);

    // The registry switches to a digest that is none, then to one far too long.
    registry.set("app", Behaviour::Digest("sha256:zz".into()));
    wait_resolved_reason(
        &e,
        "live",
        "DigestUnverified",
        "\"sha256:zz\", which is not a digest",
    )
    .await;
    registry.set(
        "app",
        Behaviour::Digest(format!("sha256:{}", "a".repeat(100_000))),
    );
    wait_resolved_reason(&e, "live", "DigestUnverified", "which is not a digest").await;
    let vm = e.vms.get("live").await.unwrap();
    assert!(serde_json::to_string(&vm.status).unwrap().len() < 8 << 10);
    let pod = e.pods.get(&before.name_any()).await.unwrap();
    assert_eq!(pod.uid(), before.uid(), "the working pod is untouched");
    assert!(pod.metadata.deletion_timestamp.is_none());
    assert_eq!(root_disk(&pod), pinned);
    never_two.check().await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn huge_regex_rules_cost_little_and_hold_up_no_one() {
    use imagemap::core::runner_pod::pod_images;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};

    let tenant = env("reach-regex").await;
    let other = env("reach-regex-neighbour").await;
    let op = OperatorProcess::start(&["--namespace", &tenant.ns, "--namespace", &other.ns]).await;
    // 256 rules near the regex crate's default limit (10 MiB each), and a neighbour's
    // mapping right after: the neighbour's time counts the huge mapping's compile.
    let rules: Vec<_> = (0..256)
        .map(
            |i| json!({"match": {"regex": format!("docker\\.io/x{i}/\\w{{200}}")}, "to": "t.io/x"}),
        )
        .collect();
    // (The API server takes about 2 s to validate them: not the operator's time.)
    tenant.add_mapping("huge", json!(rules)).await;
    let started = std::time::Instant::now();
    other
        .add_mapping(
            "mirror",
            json!([{"match": {"exact": "busybox"}, "to": "mirror.io/busybox"}]),
        )
        .await;
    let huge = wait_for(
        tenant.mappings.clone(),
        "huge",
        |m: Option<&ImageMapping>| {
            m.and_then(|m| m.status.as_ref())
                .is_some_and(|s| s.conditions.iter().any(|c| c.reason == "InvalidRule"))
        },
    )
    .await;
    let status = huge.status.as_ref().unwrap();
    assert_eq!(status.rules.len(), 256);
    assert!(
        status.rules.iter().all(|r| r
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("256 KiB, the operator's limit per regex"))),
        "{:?}",
        status.rules[0]
    );
    assert_eq!(kstatus(&[&huge]), ["Failed"]);
    let reported = started.elapsed();

    // The neighbour's new VM runs the mapped image at once.
    wait_for(
        other.mappings.clone(),
        "mirror",
        |m: Option<&ImageMapping>| {
            m.and_then(|m| m.status.as_ref())
                .is_some_and(|s| s.observed_generation.is_some())
        },
    )
    .await;
    Api::<VirtualMachine>::namespaced(other.client.clone(), &other.ns)
        .create(
            &PostParams::default(),
            &vm("neighbour", true, "Always", "busybox"),
        )
        .await
        .unwrap();
    wait_list(
        Api::<Pod>::namespaced(other.client.clone(), &other.ns),
        pods_of("neighbour"),
        "the neighbour's pod with its mapped image",
        |pods| {
            pods.iter().any(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && pod_images(p)
                        .values()
                        .any(|i| i.starts_with("mirror.io/busybox"))
            })
        },
    )
    .await;
    let took = started.elapsed();
    let (_, peak) = op.rss_mib();
    println!(
        "256 \\w{{200}} regex rules: reported on their mapping {reported:?} after they were created; the neighbour's pod after {took:?}; operator peak RSS {peak:.0} MiB"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(peak < 128.0, "peak RSS {peak:.0} MiB");
}
