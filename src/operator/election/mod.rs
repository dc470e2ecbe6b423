//! Leader election on a Lease: only the holder runs the operator. A holder that stops
//! releases the Lease so another replica takes over at once; a holder that dies or freezes
//! is replaced once it has not renewed the Lease for a lease duration — and by then its
//! [`Fence`] has stopped its writes, in-flight reconciles included.

mod elector;
mod fence;
mod fenced_client;
mod lease_record;
mod lease_terms;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use kube::client::ClientBuilder;
use kube::{Client, Config};

use crate::api_requests::ApiRequests;

pub use fence::{Fence, FenceClosed};
pub use lease_terms::{LeaderElection, LeaseTiming, unique_identity};

use crate::operator::observe::health::Health;
use elector::Elector;

/// What stops the operator a leader runs: shutdown, or the Lease lost.
pub type Stop = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// The API clients of a replica under leader election, counting into one [`ApiRequests`].
pub struct ElectedClients {
    /// The operator's: its writes pass only while `fence` is open, checked as each request
    /// is issued and again at the socket.
    pub operator: Client,
    /// The operator's, fenced likewise, without kube's retries: for evictions (see
    /// [`crate::operator::OperatorClients`]).
    pub evictions: Client,
    /// The elector's own, for the Lease.
    pub elector: Client,
    /// The replica's own, unfenced: the read side's watches, which every replica keeps,
    /// and what a replica does for itself whether or not it leads (registering the webhook
    /// it serves, with `--webhook-url`). Never the operator's writes.
    pub replica: Client,
    pub fence: Fence,
    pub requests: ApiRequests,
}

impl ElectedClients {
    /// The clients from one configuration, with a closed fence.
    pub fn new(config: Config) -> Result<ElectedClients, kube::Error> {
        let fence = Fence::new();
        let requests = ApiRequests::new();
        let operator = fenced_client::fenced_client(&config, &fence, &requests)?;
        let evictions = fenced_client::fenced_client(
            &crate::operator::clients::without_retry(config.clone()),
            &fence,
            &requests,
        )?;
        let elector = ClientBuilder::try_from(config.clone())?
            .with_layer(&requests.layer())
            .build();
        let replica = ClientBuilder::try_from(config)?
            .with_layer(&requests.layer())
            .build();
        Ok(ElectedClients {
            operator,
            evictions,
            elector,
            replica,
            fence,
            requests,
        })
    }
}

/// Waits for the Lease, then runs `operator` — with the fenced client and what stops it —
/// until `shutdown` completes or leadership is lost; then lets it finish and releases the
/// Lease. Losing the Lease is an error, so that the process restarts as a follower.
/// Reports standing by and leading to `health`.
pub async fn run_elected<Run, Running>(
    clients: ElectedClients,
    health: Arc<Health>,
    election: LeaderElection,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    operator: Run,
) -> anyhow::Result<()>
where
    Run: FnOnce(Client, Stop) -> Running,
    Running: Future<Output = anyhow::Result<()>>,
{
    let (lease, identity) = (election.lease_name.clone(), election.identity.clone());
    let (leading_tx, mut leading) = tokio::sync::watch::channel(false);
    let (stop_elector, elector_stopped) = tokio::sync::oneshot::channel::<()>();
    let client = clients.operator;
    // Standing by, a replica is ready while it can take over: it read the Lease within a
    // lease duration.
    let fresh_for = election.timing.lease_duration;
    health.stand_by(true, fresh_for);
    let elector = Elector::new(
        &clients.elector,
        election,
        clients.fence,
        Arc::clone(&health),
    )
    .run(leading_tx, async move {
        let _ = elector_stopped.await;
    });
    let leader = async move {
        tracing::info!(%lease, %identity, "waiting to lead");
        let mut shutdown = Box::pin(shutdown);
        let elected = tokio::select! {
            res = leading.wait_for(|l| *l) => res.is_ok(),
            () = &mut shutdown => false,
        };
        if !elected {
            let _ = stop_elector.send(());
            return Ok(());
        }
        tracing::info!(%identity, "leading");
        health.stand_by(false, fresh_for);
        let mut watch = leading.clone();
        let stop = async move {
            tokio::select! {
                () = shutdown => {}
                _ = watch.wait_for(|l| !*l) => tracing::warn!("lost the Lease; stopping"),
            }
        };
        let result = operator(client, Box::pin(stop)).await;
        let lost = !*leading.borrow();
        // The elector closes the fence, then releases the Lease.
        let _ = stop_elector.send(());
        result?;
        if lost {
            anyhow::bail!("lost the Lease {lease}: another replica may be leading now");
        }
        Ok(())
    };
    let ((), result) = tokio::join!(elector, leader);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_unique_per_process_whatever_the_name() {
        let (a, b) = (unique_identity("imagemap-0"), unique_identity("imagemap-0"));
        assert!(a.starts_with("imagemap-0_") && b.starts_with("imagemap-0_"));
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn a_kubeconfig_proxy_is_refused_not_ignored() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().expect("a URI"));
        config.proxy_url = Some("http://proxy.example:3128".parse().expect("a URI"));
        let Err(e) = ElectedClients::new(config) else {
            panic!("no proxy support is built in");
        };
        assert!(e.to_string().contains("proxy"), "{e}");
    }
}
