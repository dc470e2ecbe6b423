//! Following a moving tag by digest, against a real CNCF registry and the real control
//! plane: pods pinned to the digest a tag points to, and replaced (or reported) when it
//! moves. Run with `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::{Duration, Instant};

use imagemap::core::allowed_registries::AllowedRegistries;
use imagemap::core::namespaced_name::NamespacedName;
use imagemap::operator::Options;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::PostParams;
use kube::runtime::watcher;
use serde_json::json;
use support::registry::{TestRegistry, credentials_secret};
use support::vms::*;
use support::*;

async fn wait_event(e: &Env, object: &str, reason: &str) {
    use k8s_openapi::api::core::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(e.client.clone(), &e.ns);
    wait_list(
        api,
        watcher::Config::default(),
        &format!("event {reason} on {object}"),
        |evs| {
            evs.iter().any(|ev| {
                ev.involved_object.name.as_deref() == Some(object)
                    && ev.reason.as_deref() == Some(reason)
            })
        },
    )
    .await;
}

/// A mapping that sends the compute image to `to` and follows its tag.
fn follow_rule(to: &str) -> serde_json::Value {
    json!([{"match": {"repository": "neondatabase/vm-compute-node-v17"}, "to": to, "followTag": true}])
}

/// A registry holding a first build at `:dev`, an operator polling it every `interval`,
/// and the mapping that follows `:dev`: `(registry, tag, first digest, operator)`.
async fn following(e: &Env, interval: Duration) -> (TestRegistry, String, String, Operator) {
    let registry = TestRegistry::start(&e.ns).await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: interval,
            insecure_registries: vec![registry.host()],
            allowed_registries: AllowedRegistries::only(vec![registry.host()]),
            ..Options::default()
        },
    )
    .await;
    e.add_mapping("constant", follow_rule(&tag)).await;
    (registry, tag, first, op)
}

/// Waits until the VM's status reports `digest` for its root disk (and says it follows it).
async fn wait_digest(e: &Env, vm_name: &str, digest: &str) {
    wait_vm(e, vm_name, &format!("reports {digest}"), |v| {
        v.status.as_ref().is_some_and(|s| {
            s.resolved_images.iter().any(|i| {
                i.slot == "rootDisk" && i.follow_tag && i.digest.as_deref() == Some(digest)
            })
        })
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_pushed_tag_moves_live_reload_pods_and_is_reported_to_the_others() {
    let e = env("digest-poll").await;
    let interval = Duration::from_secs(1);
    let (registry, tag, first, op) = following(&e, interval).await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    e.add_vm("steady", false, "Always", COMPUTE).await;
    // Pinned to the digest `:dev` points to.
    let live_before = wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    let steady_before = wait_single_pod(&e, "steady", &format!("{tag}@{first}")).await;
    wait_digest(&e, "live", &first).await;
    // Pinned pods of an unmoved tag wait for nothing.
    wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        "the mapping counts 2 VMs, none awaiting a restart",
        |ms| {
            ms.iter().any(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| s.affected_vms == Some(2) && s.awaiting_restart.is_empty())
            })
        },
    )
    .await;

    // A new build is pushed to the same tag.
    let second = registry.push("vm-compute-node-v17", "dev", "build 2");
    assert_ne!(first, second);
    let pushed = Instant::now();
    let live_after = wait_single_pod(&e, "live", &format!("{tag}@{second}")).await;
    let replaced = pushed.elapsed();
    assert_ne!(live_after.name_any(), live_before.name_any());
    wait_digest(&e, "live", &second).await;

    // Without liveReload, the VM says a restart is due and names the new digest.
    wait_condition(&e, "steady", "ImagesCurrent", "RestartRequired", &second).await;
    let steady_pod = e.pods.get(&steady_before.name_any()).await.unwrap();
    assert_eq!(steady_pod.uid(), steady_before.uid(), "untouched");
    // The mapping lists it as waiting for a restart (and only it), and its rule the tag it
    // follows with the digest it points to now.
    let awaiting = format!("{}/steady", e.ns);
    let followed = imagemap::core::api::FollowedTag {
        reference: tag.clone(),
        digest: Some(second.clone()),
    };
    wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        "the mapping lists steady as awaiting a restart",
        |ms| {
            ms.iter().any(|m| {
                m.status.as_ref().is_some_and(|s| {
                    s.awaiting_restart == [awaiting.clone()]
                        && s.rules[0].followed_tags == [followed.clone()]
                })
            })
        },
    )
    .await;

    // One check per interval for the one tag, however many VMs follow it.
    let (made, intervals) = checks_in_five_intervals(&op, interval).await;
    println!(
        "push to pinned replacement pod: {:.2} s (poll interval {interval:?}); {made} checks in {intervals:.1} intervals for 1 tag and 2 VMs",
        replaced.as_secs_f64()
    );
}

/// Counts the successful registry checks over five poll intervals, and asserts there is
/// one per interval: at most one more (a window's edges), at least two fewer (checks come
/// a jittered interval apart, up to a fifth later).
async fn checks_in_five_intervals(op: &Operator, interval: Duration) -> (u64, f64) {
    let (checks, window) = (op.observers.metrics.tag_checks("ok"), Instant::now());
    tokio::time::sleep(interval * 5).await; // a measuring window, not a wait for a condition
    let made = op.observers.metrics.tag_checks("ok") - checks;
    let intervals = window.elapsed().as_secs_f64() / interval.as_secs_f64();
    let counted = f64::from(u32::try_from(made).unwrap());
    assert!(
        counted <= intervals + 1.0 && counted >= intervals - 2.0,
        "{made} checks in {intervals:.1} intervals"
    );
    (made, intervals)
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_registry_that_stops_answering_never_touches_running_pods() {
    let e = env("digest-down").await;
    let (mut registry, tag, first, _op) = following(&e, Duration::from_secs(1)).await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    let before = wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    let never_two = NeverTwoLivePods::watch(&e);

    registry.stop();
    wait_resolved_reason(&e, "live", "DigestUnverified", &first).await;
    wait_event(&e, "live", "DigestUnverified").await;
    let pod = e.pods.get(&before.name_any()).await.unwrap();
    assert_eq!(pod.uid(), before.uid(), "the running pod is untouched");
    assert!(pod.metadata.deletion_timestamp.is_none());

    // Back, with a build pushed before the operator looked again: the error clears and
    // the move is followed.
    registry.restart().await;
    let second = registry.push("vm-compute-node-v17", "dev", "build 2");
    wait_single_pod(&e, "live", &format!("{tag}@{second}")).await;
    wait_resolved_reason(&e, "live", "Resolved", "").await;
    never_two.check().await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_push_notification_moves_the_pod_at_once_and_a_forged_one_changes_nothing() {
    let e = env("digest-push").await;
    let (notify_port, token) = (free_port(), "push-token-for-tests");
    let registry = TestRegistry::start_notifying(
        &e.ns,
        &format!("http://127.0.0.1:{notify_port}/events"),
        token,
    )
    .await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let token_file = std::env::temp_dir().join(format!("{}-notification-token", e.ns));
    std::fs::write(&token_file, token).unwrap();
    let endpoint = imagemap::operator::RegistryNotifications {
        addr: format!("127.0.0.1:{notify_port}"),
        token: std::sync::Arc::new(imagemap::operator::TokenFile::open(&token_file).unwrap()),
    };
    let op = Operator::start(
        &[&e.ns],
        Options {
            // Polling alone would take minutes: what moves the pod is the notification.
            tag_poll_interval: Duration::from_mins(5),
            insecure_registries: vec![registry.host()],
            allowed_registries: AllowedRegistries::only(vec![registry.host()]),
            ..Options::default()
        },
    )
    .await;
    let _endpoint = imagemap::operator::serve_notifications(&endpoint, &op.observers)
        .await
        .unwrap();
    e.add_mapping("constant", follow_rule(&tag)).await;
    // No grace period: the old pod goes at once, so the time measured is the operator's.
    let mut live = vm("live", true, "Always", COMPUTE);
    live.spec.termination_grace_period_seconds = Some(0);
    e.vms
        .create(&kube::api::PostParams::default(), &live)
        .await
        .unwrap();
    let before = wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    let never_two = NeverTwoLivePods::watch(&e);

    // Forged: a wrong token is refused; the right token with a made-up digest only makes
    // the operator look, and the tag has not moved.
    let forged = format!(
        r#"{{"events": [{{"action": "push", "target": {{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:{}", "repository": "vm-compute-node-v17", "tag": "dev"}}, "request": {{"host": "{}"}}}}]}}"#,
        "f".repeat(64),
        registry.host()
    );
    let post = |auth: String| {
        let forged = forged.clone();
        async move { http_post(notify_port, "/events", &auth, &forged).await }
    };
    assert_eq!(post("Bearer wrong".into()).await.0, 401);
    let checks = op.observers.metrics.tag_checks("ok");
    assert_eq!(post(format!("Bearer {token}")).await.0, 200);
    let deadline = Instant::now() + WAIT;
    while op.observers.metrics.tag_checks("ok") == checks {
        assert!(
            Instant::now() < deadline,
            "the notification led to no check"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pod = e.pods.get(&before.name_any()).await.unwrap();
    assert_eq!(pod.uid(), before.uid(), "a forged digest changes nothing");
    wait_digest(&e, "live", &first).await;

    // A real push: the registry notifies, the operator looks, the pod moves.
    let second = registry.push("vm-compute-node-v17", "dev", "build 2");
    let pushed = Instant::now();
    wait_single_pod(&e, "live", &format!("{tag}@{second}")).await;
    let took = pushed.elapsed();
    never_two.check().await;
    println!(
        "push to pinned replacement pod with a notification: {:.2} s",
        took.as_secs_f64()
    );
    assert!(took <= Duration::from_secs(2), "{took:?}");

    // The forged digest never reached a pod: the one replacement went from the first
    // digest to the second (Events are sent in order, so a replacement for the forged one
    // would have been announced before this one).
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(e.client.clone(), &e.ns);
    let replacements = wait_list(
        events,
        watcher::Config::default(),
        "the replacement announced",
        |evs| {
            evs.iter().any(|ev| {
                ev.reason.as_deref() == Some("PodRecreated")
                    && ev.message.as_deref().is_some_and(|m| m.contains(&second))
            })
        },
    )
    .await;
    for ev in &replacements {
        let message = ev.message.as_deref().unwrap_or_default();
        assert!(!message.contains(&"f".repeat(64)), "{message}");
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn resolve_asks_the_registry_only_when_told_and_pins_an_index_by_its_own_digest() {
    let registry = TestRegistry::start("resolve-cli").await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let digest = registry.push("vm-compute-node-v17", "dev", "build 1");
    let dir = std::env::temp_dir().join(format!("follow-cli-{}", registry.port));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mapping.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: m, namespace: dev}}\n\
             spec: {{rules: [{{match: {{repository: neondatabase/vm-compute-node-v17}}, to: '{tag}', followTag: true}}]}}\n"
        ),
    )
    .unwrap();
    let resolve = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_imagemap"))
            .args(["resolve", "-f", file.to_str().unwrap(), "-n", "dev"])
            .args(["--image", "neondatabase/vm-compute-node-v17", "-o", "json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (offline, _) = resolve(&[]);
    assert_eq!(offline["images"][0]["followTag"], true);
    assert_eq!(
        offline["images"][0]["resolvedDigest"],
        serde_json::Value::Null
    );
    let host = registry.host();
    let (asked, _) = resolve(&["--follow-tags", "--insecure-registries", &host]);
    assert_eq!(asked["images"][0]["resolvedDigest"], digest.as_str());

    // A multi-platform image: the tag is pinned to the index itself, not to one platform.
    let other = registry.push("vm-compute-node-v17", "other", "build 2");
    let index = registry.push_index("vm-compute-node-v17", "dev", &[&digest, &other]);
    assert!(index != digest && index != other);
    let (asked, _) = resolve(&["--follow-tags", "--insecure-registries", &host]);
    assert_eq!(asked["images"][0]["resolvedDigest"], index.as_str());

    // A private registry: asked with the entries of a Docker config file.
    let private = TestRegistry::start_private("resolve-cli-private").await;
    let private_digest = private.push("vm-compute-node-v17", "dev", "private build");
    std::fs::write(
        &file,
        format!(
            "apiVersion: imagemap.dev/v1alpha1\nkind: ImageMapping\nmetadata: {{name: m, namespace: dev}}\n\
             spec: {{rules: [{{match: {{repository: neondatabase/vm-compute-node-v17}}, to: '{}/vm-compute-node-v17:dev', followTag: true}}]}}\n",
            private.host()
        ),
    )
    .unwrap();
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        support::registry::docker_config(
            &private.host(),
            support::registry::PRIVATE_USER,
            support::registry::PRIVATE_PASSWORD,
        ),
    )
    .unwrap();
    let private_host = private.host();
    let (anonymous, notes) = resolve(&["--follow-tags", "--insecure-registries", &private_host]);
    // Not answered: a note, not a problem (the exit status is 0).
    assert!(
        notes.contains("note: ") && notes.contains("digest unknown"),
        "{notes}"
    );
    assert!(
        anonymous["images"][0]["digestError"]
            .as_str()
            .is_some_and(|e| e.contains("asked anonymously")),
        "{anonymous}"
    );
    let (with_config, _) = resolve(&[
        "--follow-tags",
        "--insecure-registries",
        &private_host,
        "--registry-config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(
        with_config["images"][0]["resolvedDigest"],
        private_digest.as_str()
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_thousand_vms_following_one_tag_cost_one_check_per_interval() {
    use futures::StreamExt;
    const VMS: usize = 1000;
    let e = env("digest-many").await;
    let interval = Duration::from_secs(1);
    let (_registry, _tag, digest, op) = following(&e, interval).await;
    futures::stream::iter(0..VMS)
        .for_each_concurrent(32, |i| {
            let e = &e;
            async move {
                e.add_vm(&format!("vm-{i}"), false, "Always", COMPUTE).await;
            }
        })
        .await;
    wait_list(
        e.vms.clone(),
        watcher::Config::default(),
        &format!("{VMS} VMs report {digest}"),
        |vms| {
            vms.len() == VMS
                && vms.iter().all(|v| {
                    v.status.as_ref().is_some_and(|s| {
                        s.resolved_images
                            .iter()
                            .any(|i| i.digest.as_deref() == Some(digest.as_str()))
                    })
                })
        },
    )
    .await;
    let (made, intervals) = checks_in_five_intervals(&op, interval).await;
    println!(
        "{made} registry checks in {intervals:.1} poll intervals for {VMS} VMs following one tag"
    );
}

/// An operator that checks `registry` every 5 minutes (so that only a change of the Secret
/// makes it ask again within a test), with the credentials of Secret `secret_name` in the
/// test namespace, serving that namespace's ImageMappings too.
async fn operator_with_credentials(
    e: &Env,
    registry: &TestRegistry,
    secret_name: &str,
) -> Operator {
    Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: Duration::from_mins(5),
            insecure_registries: vec![registry.host()],
            // The registry, and the token service of the token test (`localhost:PORT`).
            allowed_registries: AllowedRegistries::only(vec![registry.host(), "localhost".into()]),
            registry_credentials: Some(NamespacedName {
                namespace: e.ns.clone(),
                name: secret_name.into(),
            }),
            registry_credentials_namespaces: vec![e.ns.clone()],
            ..Options::default()
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_private_registry_is_asked_with_the_credentials_secret_and_a_fix_takes_effect_at_once() {
    use support::registry::PRIVATE_PASSWORD;
    let e = env("digest-private").await;
    let registry = TestRegistry::start_private(&e.ns).await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let secret_name = "registry-credentials";
    let _op = operator_with_credentials(&e, &registry, secret_name).await;
    e.add_mapping("constant", follow_rule(&tag)).await;
    // No grace period: the old pod goes at once, so the time measured is the operator's.
    let mut live = vm("live", true, "Always", COMPUTE);
    live.spec.termination_grace_period_seconds = Some(0);
    e.vms.create(&PostParams::default(), &live).await.unwrap();

    // No Secret yet: refused, and the VM says why; its pod runs the unpinned tag.
    wait_resolved_reason(
        &e,
        "live",
        "DigestUnverified",
        &format!("Secret {}/{secret_name} does not exist", e.ns),
    )
    .await;
    wait_single_pod(&e, "live", &tag).await;

    // A wrong password: refused, and the VM says which entry of which Secret was used.
    let secrets: kube::Api<Secret> = kube::Api::namespaced(e.client.clone(), &e.ns);
    secrets
        .create(
            &PostParams::default(),
            &credentials_secret(secret_name, &registry.host(), "wrong"),
        )
        .await
        .unwrap();
    wait_resolved_reason(
        &e,
        "live",
        "DigestUnverified",
        &format!(
            "asked with entry \"{}\" of Secret {}/{secret_name}",
            registry.host(),
            e.ns
        ),
    )
    .await;
    // Tenants read this status: never the user name or the password.
    let status = serde_json::to_string(&e.vms.get("live").await.unwrap().status).unwrap();
    assert!(
        !status.contains(support::registry::PRIVATE_USER) && !status.contains("wrong"),
        "{status}"
    );

    // Fixed: pinned at once, not at the next poll.
    let fixed = Instant::now();
    secrets
        .replace(
            secret_name,
            &PostParams::default(),
            &credentials_secret(secret_name, &registry.host(), PRIVATE_PASSWORD),
        )
        .await
        .unwrap();
    wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    let pinned = fixed.elapsed();
    wait_resolved_reason(&e, "live", "Resolved", "").await;
    println!("credentials fixed → pod pinned to the private registry's digest: {pinned:.2?}");
    assert!(pinned < Duration::from_secs(5), "{pinned:?}");

    // An entry the operator cannot use: a Warning Event on the Secret says why.
    secrets
        .replace(
            secret_name,
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": secret_name},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": "{\"auths\": {\"x\": {\"identitytoken\": \"t\"}}}"},
            }))
            .unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_event(&e, secret_name, "RegistryCredentialsUnusable").await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn registries_that_never_answer_or_refuse_hold_up_only_their_own_tags() {
    let e = env("digest-hole").await;
    // A "registry" that refuses every connection: its tag fails at once and backs off.
    let refused_host = format!("127.0.0.1:{}", free_port());
    // A "registry" that accepts connections and never says a word.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_host = format!("127.0.0.1:{}", hole.local_addr().unwrap().port());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&accepted);
    let _hole = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hole.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            held.push(socket);
        }
    });
    let registry = TestRegistry::start(&e.ns).await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let interval = Duration::from_secs(1);
    let op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: interval,
            insecure_registries: vec![registry.host(), hole_host.clone(), refused_host.clone()],
            allowed_registries: AllowedRegistries::only(vec![
                registry.host(),
                hole_host.clone(),
                refused_host.clone(),
            ]),
            ..Options::default()
        },
    )
    .await;
    let rules = json!([
        {"match": {"repository": "neondatabase/vm-compute-node-v17"}, "to": tag, "followTag": true},
        {"match": {"prefix": "docker.io/acme"}, "to": format!("{hole_host}/acme"), "followTag": true},
        {"match": {"prefix": "docker.io/refused"}, "to": format!("{refused_host}/refused"), "followTag": true},
    ]);
    e.add_mapping("two-registries", rules).await;
    // Ten tags at the silent registry, each check hanging until its 10 s limit...
    for i in 0..10 {
        e.add_vm(
            &format!("stuck-{i}"),
            false,
            "Always",
            &format!("acme/stuck-{i}:latest"),
        )
        .await;
    }
    // ...one at a registry that refuses connections...
    e.add_vm("refused", false, "Always", "refused/app:latest")
        .await;
    // ...and one at the working registry.
    let mut live = vm("live", true, "Always", COMPUTE);
    live.spec.termination_grace_period_seconds = Some(0);
    e.vms.create(&PostParams::default(), &live).await.unwrap();
    wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    // The refusing registry's tag has failed three times: its next check is 8 poll
    // intervals away, and must not set the pace of the others.
    let deadline = Instant::now() + WAIT;
    while op.observers.metrics.tag_checks("error") < 3 {
        assert!(
            Instant::now() < deadline,
            "the refusing registry was not asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Meanwhile the working registry's tag is checked once per interval.
    let (ok, since) = (op.observers.metrics.tag_checks("ok"), Instant::now());
    while op.observers.metrics.tag_checks("ok") < ok + 3 {
        assert!(Instant::now() < deadline, "the working tag is not checked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let three = since.elapsed();
    println!("three checks of the working tag beside the failing ones: {three:.2?}");
    assert!(three < interval * 5, "{three:?}");

    let second = registry.push("vm-compute-node-v17", "dev", "build 2");
    let pushed = Instant::now();
    wait_single_pod(&e, "live", &format!("{tag}@{second}")).await;
    let took = pushed.elapsed();
    let held = accepted.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "push to pinned pod, polling every {interval:?}, beside {held} connections to a silent registry and a refusing one in backoff: {:.2} s",
        took.as_secs_f64()
    );
    assert!(held > 0, "the operator asked the silent registry");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_registry_token_service_is_asked_with_the_credentials_secret() {
    use support::registry::{PRIVATE_PASSWORD, TokenService};
    let e = env("digest-token").await;
    let tokens = TokenService::start();
    let registry = TestRegistry::start_with_token_service(&e.ns, &tokens).await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let pushed_with = tokens.issued.lock().unwrap().len();
    // The Secret exists before the operator starts: its first check already uses it.
    let secret_name = "registry-credentials";
    let secrets: kube::Api<Secret> = kube::Api::namespaced(e.client.clone(), &e.ns);
    secrets
        .create(
            &PostParams::default(),
            &credentials_secret(secret_name, &registry.host(), PRIVATE_PASSWORD),
        )
        .await
        .unwrap();
    let op = operator_with_credentials(&e, &registry, secret_name).await;
    e.add_mapping("constant", follow_rule(&tag)).await;
    e.add_vm("live", true, "Always", COMPUTE).await;
    wait_single_pod(&e, "live", &format!("{tag}@{first}")).await;
    wait_resolved_reason(&e, "live", "Resolved", "").await;

    // The registry sent the operator to the token service, which issued it a pull token
    // for the Secret's credentials; no check went without one.
    let scopes = tokens.issued.lock().unwrap()[pushed_with..].to_vec();
    println!("tokens issued to the operator, by scope: {scopes:?}");
    assert!(!scopes.is_empty(), "the operator asked for no token");
    for scope in &scopes {
        assert!(
            scope.contains("vm-compute-node-v17")
                && scope.contains("pull")
                && !scope.contains("push"),
            "{scope}"
        );
    }
    assert_eq!(op.observers.metrics.tag_checks("error"), 0);
    assert_eq!(
        tokens.refused.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no token request without the credentials"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_credentials_serve_cluster_rules_and_not_a_tenants_mapping() {
    use imagemap::core::api::ClusterImageMapping;
    use support::registry::PRIVATE_PASSWORD;
    let e = env("digest-whose").await;
    let registry = TestRegistry::start_private(&e.ns).await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let secret_name = "registry-credentials";
    kube::Api::<Secret>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &credentials_secret(secret_name, &registry.host(), PRIVATE_PASSWORD),
        )
        .await
        .unwrap();
    // The Secret serves no namespace's ImageMappings: only ClusterImageMapping rules.
    let _op = Operator::start(
        &[&e.ns],
        Options {
            tag_poll_interval: Duration::from_mins(5),
            insecure_registries: vec![registry.host()],
            allowed_registries: AllowedRegistries::only(vec![registry.host()]),
            registry_credentials: Some(NamespacedName {
                namespace: e.ns.clone(),
                name: secret_name.into(),
            }),
            ..Options::default()
        },
    )
    .await;
    // A tenant follows the private tag from an ImageMapping; an administrator follows the
    // same tag from a ClusterImageMapping (for another image, in this namespace only).
    e.add_mapping("tenant", follow_rule(&tag)).await;
    let cluster: ClusterImageMapping = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "ClusterImageMapping",
        "metadata": {"name": format!("{}-admin", e.ns)},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e.ns}},
            "rules": [{"match": {"repository": "neondatabase/vm-kernel"}, "to": tag, "followTag": true}]
        }
    }))
    .unwrap();
    kube::Api::<ClusterImageMapping>::all(e.client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    e.add_vm("tenant", true, "Always", COMPUTE).await;
    e.add_vm("admin", true, "Always", "neondatabase/vm-kernel:6.6")
        .await;

    // The cluster's rule is checked with the credentials: pinned.
    wait_single_pod(&e, "admin", &format!("{tag}@{first}")).await;
    // The tenant's is asked anonymously, and says so: not pinned.
    wait_resolved_reason(
        &e,
        "tenant",
        "DigestUnverified",
        &format!(
            "asked anonymously: Secret {}/{secret_name} serves ClusterImageMapping rules",
            e.ns
        ),
    )
    .await;
    wait_single_pod(&e, "tenant", &tag).await;
    let tenant = e.vms.get("tenant").await.unwrap();
    let status = serde_json::to_string(&tenant.status).unwrap();
    assert!(
        !status.contains(&first),
        "the tenant learns no digest: {status}"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn one_namespace_with_200_silent_tags_holds_up_no_other_namespace() {
    let noisy = env("digest-noisy").await;
    let quiet = env("digest-quiet").await;
    // 50 "registries" that accept connections and never say a word.
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut silent = Vec::new();
    for _ in 0..50 {
        let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        silent.push(format!("127.0.0.1:{}", hole.local_addr().unwrap().port()));
        let counter = std::sync::Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = hole.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                held.push(socket);
            }
        });
    }
    let registry = TestRegistry::start(&quiet.ns).await;
    let tag = format!("{}/vm-compute-node-v17:dev", registry.host());
    let first = registry.push("vm-compute-node-v17", "dev", "build 1");
    let mut hosts = silent.clone();
    hosts.push(registry.host());
    let interval = Duration::from_secs(1);
    let op = Operator::start(
        &[&noisy.ns, &quiet.ns],
        Options {
            tag_poll_interval: interval,
            insecure_registries: hosts.clone(),
            allowed_registries: AllowedRegistries::only(hosts),
            ..Options::default()
        },
    )
    .await;
    // The noisy namespace follows 210 tags at the silent registries (7 VMs of 30 images).
    let rules: Vec<_> = silent
        .iter()
        .map(|h| json!({"match": {"prefix": h}, "followTag": true}))
        .collect();
    noisy.add_mapping("silent", json!(rules)).await;
    for v in 0..7 {
        let extra: Vec<_> = (0..30)
            .map(|j| {
                let host = &silent[(v * 30 + j) % silent.len()];
                json!({"name": format!("c{j}"), "image": format!("{host}/app{v}-{j}:dev")})
            })
            .collect();
        let vm: imagemap::core::api::VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
            "metadata": {"name": format!("noisy-{v}")},
            "spec": {"guest": {"rootDisk": {"image": COMPUTE}}, "extraInitContainers": extra}
        }))
        .unwrap();
        noisy.vms.create(&PostParams::default(), &vm).await.unwrap();
    }
    wait_until(WAIT, "the noisy namespace's checks under way", || {
        accepted.load(std::sync::atomic::Ordering::Relaxed) >= 8
    })
    .await;

    // A VM that follows no tag is held by no one's pending check.
    let plain = Instant::now();
    quiet.add_vm("plain", true, "Always", "busybox:1.36").await;
    wait_single_pod(&quiet, "plain", "docker.io/library/busybox:1.36").await;
    let plain = plain.elapsed();
    // The quiet namespace's new VM follows its own tag: its pod comes at once.
    quiet.add_mapping("constant", follow_rule(&tag)).await;
    let started = Instant::now();
    quiet.add_vm("live", true, "Always", COMPUTE).await;
    wait_single_pod(&quiet, "live", &format!("{tag}@{first}")).await;
    let took = started.elapsed();
    let (checks, intervals) = checks_in_five_intervals(&op, interval).await;
    let held = accepted.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "beside 210 tags at 50 silent registries ({held} connections to them so far): a VM following nothing had its pod after {plain:.2?}; the quiet namespace's pinned pod after {took:.2?}, {checks} checks of its tag in {intervals:.1} intervals"
    );
    assert!(plain < Duration::from_secs(5), "{plain:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}
