//! `imagemap run`: the operator. VirtualMachines become runner pods with mapped images;
//! mapping changes re-reconcile exactly the VMs they affect.
//!
//! This file wires the rooms together; each owns one concern and says what it may call:
//! - [`watches`]: the watches and the caches they fill — every read comes from them;
//! - [`mappings`]: the rules in force (mapping, namespace and local registry events →
//!   recompile → the affected VMs queued) and the mappings' statuses;
//! - [`vms`]: the VM controller — its queue, the reconcile (observe, plan with
//!   [`crate::vm_plan`], apply), the pod watcher, and what it remembers per VM;
//! - [`tags`]: following tags by digest, their registries, credentials and notifications;
//! - [`observe`]: probes, metrics and progress, which every room reports to;
//! - [`leader`]: leader election and the fence on the leader's writes.
//!
//! Shared by all: [`context`] (the parts the tasks share), [`options`] (the flags), and two
//! small helpers, [`http_endpoint`] and [`jitter`]. Every write is a server-side apply with
//! one field manager, a pod create/delete/label patch, an Event or the Lease.

mod context;
mod http_endpoint;
mod jitter;
mod leader;
mod mappings;
mod observe;
mod options;
mod tags;
mod vms;
mod watches;

use std::future::Future;
use std::sync::Arc;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::future::ready;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use kube::{Client, Resource};

pub use context::{Context, Observers};
pub use leader::{
    ElectedClients, Fence, FenceClosed, LeaderElection, LeaseTiming, unique_identity,
};
pub use observe::progress::Progress;
pub use observe::{health, metrics};
pub use options::{DEFAULT_CONCURRENCY, Options, RegistryNotifications, SecretName};
pub use tags::token_file::TokenFile;
pub use vms::vm_reconciler::ReconcileError;
pub use vms::writes::FIELD_MANAGER;
pub use watches::cached_pod::CachedPod;
pub use watches::caches::{Caches, CachesListed, Listed};
pub use watches::projection::Projection;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::namespaced_name::NamespacedName;
use crate::runner_pod::VM_LABEL;
use mappings::{local_registry_watcher, mapping_status_writer, rules_watcher};
use observe::health::Health;
use rules_watcher::Change;
use tags::{credentials_watcher, push_endpoint, tag_follower};
use vms::trigger::Trigger;
use vms::{pod_watcher, replacements, vm_reconciler};
use watches::cache_events::{self, CacheEvent, Source};
use watches::invalid_objects::{self, Unreadable};
use watches::unreadable_mappings::UnreadableMappings;

/// The operator's background tasks: each runs for the operator's whole life, and all end
/// when the operator future ends or is dropped.
#[derive(Default)]
struct Tasks(Vec<(&'static str, tokio::task::JoinHandle<()>)>);

impl Tasks {
    fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.0.push((name, tokio::spawn(task)));
    }

    /// Waits until one of the tasks ends (returns, or panics) and says which.
    async fn first_ended(&mut self) -> anyhow::Error {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        let (result, i, _) = futures::future::select_all(self.0.iter_mut().map(|(_, h)| h)).await;
        let name = self.0[i].0;
        match result {
            Ok(()) => anyhow::anyhow!("the {name} stopped"),
            Err(e) => anyhow::anyhow!("the {name} failed: {e}"),
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for (_, handle) in &self.0 {
            handle.abort();
        }
    }
}

/// The operator's watches: the caches they fill, and the event streams of its tasks.
struct Watches {
    caches: Caches,
    /// Mapping and namespace events, for the rules watcher.
    changes: BoxStream<'static, Change>,
    /// Runner pod events, for the pod watcher.
    pods: BoxStream<'static, CacheEvent<CachedPod>>,
    /// VirtualMachine events, for the VM controller.
    vms: BoxStream<'static, Result<VirtualMachine, watcher::Error>>,
    /// Objects the operator cannot read, for the reporter.
    unreadable: UnboundedReceiver<Unreadable>,
    /// VirtualMachines deleted (or found gone by a re-list), for whoever remembers them.
    vms_deleted: UnboundedReceiver<NamespacedName>,
}

/// Sends the unreadable objects among a cache's events to the reporter.
fn report_unreadable<K: Resource<DynamicType = ()>>(
    to: &UnboundedSender<Unreadable>,
) -> impl FnMut(&CacheEvent<K>) + use<K> {
    let to = to.clone();
    move |event| {
        if let CacheEvent::Invalid(object) = event {
            // Closed only when the operator stops.
            let _ = to.unbounded_send(Unreadable {
                api_version: K::api_version(&()).into_owned(),
                kind: K::kind(&()).into_owned(),
                object: object.clone(),
            });
        }
    }
}

/// What each event of a mapping cache means for the rules and the VMs they hold.
fn mapping_changes<K: Resource<DynamicType = ()> + Clone + 'static>(
    unreadable: &Arc<UnreadableMappings>,
    store: &kube::runtime::reflector::Store<K>,
) -> impl FnMut(CacheEvent<K>) -> stream::Iter<std::vec::IntoIter<Change>> + use<K> {
    let (unreadable, store) = (Arc::clone(unreadable), store.clone());
    move |event| {
        let held = unreadable.observe(&event, &store).map(Change::Held);
        let changes: Vec<Change> = Change::of_mapping(&event).into_iter().chain(held).collect();
        stream::iter(changes)
    }
}

impl Watches {
    fn new(client: &Client, options: &Options, health: &Arc<Health>) -> Watches {
        let ns = &options.namespaces;
        let all = watcher::Config::default();
        let listed = CachesListed::default();
        let (unreadable_tx, unreadable) = invalid_objects::channel();
        let (mappings, mapping_events) = cache_events::watch::<ImageMapping, _>(
            Source::<DeserializeGuard<ImageMapping>>::namespaced(client, ns, &all),
            &listed.mappings,
            health,
        );
        let (cluster_mappings, cluster_events) = cache_events::watch::<ClusterImageMapping, _>(
            vec![Source::<DeserializeGuard<ClusterImageMapping>>::all(
                client, &all,
            )],
            &listed.cluster_mappings,
            health,
        );
        let (namespaces, namespace_events) = cache_events::watch::<Namespace, Namespace>(
            Source::named(client, ns, &all),
            &listed.namespaces,
            health,
        );
        let (pods, pod_events) = cache_events::watch::<CachedPod, CachedPod>(
            Source::namespaced(client, ns, &all.clone().labels(VM_LABEL)),
            &listed.pods,
            health,
        );
        let (vms, vm_events) = cache_events::watch::<VirtualMachine, _>(
            Source::<DeserializeGuard<VirtualMachine>>::namespaced(client, ns, &all),
            &listed.vms,
            health,
        );
        let unreadable_mappings = Arc::new(UnreadableMappings::default());
        let changes = stream::select_all([
            mapping_events
                .inspect(report_unreadable(&unreadable_tx))
                .flat_map(mapping_changes(&unreadable_mappings, &mappings))
                .boxed(),
            cluster_events
                .inspect(report_unreadable(&unreadable_tx))
                .flat_map(mapping_changes(&unreadable_mappings, &cluster_mappings))
                .boxed(),
            namespace_events
                .filter_map(|e| ready(Change::of_namespace(&e)))
                .boxed(),
            local_registry_watcher::changes(client),
        ])
        .boxed();
        let vm_health = Arc::clone(health);
        let (deleted_tx, vms_deleted) = futures::channel::mpsc::unbounded();
        let vm_events = vm_events
            .inspect(report_unreadable(&unreadable_tx))
            .filter_map(move |e| {
                ready(match e {
                    CacheEvent::Applied(vm) => Some(Ok(vm)),
                    CacheEvent::Deleted(vm) => {
                        // Closed only when the operator stops.
                        let _ = deleted_tx.unbounded_send(NamespacedName::of(&vm));
                        None
                    }
                    _ => None,
                })
            })
            .inspect(move |_| vm_health.demand())
            .boxed();
        Watches {
            caches: Caches {
                vms,
                pods,
                pod_index: Arc::default(),
                mappings,
                cluster_mappings,
                namespaces,
                listed,
                unreadable_mappings,
            },
            changes,
            pods: pod_events.boxed(),
            vms: vm_events,
            unreadable,
            vms_deleted,
        }
    }
}

/// Clears the context push notifications act on when the operator stops, however it stops.
struct Stopped(Arc<push_endpoint::Running>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// Serves the registry notification endpoint of `endpoint` until the returned task is
/// aborted: it acts on the operator `observers` report for while it runs, and answers 503
/// (retry) meanwhile — so every replica may serve it, and the leader acts.
pub async fn serve_notifications(
    endpoint: &RegistryNotifications,
    observers: &Observers,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(&endpoint.addr)
        .await
        .map_err(|e| anyhow::anyhow!("--registry-notifications-addr {}: {e}", endpoint.addr))?;
    Ok(tokio::spawn(push_endpoint::serve(
        listener,
        Arc::clone(&endpoint.token),
        Arc::clone(&observers.running),
    )))
}

/// Runs the operator under leader election: only while this replica holds the Lease of
/// `election`, with the fenced client, reporting to `observers` (see [`run_with`]).
pub async fn run_elected(
    clients: ElectedClients,
    options: Options,
    observers: Observers,
    election: LeaderElection,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let health = Arc::clone(&observers.health);
    leader::run_elected(clients, health, election, shutdown, |client, stop| {
        run_with(client, options, observers, stop)
    })
    .await
}

/// The pod watcher, and the creator of the replacements it hands over.
fn spawn_pod_tasks(
    tasks: &mut Tasks,
    ctx: &Arc<Context>,
    pods: BoxStream<'static, CacheEvent<CachedPod>>,
    trigger: Trigger,
) {
    let (hand_over, handed) = futures::channel::mpsc::unbounded();
    tasks.spawn(
        "replacement creator",
        replacements::create_handed_over(Arc::clone(ctx), handed, trigger.clone()),
    );
    tasks.spawn(
        "pod watcher",
        pod_watcher::run(
            pods,
            pod_watcher::Watcher {
                client: ctx.client.clone(),
                index: Arc::clone(&ctx.caches.pod_index),
                expectations: Arc::clone(&ctx.memory.expectations),
                replacements: Arc::clone(&ctx.memory.replacements),
                hand_over,
                trigger,
            },
        ),
    );
}

/// Runs the operator, reporting to `observers`, until the VirtualMachine controller stops
/// (or the future is dropped). When `shutdown` completes, no new reconcile starts, the
/// running ones finish, and the function returns. A background task that ends is an error.
pub async fn run_with(
    client: Client,
    options: Options,
    observers: Observers,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let health = Arc::clone(&observers.health);
    let watches = Watches::new(&client, &options, &health);
    let (vms, listed) = (watches.caches.vms.clone(), watches.caches.listed.clone());
    let (ctx, event_sender) = Context::new(client, options, watches.caches, observers.clone())?;
    let ctx = Arc::new(ctx);
    let (trigger, triggers) = Trigger::channel(Arc::clone(&health));
    let (rules_ready, rules_compiled) = tokio::sync::oneshot::channel();
    let mut tasks = Tasks::default();
    tasks.spawn("event sender", event_sender);
    tasks.spawn(
        "rules watcher",
        rules_watcher::run(
            Arc::clone(&ctx),
            watches.changes,
            trigger.clone(),
            rules_ready,
        ),
    );
    tasks.spawn(
        "tag follower",
        tag_follower::run(Arc::clone(&ctx), trigger.clone()),
    );
    if let Some(secret) = ctx.options.registry_credentials.clone() {
        tasks.spawn(
            "registry credentials watcher",
            credentials_watcher::run(Arc::clone(&ctx), secret),
        );
    }
    // Push notifications act on this context while it runs (see `serve_notifications`).
    observers.running.set(Some(Arc::clone(&ctx)));
    let _stopped = Stopped(Arc::clone(&observers.running));
    spawn_pod_tasks(&mut tasks, &ctx, watches.pods, trigger);
    tasks.spawn(
        "unreadable object reporter",
        invalid_objects::report(Arc::clone(&ctx), watches.unreadable),
    );
    tasks.spawn(
        "mapping status writer",
        mapping_status_writer::run(Arc::clone(&ctx)),
    );
    // What the rooms remember of a VM goes with it.
    let forgetting = Arc::clone(&ctx);
    tasks.spawn(
        "deleted VM forgetter",
        watches.vms_deleted.for_each(move |vm| {
            forgetting.vm_deleted(&vm);
            ready(())
        }),
    );

    // Reconciling before the rules are compiled would give VMs pods with unmapped images;
    // before the pod cache has listed, it would create pods that exist.
    let shutdown = shutdown.shared();
    tokio::select! {
        compiled = async { rules_compiled.await?; listed.pods.wait().await; anyhow::Ok(()) } => compiled?,
        () = shutdown.clone() => return Ok(()),
        e = tasks.first_ended() => return Err(e),
    }
    tracing::info!("mappings, namespaces and pods listed; reconciling VirtualMachines");
    health.controller_started();
    let synced = {
        let health = Arc::clone(&health);
        tokio::spawn(async move {
            listed.vms.wait().await;
            health.set_synced();
        })
    };
    let progress = Arc::clone(&observers.progress);
    let config = kube::runtime::controller::Config::default().concurrency(ctx.options.concurrency);
    let controller = Controller::for_stream(watches.vms, vms)
        .with_config(config)
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown)
        .run(vm_reconciler::reconcile, vm_reconciler::error_policy, ctx)
        .for_each(|res| {
            health.progressed();
            let vm = match &res {
                Ok((vm, _)) => Some(NamespacedName::from(vm)),
                Err(e) => {
                    tracing::debug!(error = %crate::excerpt::excerpt(&e.to_string()), "reconcile");
                    None
                }
            };
            progress.reconciled(vm);
            futures::future::ready(())
        });
    let result = tokio::select! {
        () = controller => Ok(()),
        e = tasks.first_ended() => Err(e),
    };
    synced.abort();
    result
}
