//! The tag follower: checks each followed reference once per poll interval (jittered; a
//! failing one backs off), and reconciles the VMs that use it when what they should report
//! changed — a new digest, the first answer, an error appearing, changing or clearing. It
//! starts once the registry credentials were read.
//!
//! Each check runs on its own, at most a few at a time per registry: a registry that is slow
//! or never answers holds up only its own tags, never another registry's (nor a push
//! notification's check of them). A ceiling over all registries bounds the connections
//! held open; failing tags back off, so silent registries occupy little of it for long.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::Context;
use super::jitter::jittered;
use super::trigger::Trigger;
use crate::reference::domain_of_normalized;

/// Most checks under way at one registry.
const CHECKS_PER_REGISTRY: usize = 4;

/// Most checks under way over all registries.
const CHECKS_IN_ALL: usize = 64;

/// Runs until the operator stops.
pub async fn run(ctx: Arc<Context>, trigger: Trigger) {
    let interval = ctx.options.tag_poll_interval;
    // Checked without the credentials, a private registry's tags would be reported
    // unverified until they are read.
    ctx.registries.loaded().await;
    let mut limits: HashMap<String, Arc<Semaphore>> = HashMap::new();
    let all = Arc::new(Semaphore::new(CHECKS_IN_ALL));
    let mut checks = JoinSet::new();
    loop {
        let (due, next) = ctx.followed.take_due(Instant::now());
        for reference in due {
            let limit = limits
                .entry(domain_of_normalized(&reference).to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(CHECKS_PER_REGISTRY)));
            let (limit, all) = (Arc::clone(limit), Arc::clone(&all));
            let (ctx, trigger) = (Arc::clone(&ctx), trigger.clone());
            checks.spawn(async move {
                let under_way = UnderWay {
                    ctx: &ctx,
                    trigger: &trigger,
                    reference: &reference,
                    answered: false,
                };
                // Never closed.
                let _slot = limit.acquire_owned().await;
                let _ceiling = all.acquire_owned().await;
                check(under_way).await;
            });
        }
        while let Some(ended) = checks.try_join_next() {
            if let Err(e) = ended {
                tracing::error!(error = %e, "a tag check ended abnormally");
            }
        }
        // Registries with no check under way or waiting.
        limits.retain(|_, limit| Arc::strong_count(limit) > 1);
        let wait = next.map_or(interval, |t| t.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = ctx.followed.wake.notified() => {}
        }
    }
}

/// A check taken from the followed tags: it is answered, whatever happens to the task
/// (a reference left under way would never be checked again).
struct UnderWay<'a> {
    ctx: &'a Context,
    trigger: &'a Trigger,
    reference: &'a str,
    answered: bool,
}

impl UnderWay<'_> {
    /// Records the answer and reconciles the VMs whose report it changes (a first answer
    /// lets the pods that waited for it be created).
    fn answer(&mut self, result: Result<String, String>) {
        self.answered = true;
        let interval = self.ctx.options.tag_poll_interval;
        let users =
            self.ctx
                .followed
                .checked(self.reference, result, Instant::now(), jittered(interval));
        for vm in users {
            self.trigger.reconcile(vm);
        }
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.answer(Err("the check ended before the registry answered".into()));
        }
    }
}

/// Checks the reference and reconciles its users if what they report changed.
async fn check(mut under_way: UnderWay<'_>) {
    let (ctx, reference) = (under_way.ctx, under_way.reference);
    // Released while it waited for a slot: nobody needs the answer.
    if !ctx.followed.follows(reference) {
        under_way.answered = true;
        return;
    }
    let result = ctx.registries.digest(reference).await;
    if let Err(e) = &result {
        tracing::warn!(%reference, error = %e, "could not check a followed tag");
    }
    ctx.observers.metrics.tag_checked(result.is_ok());
    under_way.answer(result);
}
