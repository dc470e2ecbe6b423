//! Leader election on a Lease: only the holder runs the operator; a holder that stops
//! releases the Lease so another instance takes over at once, and a holder that dies is
//! replaced once its Lease expires.

use std::future::Future;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};

use super::{Observers, Options, run_with};

/// Where and how long the Lease is held.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub lease_name: String,
    pub namespace: String,
    /// Unique per instance: the pod name in a cluster.
    pub identity: String,
    /// Seconds a holder keeps the Lease without renewing it.
    pub lease_duration: u64,
    /// Seconds of grace added to the duration before another instance takes over.
    pub grace: u64,
}

/// Waits for the Lease, then runs the operator until `shutdown` completes or leadership is
/// lost; then lets running reconciles finish and releases the Lease.
pub async fn run_elected(
    client: Client,
    options: Options,
    observers: Observers,
    election: LeaderElection,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let manager = LeaseManagerBuilder::new(client.clone(), &election.lease_name)
        .with_namespace(&election.namespace)
        .with_parameters(LeaseParams::new(
            &election.identity,
            election.lease_duration,
            election.grace,
        ))
        .build()
        .await?;
    let (mut leading, task) = manager.watch().await;
    let mut shutdown = Box::pin(shutdown);
    tracing::info!(lease = %election.lease_name, identity = %election.identity, "waiting to lead");
    let elected = tokio::select! {
        res = leading.wait_for(|l| *l) => { res?; true }
        () = &mut shutdown => false,
    };
    if !elected {
        drop(leading);
        task.await??;
        return Ok(());
    }
    tracing::info!(identity = %election.identity, "leading");
    let mut watch = leading.clone();
    let lost = async move {
        let _ = watch.wait_for(|l| !*l).await;
        tracing::warn!("lost the lease; stopping");
    };
    let stop = async move {
        tokio::select! {
            () = shutdown => {}
            () = lost => {}
        }
    };
    let result = run_with(client, options, observers, stop).await;
    // Closing the channel makes the manager release the Lease.
    drop(leading);
    task.await??;
    result
}
