//! The leader side: what only the leader does — the VirtualMachine controller ([`vms`]:
//! reconciles, runner pods, and what a rule change asks of them), the mappings' statuses
//! ([`mapping_statuses`]), live reload of NeonVM's runner pods ([`neonvm_pods`]) and of
//! workloads ([`workloads`]) within one [`recreation_budget`], the tags followed
//! ([`followed_tags`]) and their checks at the registries ([`tags`]), the webhook's
//! certificates ([`webhook_tls`]) and the report of objects that cannot be read
//! ([`unreadable_reporter`]). It acts on what the replica side keeps and tells, and writes
//! through the `writes` room.
//!
//! This file wires the leader side's rooms together; they never import it.

pub mod followed_tags;
pub mod mapping_statuses;
pub mod neonvm_pods;
pub mod recreation_budget;
pub mod tags;
pub mod unreadable_reporter;
pub mod vms;
pub mod webhook_tls;
pub mod workloads;

use std::future::Future;
use std::sync::Arc;

use futures::future::ready;
use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::runtime::controller::Controller;

use crate::core::namespaced_name::NamespacedName;
use crate::operator::observe::health::Health;
use crate::operator::observe::metrics::Metrics;
use crate::operator::observe::progress::Progress;
use crate::operator::options::{Options, Webhook, WebhookCertificate};
use crate::operator::replica::{ReplicaSide, Told};
use crate::operator::tasks::Tasks;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::writes::event_recorder::EventRecorder;
use followed_tags::FollowedTags;
use followed_tags::asked_tags::AskedTags;
use mapping_statuses::mapping_status_writer::{self, StatusWriter};
use mapping_statuses::pod_census::{self, PodCensus};
use mapping_statuses::pod_counts::PodCounts;
use mapping_statuses::status_due::StatusDue;
use neonvm_pods::runner_reloader::{self, RunnerReloader};
use recreation_budget::RecreationBudget;
use tags::asks_watcher::{self, AsksFrom};
use tags::credentials_watcher::{self, CredentialsWatcher};
use tags::digest_publisher::{self, DigestPublisher};
use tags::push_endpoint::{Pushed, Running};
use tags::tag_follower::{self, TagFollower};
use vms::pod_watcher;
use vms::replacement_creator::{self, ReplacementCreator};
use vms::rule_changes::{self, RuleChanges};
use vms::trigger::Trigger;
use vms::vm_memory::VmMemory;
use vms::vm_reconciler::{self, Reconciler};
use webhook_tls::certificate_keeper::{self, CertificateKeeper};
use workloads::workload_roller::{self, WorkloadRoller};
use workloads::workload_state::WorkloadState;
use workloads::workload_watcher::{self, WorkloadWatcher};

/// What the write side writes with and reports to.
pub struct WriteSide {
    pub client: Client,
    /// The same, for evictions: not retried by kube.
    pub evictions: Client,
    pub options: Options,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub progress: Arc<Progress>,
    /// What push notifications act on while the write side runs.
    pub running: Arc<Running>,
}

/// Clears what push notifications act on when the write side stops, however it stops.
struct Stopped(Arc<Running>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// Runs the write side on what `read` keeps and `told` tells, until the VirtualMachine
/// controller stops (or the future is dropped). When `shutdown`
/// completes, no new reconcile starts, the running ones finish, and the function returns.
/// A background task that ends is an error.
#[allow(clippy::too_many_lines)] // The wiring: each task built with the parts it uses.
pub async fn run(
    side: WriteSide,
    read: ReplicaSide,
    told: Told,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let mut tasks = Tasks::default();
    let WriteSide {
        client,
        evictions,
        options,
        health,
        metrics,
        progress,
        running,
    } = side;
    let ReplicaSide {
        caches,
        admission,
        registries,
        rules_loaded,
        digests_loaded,
        asks,
    } = read;
    let (rules, digests, neonvm) = (
        Arc::clone(&admission.rules),
        Arc::clone(&admission.digests),
        Arc::clone(&admission.neonvm),
    );
    let listed = caches.listed.clone();
    let followed = Arc::new(FollowedTags::default());
    let (recorder, event_sender) = EventRecorder::new(client.clone(), health.running_reconciles());
    let status_due = Arc::new(StatusDue::default());
    let pod_counts = Arc::new(PodCounts::new(Arc::clone(&status_due)));
    let memory = Arc::new(VmMemory::default());
    let (trigger, triggers) = Trigger::channel(Arc::clone(&health));
    let budget = Arc::new(RecreationBudget::new(options.max_recreates_per_minute));
    tasks.spawn("event sender", event_sender);
    tasks.spawn(
        "rule change reactor",
        rule_changes::run(
            RuleChanges {
                acts_in: options.acts_in(),
                default_runner_image: options.default_runner_image.clone(),
                vms: caches.vms.clone(),
                namespaces: caches.namespaces.clone(),
                followed: Arc::clone(&followed),
                status_due: Arc::clone(&status_due),
                recorder: recorder.clone(),
                trigger: trigger.clone(),
            },
            told.rules_changed.listen(),
        ),
    );
    tasks.spawn(
        "tag follower",
        tag_follower::run(
            Arc::new(TagFollower {
                followed: Arc::clone(&followed),
                registries: Arc::clone(&registries),
                metrics: Arc::clone(&metrics),
                poll_interval: options.tag_poll_interval,
                credentials_namespaces: options.registry_credentials_namespaces.clone(),
            }),
            trigger.clone(),
        ),
    );
    // Live reload deletes pods for admission to map their replacements: not without a webhook.
    if options.webhook.is_some() {
        tasks.spawn(
            "NeonVM runner reloader",
            runner_reloader::run(RunnerReloader {
                client: client.clone(),
                admission: admission.clone(),
                status_due: Arc::clone(&status_due),
                followed: Arc::clone(&followed),
                recorder: recorder.clone(),
                budget: Arc::clone(&budget),
                default_runner: options.neonvm_default_runner_image.clone(),
                acts_in: options.acts_in(),
                loaded: vec![
                    rules_loaded.clone(),
                    caches.listed.namespaces.clone(),
                    digests_loaded.clone(),
                ],
            }),
        );
    }
    if let Some(webhook) = &options.webhook {
        let asked = Arc::new(AskedTags::new(Arc::clone(&followed)));
        let asks_from = match &options.asks {
            Some(place) => AsksFrom::ConfigMap(place.configmap.clone()),
            None => AsksFrom::Here(asks),
        };
        tasks.spawn(
            "asks watcher",
            asks_watcher::run(client.clone(), asks_from, Arc::clone(&asked)),
        );
        tasks.spawn(
            "pod census",
            pod_census::run(PodCensus {
                client: client.clone(),
                namespaces: options.namespaces.clone(),
                excluded: webhook.excluded.clone(),
                every: options.pod_count_interval,
                per_namespace: options.pod_scan_namespace_interval,
                admission: admission.clone(),
                counts: Arc::clone(&pod_counts),
                followed: Arc::clone(&followed),
                asked,
                loaded: vec![
                    rules_loaded.clone(),
                    caches.listed.namespaces.clone(),
                    digests_loaded.clone(),
                ],
            }),
        );
        let state = Arc::new(WorkloadState::default());
        let watched = Listed::default();
        tasks.spawn(
            "live reload watcher",
            workload_watcher::run(WorkloadWatcher {
                client: client.clone(),
                namespaces: options.namespaces.clone(),
                state: Arc::clone(&state),
                listed: watched.clone(),
            }),
        );
        tasks.spawn(
            "workload roller",
            workload_roller::run(WorkloadRoller {
                evictions,
                state,
                admission: admission.clone(),
                recorder: recorder.clone(),
                budget: Arc::clone(&budget),
                metrics: Arc::clone(&metrics),
                counts: Arc::clone(&pod_counts),
                loaded: vec![
                    rules_loaded.clone(),
                    caches.listed.namespaces.clone(),
                    digests_loaded.clone(),
                    watched,
                ],
            }),
        );
    }
    tasks.spawn(
        "digest publisher",
        digest_publisher::run(DigestPublisher {
            client: client.clone(),
            followed: Arc::clone(&followed),
            verified: digests,
            configmap: options.published_digests.clone(),
        }),
    );
    if let Some(Webhook {
        certificate:
            WebhookCertificate::Secret {
                secret,
                configuration,
                lifetimes,
            },
        ..
    }) = &options.webhook
    {
        tasks.spawn(
            "webhook certificate keeper",
            certificate_keeper::run(CertificateKeeper {
                client: client.clone(),
                secret: secret.clone(),
                configuration: configuration.clone(),
                lifetimes: *lifetimes,
            }),
        );
    }
    if let Some(secret) = options.registry_credentials.clone() {
        tasks.spawn(
            "registry credentials watcher",
            credentials_watcher::run(
                CredentialsWatcher {
                    client: client.clone(),
                    registries: Arc::clone(&registries),
                    followed: Arc::clone(&followed),
                    recorder: recorder.clone(),
                },
                secret,
            ),
        );
    }
    // Push notifications act on the followed tags while the write side runs.
    running.set(Some(Pushed {
        followed: Arc::clone(&followed),
        registries: Arc::clone(&registries),
    }));
    let _stopped = Stopped(running);
    let (hand_over, handed) = futures::channel::mpsc::unbounded();
    tasks.spawn(
        "replacement creator",
        replacement_creator::create_handed_over(
            ReplacementCreator {
                client: client.clone(),
                vms: caches.vms.clone(),
                memory: Arc::clone(&memory),
                concurrency: options.concurrency,
            },
            handed,
            trigger.clone(),
        ),
    );
    tasks.spawn(
        "pod watcher",
        pod_watcher::run(
            told.pods,
            pod_watcher::Watcher {
                client: client.clone(),
                index: Arc::clone(&caches.pod_index),
                expectations: Arc::clone(&memory.expectations),
                replacements: Arc::clone(&memory.replacements),
                hand_over,
                trigger,
            },
        ),
    );
    tasks.spawn(
        "unreadable object reporter",
        unreadable_reporter::report(
            told.unreadable.listen(),
            Arc::clone(&metrics),
            recorder.clone(),
        ),
    );
    tasks.spawn(
        "mapping status writer",
        mapping_status_writer::run(StatusWriter {
            client: client.clone(),
            acts_in: options.acts_in(),
            default_runner_image: options.default_runner_image.clone(),
            neonvm_default_runner_image: options.neonvm_default_runner_image.clone(),
            caches: caches.clone(),
            rules: Arc::clone(&rules),
            followed: Arc::clone(&followed),
            due: Arc::clone(&status_due),
            progress: Arc::clone(&progress),
            metrics: Arc::clone(&metrics),
            neonvm: Arc::clone(&neonvm),
            pods: pod_counts,
        }),
    );
    // What the rooms remember of a VM goes with it.
    let forget = (
        Arc::clone(&memory),
        Arc::clone(&followed),
        Arc::clone(&caches.pod_index),
        Arc::clone(&progress),
        Arc::clone(&status_due),
    );
    tasks.spawn(
        "deleted VM forgetter",
        told.vms_deleted.for_each(move |vm| {
            let (memory, followed, pod_index, progress, status_due) = &forget;
            memory.forget(&vm);
            followed.forget(&vm);
            pod_index.forget(&vm);
            progress.forget_vm(&vm);
            status_due.vm(vm);
            ready(())
        }),
    );

    // Reconciling before the rules are compiled would give VMs pods with unmapped images;
    // before the pod cache has listed, it would create pods that exist.
    let shutdown = shutdown.shared();
    tokio::select! {
        () = async { rules_loaded.wait().await; listed.pods.wait().await; } => {}
        () = shutdown.clone() => return Ok(()),
        e = tasks.first_ended() => return Err(e),
    }
    tracing::info!("mappings, namespaces and pods listed; reconciling VirtualMachines");
    // Every mapping's status is counted at the first pass.
    status_due.mappings();
    health.controller_started();
    let synced = {
        let health = Arc::clone(&health);
        tokio::spawn(async move {
            listed.vms.wait().await;
            health.set_synced();
        })
    };
    let config = kube::runtime::controller::Config::default().concurrency(options.concurrency);
    let reconciler = Arc::new(Reconciler {
        budget: Arc::clone(&budget),
        client,
        acts_in: options.acts_in(),
        default_runner_image: options.default_runner_image.clone(),
        caches: caches.clone(),
        rules,
        followed,
        memory,
        recorder,
        status_due,
        health: Arc::clone(&health),
        metrics,
    });
    let controller = Controller::for_stream(told.vms, caches.vms)
        .with_config(config)
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown)
        .run(
            vm_reconciler::reconcile,
            vm_reconciler::error_policy,
            reconciler,
        )
        .for_each(|res| {
            health.progressed();
            let vm = match &res {
                Ok((vm, _)) => Some(NamespacedName::from(vm)),
                Err(e) => {
                    tracing::debug!(error = %crate::core::excerpt::excerpt(&e.to_string()), "reconcile");
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
