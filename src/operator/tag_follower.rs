//! The tag follower: checks each followed reference once per poll interval (jittered; a
//! failing one backs off), and reconciles the VMs that use it when what they should report
//! changed — a new digest, the first answer, an error appearing, changing or clearing. It
//! starts once the registry credentials were read.
//!
//! Each check runs on its own, at most a few at a time per registry: a registry that is slow
//! or never answers holds up only its own tags, never another registry's (nor a push
//! notification's check of them).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::Context;
use super::jitter::jittered;
use super::trigger::Trigger;

/// Most checks under way at one registry.
const CHECKS_PER_REGISTRY: usize = 4;

/// Runs until the operator stops.
pub async fn run(ctx: Arc<Context>, trigger: Trigger) {
    let interval = ctx.options.tag_poll_interval;
    // Checked without the credentials, a private registry's tags would be reported
    // unverified until they are read.
    ctx.registries.loaded().await;
    let mut limits: HashMap<String, Arc<Semaphore>> = HashMap::new();
    let mut checks = JoinSet::new();
    loop {
        let (due, next) = ctx.followed.take_due(Instant::now());
        for reference in due {
            let limit = limits
                .entry(registry_of(&reference).to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(CHECKS_PER_REGISTRY)));
            let (limit, ctx, trigger) = (Arc::clone(limit), Arc::clone(&ctx), trigger.clone());
            checks.spawn(async move {
                // Never closed.
                let _permit = limit.acquire_owned().await;
                check(&ctx, &trigger, &reference).await;
            });
        }
        while checks.try_join_next().is_some() {}
        // Registries with no check under way or waiting.
        limits.retain(|_, limit| Arc::strong_count(limit) > 1);
        let wait = next.map_or(interval, |t| t.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = ctx.followed.wake.notified() => {}
        }
    }
}

/// Checks `reference` and reconciles its users if what they report changed.
async fn check(ctx: &Context, trigger: &Trigger, reference: &str) {
    let result = ctx.registries.digest(reference).await;
    if let Err(e) = &result {
        tracing::warn!(%reference, error = %e, "could not check a followed tag");
    }
    ctx.observers.metrics.tag_checked(result.is_ok());
    let interval = ctx.options.tag_poll_interval;
    let users = ctx
        .followed
        .checked(reference, result, Instant::now(), jittered(interval));
    for vm in users {
        trigger.reconcile(vm);
    }
}

/// The registry (`host[:port]`) of a normalized reference.
fn registry_of(reference: &str) -> &str {
    reference.split('/').next().unwrap_or(reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_limited_per_registry() {
        assert_eq!(registry_of("127.0.0.1:5000/app:dev"), "127.0.0.1:5000");
        assert_eq!(registry_of("docker.io/library/nginx:1.27"), "docker.io");
    }
}
