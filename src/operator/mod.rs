//! `imagemap run`: the operator. Pods are mapped at admission; VirtualMachines become runner
//! pods with mapped images; NeonVM's runner pods and labelled workloads are live-reloaded;
//! mapping changes re-reconcile exactly what they affect.
//!
//! The operator has two floors, named for who runs them, each a room of rooms that says what
//! it owns and may call:
//! - [`replica`], what every replica runs: the watches and their caches, the rules in force,
//!   the digests the leader verified, NeonVM's VMs, what admission answers from
//!   (`replica::admission_sources`) and the admission webhook. It writes nothing but, with
//!   `--webhook-url`, its own webhook configuration.
//! - [`leader`], what only the leader runs: the VM controller, the mappings' statuses, live
//!   reload of NeonVM's runner pods and of workloads, the tags followed and their checks at
//!   the registries, the webhook's certificates.
//!
//! Beside them: [`writes`] (every write the leader makes), [`watch_toolkit`] (what both
//! floors watch with), [`observe`] (probes, metrics and progress, which every room reports
//! to), [`election`] (leader election and the fence on the leader's writes), [`options`]
//! (the flags), [`acts_in`] (the namespaces the operator acts in), [`clients`] (the
//! operator's clients), [`tasks`] (the background tasks), and two small helpers,
//! [`http_endpoint`] and [`jitter`]. This file wires the floors together; no room imports
//! it.

mod acts_in;
mod clients;
mod election;
mod http_endpoint;
mod jitter;
mod leader;
mod observe;
mod options;
mod replica;
mod tasks;
mod watch_toolkit;
mod writes;

use std::future::Future;
use std::sync::Arc;

use kube::Client;

pub use clients::OperatorClients;
pub use election::{
    ElectedClients, Fence, FenceClosed, LeaderElection, LeaseTiming, unique_identity,
};
pub use leader::vms::vm_reconciler::ReconcileError;
pub use observe::progress::Progress;
pub use observe::{health, metrics};
pub use options::token_file::TokenFile;
pub use options::{
    AsksPlace, DEFAULT_CONCURRENCY, Options, RegistryNotifications, Webhook, WebhookCertificate,
};
pub use replica::digests::followed::Followed;
pub use replica::digests::verified_digests::{
    DATA_KEY as DIGESTS_DATA_KEY, decode as decode_digests,
};
pub use replica::watches::cached_pod::CachedPod;
pub use replica::watches::caches::Caches;
pub use replica::webhook::handler::{Admitter, Answered, NotAReview};
pub use watch_toolkit::cache_events::Projection;
pub use watch_toolkit::listed::{CachesListed, Listed};
pub use writes::requests::FIELD_MANAGER;

use leader::WriteSide;
use leader::tags::push_endpoint;
use observe::health::Health;
use tasks::Tasks;

/// What the operator reports to: the probes, `/metrics`, whoever waits on its progress,
/// and the notification endpoint (which acts on it while it runs).
#[derive(Debug, Clone)]
pub struct Observers {
    pub health: Arc<Health>,
    pub metrics: Arc<metrics::Metrics>,
    pub progress: Arc<Progress>,
    pub running: Arc<push_endpoint::Running>,
}

impl Observers {
    /// Observers whose metrics report the requests `requests` counts.
    #[must_use]
    pub fn new(requests: crate::api_requests::ApiRequests) -> Self {
        Observers {
            health: Arc::default(),
            metrics: Arc::new(metrics::Metrics::new(requests)),
            progress: Arc::default(),
            running: Arc::default(),
        }
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

/// Runs the operator, reporting to `observers`, until the VirtualMachine controller stops
/// (or the future is dropped): the read side (and the webhook, when configured), and the
/// write side on what it keeps. When `shutdown` completes, the replica is no longer ready,
/// no new reconcile starts, the running ones finish, and the function returns. A
/// background task that ends is an error.
pub async fn run_with(
    clients: OperatorClients,
    options: Options,
    observers: Observers,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let OperatorClients { client, evictions } = clients;
    let mut read_tasks = Tasks::default();
    let (read, told) = replica::start(&client, &options, &observers.health, &mut read_tasks)?;
    let webhook = start_webhook(&client, &options, &read, &observers).await?;
    let shutdown = draining(shutdown, &observers.health, webhook.as_ref());
    let side = write_side(client, evictions, options, &observers);
    let result = tokio::select! {
        result = leader::run(side, read, told, shutdown) => result,
        e = read_tasks.first_ended() => Err(e),
    };
    stop_webhook(webhook).await;
    result
}

/// Runs the operator under leader election, reporting to `observers`: the read side (and
/// the webhook, when configured) on every replica at once; the write side only while this
/// replica holds the Lease of `election`, with the fenced client (see [`run_with`]).
pub async fn run_elected(
    clients: ElectedClients,
    options: Options,
    observers: Observers,
    election: LeaderElection,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let mut read_tasks = Tasks::default();
    let (read, told) = replica::start(
        &clients.replica,
        &options,
        &observers.health,
        &mut read_tasks,
    )?;
    let webhook = start_webhook(&clients.replica, &options, &read, &observers).await?;
    let health = Arc::clone(&observers.health);
    let shutdown = draining(shutdown, &health, webhook.as_ref());
    let evictions = clients.evictions.clone();
    let leading = election::run_elected(clients, health, election, shutdown, |client, stop| {
        let side = write_side(client, evictions, options, &observers);
        leader::run(side, read, told, stop)
    });
    // The read side's tasks fail the replica whether or not it leads.
    let result = tokio::select! {
        result = leading => result,
        e = read_tasks.first_ended() => Err(e),
    };
    stop_webhook(webhook).await;
    result
}

/// `shutdown`, after which the replica is no longer ready and its webhook drains.
fn draining(
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    health: &Arc<Health>,
    webhook: Option<&replica::webhook::Serving>,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let (health, activity) = (
        Arc::clone(health),
        webhook.map(replica::webhook::Serving::activity),
    );
    async move {
        shutdown.await;
        health.drain();
        if let Some(activity) = activity {
            activity.drain();
        }
    }
}

fn write_side(
    client: Client,
    evictions: Client,
    options: Options,
    observers: &Observers,
) -> WriteSide {
    WriteSide {
        client,
        evictions,
        options,
        health: Arc::clone(&observers.health),
        metrics: Arc::clone(&observers.metrics),
        progress: Arc::clone(&observers.progress),
        running: Arc::clone(&observers.running),
    }
}

/// The webhook of `options`, started on what `read` keeps.
async fn start_webhook(
    client: &Client,
    options: &Options,
    read: &replica::ReplicaSide,
    observers: &Observers,
) -> anyhow::Result<Option<replica::webhook::Serving>> {
    let Some(webhook) = &options.webhook else {
        return Ok(None);
    };
    let serving = replica::webhook::start(
        client,
        webhook,
        &options.acts_in(),
        replica::webhook::WebhookFeed {
            sources: read.admission.clone(),
            sources_loaded: [read.rules_loaded.clone(), read.digests_loaded.clone()],
            asks: Arc::clone(&read.asks),
        },
        &observers.health,
        Arc::clone(&observers.metrics),
    )
    .await?;
    Ok(Some(serving))
}

async fn stop_webhook(webhook: Option<replica::webhook::Serving>) {
    if let Some(webhook) = webhook {
        webhook.stop().await;
    }
}
