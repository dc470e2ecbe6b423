//! The tag follower: checks each followed reference once per poll interval (jittered; a
//! failing one backs off), and reconciles the VMs that use it when what they should report
//! changed — a new digest, the first answer, an error appearing, changing or clearing. It starts once
//! the registry credentials were read.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::stream;

use super::Context;
use super::jitter::jittered;
use super::trigger::Trigger;

/// Most digest checks at once.
const CONCURRENT_CHECKS: usize = 8;

/// Runs until the operator stops.
pub async fn run(ctx: Arc<Context>, trigger: Trigger) {
    let interval = ctx.options.tag_poll_interval;
    // Checked without the credentials, a private registry's tags would be reported
    // unverified until they are read.
    ctx.registries.loaded().await;
    loop {
        let (due, next) = ctx.followed.due(Instant::now());
        if due.is_empty() {
            let wait = next.map_or(interval, |t| t.saturating_duration_since(Instant::now()));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = ctx.followed.wake.notified() => {}
            }
            continue;
        }
        stream::iter(due)
            .for_each_concurrent(CONCURRENT_CHECKS, |reference| {
                let (ctx, trigger) = (Arc::clone(&ctx), trigger.clone());
                async move {
                    let result = ctx.registries.digest(&reference).await;
                    if let Err(e) = &result {
                        tracing::warn!(%reference, error = %e, "could not check a followed tag");
                    }
                    ctx.observers.metrics.tag_checked(result.is_ok());
                    let users = ctx.followed.checked(
                        &reference,
                        result,
                        Instant::now(),
                        jittered(interval),
                    );
                    for vm in users {
                        trigger.reconcile(vm);
                    }
                }
            })
            .await;
    }
}
