//! Recording a plan's Events on its VM (`events.k8s.io/v1`). Each Event is created once,
//! with a name the API server generates: no cache of past Events, no read-modify-write.
//! Warnings are recorded before the status is written; the other Events go through a queue,
//! off the reconcile's path, and yield to VM work: while reconciles run, queued Events wait
//! (one at a time once half the queue waits), so that a fan-out's pod and status writes go
//! first; the rest follow when the work is done. A failed write is logged, never fatal: the
//! first of a run of failures, then how many failed once writes succeed again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::core::api::VirtualMachine;
use crate::core::excerpt::cut_bytes;
use crate::core::notice::Notice;

/// The API server refuses Event notes over 1 KiB.
const NOTE_LIMIT: usize = 1024;
/// Events waiting for the sender task (one per VM of a 16,000-VM fan-out); a reconcile waits
/// when it is full.
const QUEUE: usize = 16_384;
/// Queued Events sent at once while no reconcile runs.
const SENDERS: usize = 8;
/// Events waiting beyond which they are sent while reconciles run, one at a time.
const HOLD: usize = QUEUE / 2;
/// The controller named in every Event.
const CONTROLLER: &str = "imagemap.dev/operator";

/// The Event recording `ev` on the object `regarding`, by `instance`.
fn event(ev: &Notice, regarding: ObjectReference, instance: &str, now: Timestamp) -> Event {
    Event {
        metadata: ObjectMeta {
            // (A generated name's prefix may end with '-', not '.'.)
            generate_name: Some(format!(
                "{}-",
                regarding.name.as_deref().unwrap_or("imagemap")
            )),
            namespace: regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        action: Some(ev.reason.into()),
        reason: Some(ev.reason.into()),
        note: Some(cut_bytes(&ev.message, NOTE_LIMIT)),
        type_: Some(if ev.warning { "Warning" } else { "Normal" }.into()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(instance.into()),
        ..Event::default()
    }
}

/// An Event waiting for the sender task: what it says and about what, built into an
/// [`Event`] only when sent. A fan-out queues one per VM, thousands at once; this keeps each
/// at about a third of the Event it becomes.
struct Queued {
    ev: Notice,
    regarding: ObjectReference,
    at: Timestamp,
}

/// Failed Event writes, logged without a flood: the first of a run of failures with its
/// error, then how many failed, once one succeeds again. An API server that refuses Events —
/// or the client of an operator that stops — fails every queued Event, thousands at once.
#[derive(Debug, Default)]
struct Failures {
    run: AtomicU64,
}

impl Failures {
    /// One write failed: whether it is the first of a run (to be logged).
    fn failed(&self) -> bool {
        self.run.fetch_add(1, Ordering::Relaxed) == 0
    }

    /// One write succeeded: how many failed since the logged one.
    fn succeeded(&self) -> u64 {
        self.run.swap(0, Ordering::Relaxed).saturating_sub(1)
    }
}

/// Records Events: [`EventRecorder::record`] at once, [`EventRecorder::queue`] through the
/// sender task.
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    instance: String,
    queue: mpsc::Sender<Queued>,
    /// How many Events wait in `queue`.
    backlog: Arc<watch::Sender<usize>>,
    failures: Arc<Failures>,
}

impl EventRecorder {
    /// A recorder and its sender task, which runs until every recorder is dropped. While
    /// `running` (the reconciles running) is above zero, a queued Event waits until it falls
    /// to zero — unless half the queue is waiting: then Events go one at a time (a reconcile
    /// waits while the queue is full, so they may never hold it up).
    pub fn new(
        client: Client,
        running: watch::Receiver<usize>,
    ) -> (EventRecorder, impl Future<Output = ()> + Send + 'static) {
        let instance = std::env::var("POD_NAME").unwrap_or_else(|_| CONTROLLER.into());
        let sender_instance = instance.clone();
        let (queue, mut queued) = mpsc::channel::<Queued>(QUEUE);
        let backlog = Arc::new(watch::Sender::new(0_usize));
        let sender_backlog = Arc::clone(&backlog);
        let sender_client = client.clone();
        let failures = Arc::new(Failures::default());
        let sender_failures = Arc::clone(&failures);
        let one_at_a_time = Arc::new(Semaphore::new(1));
        let sender = futures::stream::poll_fn(move |cx| queued.poll_recv(cx)).for_each_concurrent(
            SENDERS,
            move |queued: Queued| {
                sender_backlog.send_modify(|n| *n = n.saturating_sub(1));
                let (client, mut running, mut backlog, turn, failures) = (
                    sender_client.clone(),
                    running.clone(),
                    sender_backlog.subscribe(),
                    Arc::clone(&one_at_a_time),
                    Arc::clone(&sender_failures),
                );
                let event = event(&queued.ev, queued.regarding, &sender_instance, queued.at);
                async move {
                    // (A channel closed — the operator stops — waits no longer.)
                    tokio::select! {
                        _ = running.wait_for(|n| *n == 0) => {}
                        _ = backlog.wait_for(|n| *n >= HOLD) => {}
                    }
                    // Never closed: the semaphore lives as long as the task.
                    let _turn = if *running.borrow() > 0 {
                        turn.acquire_owned().await.ok()
                    } else {
                        None
                    };
                    create(&client, &event, &failures).await;
                }
            },
        );
        (
            EventRecorder {
                client,
                instance,
                queue,
                backlog,
                failures,
            },
            sender,
        )
    }

    fn events<'a>(
        &self,
        vm: &VirtualMachine,
        events: impl Iterator<Item = &'a Notice>,
    ) -> Vec<Event> {
        let regarding = vm.object_ref(&());
        events
            .map(|ev| event(ev, regarding.clone(), &self.instance, Timestamp::now()))
            .collect()
    }

    /// Records `events` on `vm` now; a failure is logged, never fatal.
    pub async fn record<'a>(&self, vm: &VirtualMachine, events: impl Iterator<Item = &'a Notice>) {
        for event in self.events(vm, events) {
            create(&self.client, &event, &self.failures).await;
        }
    }

    /// Records a Warning on the object `regarding` now; a failure is logged, never fatal.
    pub async fn warn(&self, regarding: ObjectReference, reason: &'static str, message: String) {
        let ev = Notice {
            warning: true,
            reason,
            message,
        };
        self.note(regarding, &ev).await;
    }

    /// Records `ev` on the object `regarding` now; a failure is logged, never fatal.
    pub async fn note(&self, regarding: ObjectReference, ev: &Notice) {
        create(
            &self.client,
            &event(ev, regarding, &self.instance, Timestamp::now()),
            &self.failures,
        )
        .await;
    }

    /// Queues `events` on `vm` for the sender task.
    pub async fn queue<'a>(&self, vm: &VirtualMachine, events: impl Iterator<Item = &'a Notice>) {
        let regarding = vm.object_ref(&());
        for ev in events {
            let queued = Queued {
                ev: Notice {
                    message: cut_bytes(&ev.message, NOTE_LIMIT),
                    ..*ev
                },
                regarding: regarding.clone(),
                at: Timestamp::now(),
            };
            self.backlog.send_modify(|n| *n += 1);
            // Closed only when the operator stops.
            let _ = self.queue.send(queued).await;
        }
    }
}

async fn create(client: &Client, event: &Event, failures: &Failures) {
    let ns = event.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    match api.create(&PostParams::default(), event).await {
        Ok(_) => {
            let unlogged = failures.succeeded();
            if unlogged > 0 {
                tracing::warn!(
                    failed = unlogged,
                    "could not record more events after the one logged; recording again"
                );
            }
        }
        Err(e) if failures.failed() => {
            let about = event.regarding.as_ref().and_then(|r| r.name.as_deref());
            tracing::warn!(vm = ?about, reason = ?event.reason, error = %e, "could not record event (the next failures are counted until one succeeds)");
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failed_writes_is_logged_once_then_counted() {
        let failures = Failures::default();
        assert_eq!(failures.succeeded(), 0);
        assert!(failures.failed(), "the first failure is logged");
        assert!(!failures.failed() && !failures.failed());
        assert_eq!(failures.succeeded(), 2, "the two after it, counted");
        assert_eq!(failures.succeeded(), 0);
        assert!(failures.failed(), "a new run is logged again");
        assert_eq!(failures.succeeded(), 0);
    }

    #[test]
    fn an_event_names_its_vm_and_its_reporter() {
        let regarding = ObjectReference {
            kind: Some("VirtualMachine".into()),
            namespace: Some("dev".into()),
            name: Some("vm".into()),
            ..ObjectReference::default()
        };
        let ev = Notice {
            warning: true,
            reason: "RestartRequired",
            message: "the pod runs older images".into(),
        };
        let e = event(&ev, regarding, "pod-1", Timestamp::UNIX_EPOCH);
        assert_eq!(e.metadata.generate_name.as_deref(), Some("vm-"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("dev"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("RestartRequired"));
        assert_eq!(e.reporting_instance.as_deref(), Some("pod-1"));
        assert_eq!(e.reporting_controller.as_deref(), Some(CONTROLLER));
    }
}
