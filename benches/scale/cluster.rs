//! The cluster side of the benchmark: CRDs, namespaces, mappings and VMs, and waiting until
//! a set of objects has converged.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use imagemap::core::api::{ImageMapping, VirtualMachine};

/// Requests in flight at once, for every client of the benchmark.
pub const CONCURRENCY: usize = 32;
/// The image every VM asks for; the mapping rewrites it.
pub const COMPUTE: &str = "neondatabase/vm-compute-node-v17:latest";
const MANAGER: &str = "imagemap-bench";

pub fn target(tag: u32) -> String {
    format!("localhost:5000/compute:{tag}")
}

/// Installs the CRDs and waits until they serve.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in imagemap::core::crd_yaml::all() {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
        let established = kube::runtime::wait::conditions::is_crd_established();
        tokio::time::timeout(
            Duration::from_mins(1),
            kube::runtime::wait::await_condition(api.clone(), &name, established),
        )
        .await??;
    }
    Ok(())
}

/// Deletes `name` if it exists and waits until it is gone, then creates it afresh.
pub async fn fresh_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if let Some(old) = api.get_opt(name).await? {
        api.delete(name, &DeleteParams::default()).await?;
        let uid = old.uid().unwrap_or_default();
        let gone = kube::runtime::wait::conditions::is_deleted(&uid);
        let _ = tokio::time::timeout(
            Duration::from_mins(10),
            kube::runtime::wait::await_condition(api.clone(), name, gone),
        )
        .await;
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    api.create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// Applies the mapping `tilt` of `namespace`, rewriting the VMs' image to `target(tag)`.
pub async fn apply_mapping(client: &Client, namespace: &str, tag: u32) -> anyhow::Result<()> {
    let api: Api<ImageMapping> = Api::namespaced(client.clone(), namespace);
    let mapping = json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping",
        "metadata": {"name": "tilt"},
        "spec": {"rules": [{"match": {"repository": "neondatabase/vm-compute-node-v17"}, "to": target(tag)}]}
    });
    api.patch(
        "tilt",
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&mapping),
    )
    .await?;
    Ok(())
}

/// The VM `name`: liveReload, its pod deleted at once (grace period 0, so that the
/// comparison is about API work, not the simulated kubelet's timers).
pub fn vm(name: &str, namespace: &str) -> anyhow::Result<VirtualMachine> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "liveReload": true,
            "guest": {"rootDisk": {"image": COMPUTE}},
            "runnerImage": "neondatabase/neonvm-runner:v1",
            "terminationGracePeriodSeconds": 0
        }
    }))?)
}

/// Creates `n` VMs in `namespace`, `CONCURRENCY` at a time; returns them as created.
pub async fn create_vms(
    client: &Client,
    namespace: &str,
    n: usize,
) -> anyhow::Result<Vec<VirtualMachine>> {
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("vm-{i:05}");
                let vm = vm(&name, namespace)?;
                retry(&format!("creating VM {name}"), || async {
                    match api.create(&PostParams::default(), &vm).await {
                        Ok(vm) => Ok(vm),
                        Err(e) if is_status(&e, 409) => Ok(api.get(&name).await?),
                        Err(e) => Err(e.into()),
                    }
                })
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
}

/// Watches `api` until `done` holds for `n` objects (and no other object is left that
/// fails it, when `exact`), or `limit` passes. Each event costs one `done` call.
pub async fn converge<K>(
    api: Api<K>,
    config: watcher::Config,
    n: usize,
    limit: Duration,
    done: impl Fn(&K) -> bool,
) -> anyhow::Result<Settling>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + serde::de::DeserializeOwned
        + 'static,
{
    let mut ok: BTreeSet<String> = BTreeSet::new();
    let started = Instant::now();
    let mut settling = Settling::default();
    let mut events = watcher(api, config).default_backoff().boxed();
    let wait = async {
        while let Some(event) = events.try_next().await? {
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    if done(&o) {
                        ok.insert(o.name_any());
                    } else {
                        ok.remove(&o.name_any());
                    }
                }
                watcher::Event::Delete(o) => {
                    ok.remove(&o.name_any());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            if settling.half.is_none() && ok.len() * 2 >= n {
                settling.half = Some(started.elapsed());
            }
            if settling.most.is_none() && ok.len() * 10 >= n * 9 {
                settling.most = Some(started.elapsed());
            }
            if ok.len() >= n {
                return anyhow::Ok(settling);
            }
        }
        anyhow::bail!("the watch ended")
    };
    match tokio::time::timeout(limit, wait).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!("{} of {n} converged within {limit:?}", ok.len()),
    }
}

/// When half and 90 % of the objects had settled, from the start of [`converge`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Settling {
    pub half: Option<Duration>,
    pub most: Option<Duration>,
}

impl std::fmt::Display for Settling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
        write!(
            f,
            "50 % at {:.1} s, 90 % at {:.1} s",
            s(self.half),
            s(self.most)
        )
    }
}

/// Runs `op` until it succeeds, at most 5 times, waiting longer after each failure: an API
/// server at its limit drops connections now and then. `op` must be safe to repeat (a
/// create that already happened answers 409, which `op` treats as done).
pub async fn retry<T, F, Fut>(what: &str, mut op: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut wait = Duration::from_millis(200);
    for attempt in 1.. {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < 5 => {
                eprintln!("{what}: {e:#}; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => return Err(e.context(what.to_string())),
        }
    }
    unreachable!("the loop returns")
}

/// Whether `e` is the API server's answer `code`.
pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}
