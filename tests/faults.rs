//! Faults injected on purpose, on the real control plane: the operator crashing after each
//! of its writes, its connections stalled, cut and partitioned by a proxy, and a leader
//! frozen past its Lease. Through all of them no VM has two live pods, and everything
//! converges once the fault ends. Run with `scripts/test`.

// Each scenario reads top to bottom, as the fault unfolds.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use imagemap::operator::Options;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use support::fault_proxy::{FaultProxy, Seen};
use support::vms::*;
use support::*;

fn image(i: usize) -> String {
    format!("localhost:5000/compute:tilt-{i}")
}

async fn point_mapping_at(e: &Env, to: &str) {
    let patch = json!({"spec": {"rules": tilt_rule(to)}});
    e.mappings
        .patch("tilt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits until the VM's status resolves its root disk to `to` (the operator acted on a
/// change, whether or not its pod could follow yet).
async fn wait_resolved(e: &Env, vm_name: &str, to: &str) {
    wait_vm(e, vm_name, &format!("resolves to {to}"), |v| {
        v.status.as_ref().is_some_and(|s| {
            s.resolved_images
                .iter()
                .any(|i| i.slot == "rootDisk" && i.resolved.as_deref() == Some(to))
        })
    })
    .await;
}

/// Waits until the operator has seen the latest generation of mapping `tilt`: its
/// status says so.
async fn wait_mapping_observed(e: &Env) {
    let generation = e.mappings.get("tilt").await.unwrap().metadata.generation;
    wait_list(
        e.mappings.clone(),
        watcher::Config::default(),
        &format!("tilt observed at generation {generation:?}"),
        |ms| {
            ms.iter().any(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| s.observed_generation == generation)
            })
        },
    )
    .await;
}

/// Waits until each of `vms` has exactly one pod, live, with root disk `disk`.
async fn wait_all_on(e: &Env, vms: &[String], disk: &str) {
    wait_list(
        e.pods.clone(),
        watcher::Config::default(),
        &format!("{} VMs on {disk}", vms.len()),
        |pods| {
            vms.iter().all(|vm| {
                let of: Vec<_> = pods
                    .iter()
                    .filter(|p| p.labels().get(imagemap::core::runner_pod::VM_LABEL) == Some(vm))
                    .collect();
                of.len() == 1
                    && of[0].metadata.deletion_timestamp.is_none()
                    && root_disk(of[0]) == disk
            })
        },
    )
    .await;
}

/// An operator in this process acting in `e`'s namespace, reaching the API server
/// through a fault proxy.
async fn operator_behind_proxy(e: &Env) -> (FaultProxy, Operator) {
    let proxy = FaultProxy::start(e.client.clone()).await;
    let base = kube::Config::infer().await.unwrap();
    let op = Operator::start_with(proxy.config(&base), &[&e.ns], Options::default());
    (proxy, op)
}

/// Sends a signal (`-STOP`, `-CONT`) to a process.
fn signal(pid: &str, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

/// `imagemap run` as a process, logging to `log`; killed when dropped.
fn operator_process(
    args: &[&str],
    envs: &[(&str, &std::ffi::OsStr)],
    log: &Path,
) -> tokio::process::Child {
    let log = std::fs::File::create(log).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_imagemap"));
    cmd.arg("run")
        .args(args)
        .args(["--health-addr", "off"])
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_crash_right_after_any_write_leaves_no_second_pod_and_a_restart_converges() {
    let e = env("fault-crash").await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    let log = std::env::temp_dir().join(format!("{}.log", e.ns));
    let run = ["--namespace", e.ns.as_str()];
    {
        let _op = operator_process(&run, &[], &log);
        wait_single_pod(&e, "dev", &image(0)).await;
    }
    let never_two = NeverTwoLivePods::watch(&e);
    // Each round replaces the pod once per crash point: the operator aborts right after its
    // 1st, 2nd, ... write of the replacement (status, delete, create, status, Events), until
    // a replacement needs fewer writes than the crash point; a fresh operator then finishes.
    let mut change = 0;
    let mut sequence_lengths = Vec::new();
    for _round in 0..2 {
        for n in 1.. {
            change += 1;
            let crash_at = n.to_string();
            let mut op = operator_process(
                &[&run[..], &["--abort-after-writes", &crash_at]].concat(),
                &[],
                &log,
            );
            let target = image(change);
            point_mapping_at(&e, &target).await;
            let crashed = tokio::select! {
                status = op.wait() => {
                    let status = status.unwrap();
                    assert!(!status.success(), "the operator ended without crashing: {status}");
                    true
                }
                _ = wait_single_pod(&e, "dev", &target) => false,
            };
            drop(op);
            if !crashed {
                // The whole replacement took fewer than `n` writes.
                sequence_lengths.push(n - 1);
                break;
            }
            let _op = operator_process(&run, &[], &log);
            wait_single_pod(&e, "dev", &image(change)).await;
        }
    }
    never_two.check().await;
    println!(
        "crashed after every write of {change} replacements; writes per replacement: {sequence_lengths:?}"
    );
    assert!(
        sequence_lengths.iter().all(|&n| n >= 3),
        "a replacement writes at least a delete, a create and a status: {sequence_lengths:?}"
    );
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_stalled_pod_watch_through_a_tilt_loop_never_leads_to_a_second_pod() {
    let e = env("fault-stall").await;
    let (proxy, _op) = operator_behind_proxy(&e).await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    wait_single_pod(&e, "dev", &image(0)).await;
    let never_two = NeverTwoLivePods::watch(&e);

    // The operator's pod watch delivers nothing for longer than any of its timeouts (the
    // longest, a starting pod's grace, is 30 s) while five builds land.
    let stalled = Instant::now();
    proxy.stall_watches("/pods");
    for i in 1..=5 {
        point_mapping_at(&e, &image(i)).await;
        wait_mapping_observed(&e).await;
    }
    // The fault lasts 40 s, whatever the operator does meanwhile.
    tokio::time::sleep_until((stalled + Duration::from_secs(40)).into()).await;
    proxy.heal();
    wait_single_pod(&e, "dev", &image(5)).await;
    never_two.check().await;
    let pods = e.pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(pods.items.len(), 1, "every earlier pod is gone");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn after_20_seconds_cut_off_the_operator_converges_within_30_seconds() {
    let e = env("fault-cut").await;
    let (proxy, _op) = operator_behind_proxy(&e).await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    let vms: Vec<String> = (0..3).map(|i| format!("vm-{i}")).collect();
    for vm in &vms {
        e.add_vm(vm, true, "Always", COMPUTE).await;
    }
    wait_all_on(&e, &vms, &image(0)).await;
    let never_two = NeverTwoLivePods::watch(&e);

    proxy.cut();
    point_mapping_at(&e, &image(1)).await;
    // The partition lasts 20 s.
    tokio::time::sleep(Duration::from_secs(20)).await;
    proxy.heal();
    let healed = Instant::now();
    wait_all_on(&e, &vms, &image(1)).await;
    let heal_time = healed.elapsed();
    never_two.check().await;
    println!(
        "converged {:.1} s after a 20 s partition healed",
        heal_time.as_secs_f64()
    );
    assert!(heal_time <= Duration::from_secs(30), "{heal_time:?}");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_mapping_deleted_while_the_operator_was_cut_off_is_gone_after_the_relist() {
    let e = env("fault-relist").await;
    let (proxy, _op) = operator_behind_proxy(&e).await;
    e.add_mapping("tilt", tilt_rule(&image(1))).await;
    e.add_vm("dev", true, "Always", COMPUTE).await;
    e.add_vm("steady", false, "Always", COMPUTE).await;
    wait_single_pod(&e, "dev", &image(1)).await;
    wait_single_pod(&e, "steady", &image(1)).await;

    proxy.cut();
    e.mappings
        .delete("tilt", &DeleteParams::default())
        .await
        .unwrap();
    // The mapping watch cannot resume where it was: it must list again.
    proxy.expire_next_watch("/imagemappings");
    proxy.heal();
    let healed = Instant::now();
    wait_single_pod(&e, "dev", COMPUTE_NORMALIZED).await;
    wait_resolved(&e, "steady", COMPUTE_NORMALIZED).await;
    for name in ["dev", "steady"] {
        let vm = e.vms.get(name).await.unwrap();
        let status = vm.status.unwrap();
        assert!(
            status.resolved_images.iter().all(|i| i.source.is_none()),
            "{name} still names a rule: {:?}",
            status.resolved_images
        );
    }
    let relisted = proxy.seen().iter().any(|s: &Seen| {
        s.at > healed && s.target.contains("/imagemappings?") && !s.target.contains("watch=")
    });
    assert!(relisted, "the mapping watch listed again after the 410");
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_frozen_leader_makes_no_write_after_its_successor_began() {
    let e = env("fault-handover").await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    let vms: Vec<String> = (0..30).map(|i| format!("vm-{i}")).collect();
    for vm in &vms {
        e.add_vm(vm, true, "Always", COMPUTE).await;
    }
    let (proxy_a, proxy_b) = (
        FaultProxy::start(e.client.clone()).await,
        FaultProxy::start(e.client.clone()).await,
    );
    let log = |who: &str| std::env::temp_dir().join(format!("{}-{who}.log", e.ns));
    let elected = [
        "--namespace",
        e.ns.as_str(),
        "--leader-elect",
        "--lease-namespace",
        e.ns.as_str(),
        "--lease-duration-seconds",
        "4",
    ];
    let (kube_a, kube_b) = (proxy_a.kubeconfig(&e.ns), proxy_b.kubeconfig(&e.ns));
    let mut a = operator_process(&elected, &[("KUBECONFIG", kube_a.as_os_str())], &log("a"));
    wait_all_on(&e, &vms, &image(0)).await;
    let mut b = operator_process(&elected, &[("KUBECONFIG", kube_b.as_os_str())], &log("b"));
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), &e.ns);
    let holder = leases.get("imagemap-operator").await.unwrap();
    let a_identity = holder.spec.unwrap().holder_identity.unwrap();
    assert!(
        std::fs::read_to_string(log("a"))
            .unwrap()
            .contains(&a_identity),
        "a holds the Lease as {a_identity}"
    );
    let never_two = NeverTwoLivePods::watch(&e);

    // A fan-out starts; the leader freezes in the middle of it.
    let is_act = |s: &Seen| s.is_write() && !s.target.contains("/leases/");
    let changed = Instant::now();
    point_mapping_at(&e, &image(1)).await;
    proxy_a
        .wait_seen("the leader's first delete of the fan-out", |s| {
            s.at > changed && is_act(s) && s.method == http::Method::DELETE
        })
        .await;
    let a_pid = a.id().unwrap().to_string();
    signal(&a_pid, "-STOP");
    let frozen = Instant::now();

    // The follower takes over once the Lease expired, and acts.
    let b_first = proxy_b
        .wait_seen("the follower's first write", is_act)
        .await;
    // The old leader wakes up with its reconciles where they were.
    signal(&a_pid, "-CONT");
    let resumed = Instant::now();
    let a_status = tokio::time::timeout(WAIT, a.wait()).await.unwrap().unwrap();
    assert!(
        !a_status.success(),
        "the old leader ends: it lost the Lease"
    );
    wait_all_on(&e, &vms, &image(1)).await;
    never_two.check().await;

    let a_acts: Vec<Seen> = proxy_a.seen().into_iter().filter(|s| is_act(s)).collect();
    let late: Vec<&Seen> = a_acts.iter().filter(|s| s.at >= b_first.at).collect();
    let since = |t: Instant| format!("{:.3} s", t.saturating_duration_since(frozen).as_secs_f64());
    assert!(
        late.is_empty(),
        "the old leader wrote after the new leader's first write ({:?} at {} after the freeze; resumed at {}): {:?}",
        b_first.target,
        since(b_first.at),
        since(resumed),
        late.iter()
            .map(|s| (since(s.at), &s.target))
            .collect::<Vec<_>>()
    );
    let a_last = a_acts.iter().map(|s| s.at).max().unwrap();
    let log_a = std::fs::read_to_string(log("a")).unwrap();
    println!(
        "handover: the new leader's first write {:.2} s after the old leader's last ({:.2} s after the freeze; lease 4 s); old leader's writes refused after waking: {}",
        (b_first.at - a_last).as_secs_f64(),
        (b_first.at - frozen).as_secs_f64(),
        log_a.matches("write refused").count()
    );
    b.kill().await.unwrap();
}

/// Two `imagemap run --leader-elect` processes behind their own proxies, with `env`; the
/// first leads (its fan-out done) before the second starts and has read the Lease.
struct Pair {
    proxies: [FaultProxy; 2],
    children: [tokio::process::Child; 2],
    logs: [std::path::PathBuf; 2],
}

async fn elected_pair(e: &Env, vms: &[String], env: &[(&str, &std::ffi::OsStr)]) -> Pair {
    let proxies = [
        FaultProxy::start(e.client.clone()).await,
        FaultProxy::start(e.client.clone()).await,
    ];
    let elected = [
        "--namespace",
        e.ns.as_str(),
        "--leader-elect",
        "--lease-namespace",
        e.ns.as_str(),
        "--lease-duration-seconds",
        "4",
    ];
    let logs = ["a", "b"].map(|who| std::env::temp_dir().join(format!("{}-{who}.log", e.ns)));
    let start = |i: usize| {
        let kubeconfig = proxies[i].kubeconfig(&e.ns);
        let mut envs = vec![("KUBECONFIG", kubeconfig.as_os_str())];
        envs.extend_from_slice(env);
        operator_process(&elected, &envs, &logs[i])
    };
    let a = start(0);
    wait_all_on(e, vms, &image(0)).await;
    let b = start(1);
    proxies[1]
        .wait_seen("the second replica reading the Lease", |s| {
            s.target.contains("/leases/imagemap-operator")
        })
        .await;
    Pair {
        children: [a, b],
        proxies,
        logs,
    }
}

/// Writes other than to the Lease: acting on VMs, pods, mappings, Events.
fn is_act(s: &Seen) -> bool {
    s.is_write() && !s.target.contains("/leases/")
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn two_replicas_given_one_pod_name_have_one_writer() {
    let e = env("fault-same-name").await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    let vms: Vec<String> = (0..10).map(|i| format!("vm-{i}")).collect();
    for vm in &vms {
        e.add_vm(vm, true, "Always", COMPUTE).await;
    }
    let same = std::ffi::OsStr::new("imagemap-0");
    let mut pair = elected_pair(&e, &vms, &[("POD_NAME", same)]).await;
    let never_two = NeverTwoLivePods::watch(&e);
    let changed = Instant::now();
    point_mapping_at(&e, &image(1)).await;
    wait_all_on(&e, &vms, &image(1)).await;
    never_two.check().await;
    let acts: Vec<usize> = pair
        .proxies
        .iter()
        .map(|p| {
            p.seen()
                .iter()
                .filter(|s| s.at > changed && is_act(s))
                .count()
        })
        .collect();
    let lease = Api::<Lease>::namespaced(e.client.clone(), &e.ns)
        .get("imagemap-operator")
        .await
        .unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap();
    println!("two replicas named imagemap-0: writes in one fan-out {acts:?}; holder {holder}");
    assert!(acts[0] > 0, "the leader acted");
    assert_eq!(acts[1], 0, "the other replica wrote nothing");
    assert!(holder.starts_with("imagemap-0_"), "{holder}");
    for child in &mut pair.children {
        child.kill().await.unwrap();
    }
    let _ = &pair.logs;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn a_deleted_lease_stops_the_old_leaders_writes_before_the_new_one_begins() {
    let e = env("fault-lease-deleted").await;
    e.add_mapping("tilt", tilt_rule(&image(0))).await;
    let vms: Vec<String> = (0..30).map(|i| format!("vm-{i}")).collect();
    for vm in &vms {
        e.add_vm(vm, true, "Always", COMPUTE).await;
    }
    let mut pair = elected_pair(&e, &vms, &[]).await;
    let never_two = NeverTwoLivePods::watch(&e);

    // Mid fan-out, someone deletes the Lease.
    let changed = Instant::now();
    point_mapping_at(&e, &image(1)).await;
    pair.proxies[0]
        .wait_seen("the leader's first delete of the fan-out", |s| {
            s.at > changed && is_act(s) && s.method == http::Method::DELETE
        })
        .await;
    Api::<Lease>::namespaced(e.client.clone(), &e.ns)
        .delete("imagemap-operator", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let b_first = pair.proxies[1]
        .wait_seen("the new leader's first write", |s| {
            s.at > deleted && is_act(s)
        })
        .await;
    wait_all_on(&e, &vms, &image(1)).await;
    never_two.check().await;
    let a_status = tokio::time::timeout(WAIT, pair.children[0].wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        !a_status.success(),
        "the old leader ends: it lost the Lease"
    );
    let a_acts: Vec<Seen> = pair.proxies[0]
        .seen()
        .into_iter()
        .filter(|s| s.at > changed && is_act(s))
        .collect();
    let a_last = a_acts.iter().map(|s| s.at).max().unwrap();
    let since = |t: Instant| t.saturating_duration_since(deleted).as_secs_f64();
    println!(
        "Lease deleted mid fan-out: the old leader's last write {:.2} s after, the new leader's first {:.2} s after (lease 4 s)",
        since(a_last),
        since(b_first.at)
    );
    assert!(
        a_last < b_first.at,
        "the old leader wrote {:.2} s after the deletion, after the new leader's first write at {:.2} s",
        since(a_last),
        since(b_first.at)
    );
    pair.children[1].kill().await.unwrap();
}
