//! The elector: reads the Lease every retry period, acquires it when it is free or its
//! holder has stopped renewing it, renews it while holding it, and keeps the [`Fence`]
//! open exactly as long as the last renewal allows. Every write to the Lease is an update
//! with the resourceVersion last read (optimistic concurrency), so two replicas never both
//! win the same version.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use std::sync::Arc;

use super::fence::Fence;
use super::lease_record::{ElectorStep, LeaseSeen, claimed, next_step, released};
use super::lease_terms::LeaderElection;
use crate::operator::jitter::jittered;
use crate::operator::observe::health::Health;

/// How long the release at the end may take.
const RELEASE_LIMIT: Duration = Duration::from_secs(5);

/// One replica's elector.
pub struct Elector {
    api: Api<Lease>,
    election: LeaderElection,
    fence: Fence,
    health: Arc<Health>,
    /// The Lease as last read.
    observed: Option<LeaseSeen>,
    /// Our last written copy, while we hold the Lease: renewals update it without a read.
    held: Option<Lease>,
}

impl Elector {
    pub fn new(
        client: &Client,
        election: LeaderElection,
        fence: Fence,
        health: Arc<Health>,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client.clone(), &election.namespace),
            election,
            fence,
            health,
            observed: None,
            held: None,
        }
    }

    /// Runs until `stop` completes, sending on `leading` whenever this replica starts or
    /// stops leading; then closes the fence and releases the Lease if it holds it.
    pub async fn run(mut self, leading: watch::Sender<bool>, stop: impl Future<Output = ()>) {
        let timing = self.election.timing;
        let mut stop = std::pin::pin!(stop);
        loop {
            let looked =
                tokio::time::timeout(timing.renew_deadline, self.try_acquire_or_renew()).await;
            self.health.elector_looked(matches!(looked, Ok(Ok(_))));
            let holds = match looked {
                Ok(Ok(holds)) => holds,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, lease = %self.election.lease_name, "could not read or renew the Lease");
                    false
                }
                Err(_) => {
                    tracing::warn!(lease = %self.election.lease_name, "reading or renewing the Lease timed out");
                    false
                }
            };
            let was_leading = *leading.borrow();
            if holds && !was_leading {
                tracing::info!(identity = %self.election.identity, "acquired the Lease");
                leading.send_replace(true);
            } else if was_leading && !self.fence.is_open() {
                // (Why was said when the fence closed: no renewal within the deadline, or
                // the Lease gone, held by another or written by someone else.)
                tracing::warn!(identity = %self.election.identity, "no longer leading; writes stopped");
                leading.send_replace(false);
            }
            let pause = if holds {
                timing.retry_period
            } else {
                jittered(timing.retry_period)
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = &mut stop => break,
            }
        }
        self.release().await;
    }

    /// One look at the Lease, and a write when it is ours to take or renew. Whether we
    /// hold it now (a write of ours just succeeded). Evidence that we may no longer lead —
    /// the Lease held by another, gone, or written by someone else since our renewal —
    /// closes the fence at once.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let name = &self.election.lease_name;
        let current = match self.held.take() {
            Some(lease) => Some(lease),
            None => self.api.get_opt(name).await?,
        };
        let now = Instant::now();
        let observed = LeaseSeen::of(current.as_ref(), self.observed.as_ref(), now);
        let identity = &self.election.identity;
        let duration = self.election.timing.lease_duration;
        let step = next_step(&observed, identity, now, duration);
        self.observed = Some(observed);
        match &step {
            ElectorStep::Follow { holder } => {
                self.stop_writing(&format!("the Lease is held by {holder}"));
                tracing::debug!(%holder, "the Lease is held");
                return Ok(false);
            }
            ElectorStep::AwaitMissing => {
                self.stop_writing("the Lease is gone");
                tracing::debug!("no Lease; waiting a lease duration before creating it");
                return Ok(false);
            }
            ElectorStep::Create | ElectorStep::Acquire | ElectorStep::Renew => {}
        }
        let lease = claimed(current.as_ref(), name, identity, duration, Timestamp::now());
        let sent = Instant::now();
        let written = if step == ElectorStep::Create {
            self.api.create(&PostParams::default(), &lease).await
        } else {
            self.api.replace(name, &PostParams::default(), &lease).await
        };
        match written {
            Ok(lease) => {
                self.fence
                    .open_until(sent + self.election.timing.renew_deadline);
                self.held = Some(lease);
                Ok(true)
            }
            // Someone else wrote first (took the Lease, or changed it since our renewal),
            // or deleted it: read again at the next look, and write nothing meanwhile.
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {
                self.stop_writing(if s.code == 404 {
                    "the Lease is gone"
                } else {
                    "the Lease was written by someone else"
                });
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Closes the fence now if it is open: `why` is evidence we may no longer lead.
    fn stop_writing(&self, why: &str) {
        if self.fence.is_open() {
            tracing::warn!(identity = %self.election.identity, %why, "may no longer lead; writes stopped");
            self.fence.close();
        }
    }

    /// Closes the fence, then frees the Lease if we hold it, so that another replica
    /// takes over at its next look instead of after a whole lease duration.
    async fn release(&mut self) {
        self.fence.close();
        let Some(held) = self.held.take() else {
            return;
        };
        let name = &self.election.lease_name;
        let (params, free) = (PostParams::default(), released(&held));
        let write = self.api.replace(name, &params, &free);
        match tokio::time::timeout(RELEASE_LIMIT, write).await {
            Ok(Ok(_)) => tracing::info!(lease = %name, "released the Lease"),
            Ok(Err(e)) => tracing::warn!(error = %e, lease = %name, "could not release the Lease"),
            Err(_) => tracing::warn!(lease = %name, "releasing the Lease timed out"),
        }
    }
}
