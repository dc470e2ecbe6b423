//! The replica side: what every replica reads, keeps and serves — the watches and the caches
//! they fill ([`watches`]), the rules in force ([`rule_watch`]), the digests the leader
//! verified ([`digests`]), NeonVM's VMs when it is installed ([`neonvm_watch`]) and the
//! admission webhook ([`webhook`]). It calls the API server's watches only, and writes
//! nothing but, with `--webhook-url`, its own webhook configuration and, under leader
//! election, its own key of the ConfigMap of asks for followed tags
//! (`digests::asks_publisher`): the leader acts on what it keeps and on what it tells.
//!
//! This file wires the replica side's rooms together; they never import it.

pub mod admission_sources;
pub mod digests;
pub mod neonvm_watch;
pub mod rule_watch;
pub mod watches;
pub mod webhook;

use std::sync::Arc;

use futures::channel::mpsc::UnboundedReceiver;
use futures::future::ready;
use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Client, Resource};

use crate::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::core::namespaced_name::NamespacedName;
use crate::core::runner_pod::VM_LABEL;
use crate::operator::observe::health::Health;
use crate::operator::options::Options;
use crate::operator::tasks::Tasks;
use crate::operator::watch_toolkit::cache_events::{self, CacheEvent, Source};
use crate::operator::watch_toolkit::listed::{CachesListed, Listed};
use crate::operator::watch_toolkit::teller::Teller;
use crate::registry::{CredentialSource, Registries};
use admission_sources::AdmissionSources;
use digests::tag_asks::TagAsks;
use digests::{asks_publisher, digests_watcher};
use neonvm_watch::neonvm_watcher::{self, NeonVmWatcher};
use rule_watch::local_registry_watcher;
use rule_watch::rules_changed::RulesChanged;
use rule_watch::rules_watcher::{self, RulesEvent, RulesWatcher};
use watches::cached_pod::CachedPod;
use watches::caches::Caches;
use watches::invalid_objects::Unreadable;
use watches::unreadable_mappings::UnreadableMappings;

/// What the replica side keeps, for every reader.
pub struct ReplicaSide {
    pub caches: Caches,
    /// What admission answers from: the rules in force, the namespaces, the digests the
    /// leader verified (as this replica holds them), NeonVM's VMs and runner pods.
    pub admission: AdmissionSources,
    /// The registries followed tags are checked at, and the cluster's local registry in
    /// force.
    pub registries: Arc<Registries>,
    /// Marked once the rules were first compiled: every mapping and namespace listed.
    pub rules_loaded: Listed,
    /// Marked once the leader's published digests were first read (at once when there is
    /// no other replica to publish them: this one verifies its own).
    pub digests_loaded: Listed,
    /// The followed tags this replica's admissions found no digest for, asked of the
    /// leader.
    pub asks: Arc<TagAsks>,
}

/// What the read side tells, for the write side to act on.
pub struct Told {
    /// Runner pod events.
    pub pods: BoxStream<'static, CacheEvent<CachedPod>>,
    /// VirtualMachine events.
    pub vms: BoxStream<'static, Result<VirtualMachine, watcher::Error>>,
    /// VirtualMachines deleted (or found gone by a re-list).
    pub vms_deleted: UnboundedReceiver<NamespacedName>,
    /// Objects that cannot be read.
    pub unreadable: Teller<Unreadable>,
    /// What changed in the rules.
    pub rules_changed: Teller<RulesChanged>,
}

/// Starts the read side: its watches, and the rules watcher among `tasks`.
pub fn start(
    client: &Client,
    options: &Options,
    health: &Arc<Health>,
    tasks: &mut Tasks,
) -> anyhow::Result<(ReplicaSide, Told)> {
    let watches = Watches::new(client, options, health);
    let registries = Arc::new(
        Registries::new(
            options.reach(),
            options
                .registry_credentials
                .as_ref()
                .map_or(CredentialSource::NotConfigured, |s| {
                    CredentialSource::Pending(s.to_string())
                }),
        )
        .map_err(|e| anyhow::anyhow!(e))?
        .reaching_local_from(options.local_registry_vantage),
    );
    let read = ReplicaSide {
        admission: AdmissionSources {
            rules: Arc::default(),
            namespaces: watches.caches.namespaces.clone(),
            digests: Arc::default(),
            neonvm: Arc::default(),
        },
        caches: watches.caches,
        registries,
        rules_loaded: Listed::default(),
        digests_loaded: Listed::default(),
        asks: Arc::default(),
    };
    if let Some(place) = &options.asks {
        tasks.spawn(
            "asks publisher",
            asks_publisher::run(client.clone(), place.clone(), Arc::clone(&read.asks)),
        );
    }
    tasks.spawn(
        "NeonVM watcher",
        neonvm_watcher::run(NeonVmWatcher {
            client: client.clone(),
            namespaces: options.namespaces.clone(),
            state: Arc::clone(&read.admission.neonvm),
        }),
    );
    if let Some(name) = &options.published_digests {
        tasks.spawn(
            "verified digests watcher",
            digests_watcher::run(
                client.clone(),
                name.clone(),
                Arc::clone(&read.admission.digests),
                read.digests_loaded.clone(),
            ),
        );
    } else {
        read.digests_loaded.mark();
    }
    let rules_changed = Teller::default();
    tasks.spawn(
        "rules watcher",
        rules_watcher::run(
            RulesWatcher {
                acts_in: options.acts_in(),
                compile: options.compile_options(None),
                caches: read.caches.clone(),
                rules: Arc::clone(&read.admission.rules),
                registries: Arc::clone(&read.registries),
                told: rules_changed.clone(),
            },
            watches.changes,
            read.rules_loaded.clone(),
        ),
    );
    let told = Told {
        pods: watches.pods,
        vms: watches.vms,
        vms_deleted: watches.vms_deleted,
        unreadable: watches.unreadable,
        rules_changed,
    };
    Ok((read, told))
}

/// The operator's watches: the caches they fill, and the event streams of its tasks.
struct Watches {
    caches: Caches,
    /// Mapping and namespace events, for the rules watcher.
    changes: BoxStream<'static, RulesEvent>,
    /// Runner pod events, for the pod watcher.
    pods: BoxStream<'static, CacheEvent<CachedPod>>,
    /// VirtualMachine events, for the VM controller.
    vms: BoxStream<'static, Result<VirtualMachine, watcher::Error>>,
    /// Objects the operator cannot read, for the reporter.
    unreadable: Teller<Unreadable>,
    /// VirtualMachines deleted (or found gone by a re-list), for whoever remembers them.
    vms_deleted: UnboundedReceiver<NamespacedName>,
}

/// Tells the unreadable objects among a cache's events to the reporter.
fn report_unreadable<K: Resource<DynamicType = ()>>(
    to: &Teller<Unreadable>,
) -> impl FnMut(&CacheEvent<K>) + use<K> {
    let to = to.clone();
    move |event| {
        if let CacheEvent::Invalid(object) = event {
            to.tell(Unreadable {
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
) -> impl FnMut(CacheEvent<K>) -> stream::Iter<std::vec::IntoIter<RulesEvent>> + use<K> {
    let (unreadable, store) = (Arc::clone(unreadable), store.clone());
    move |event| {
        let held = unreadable.observe(&event, &store).map(RulesEvent::Held);
        let changes: Vec<RulesEvent> = RulesEvent::of_mapping(&event)
            .into_iter()
            .chain(held)
            .collect();
        stream::iter(changes)
    }
}

impl Watches {
    fn new(client: &Client, options: &Options, health: &Arc<Health>) -> Watches {
        let ns = &options.namespaces;
        let all = watcher::Config::default();
        let listed = CachesListed::default();
        let unreadable = Teller::default();
        let unreadable_tx = unreadable.clone();
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
                .filter_map(|e| ready(RulesEvent::of_namespace(&e)))
                .boxed(),
            local_registry_watcher::observations(client)
                .map(RulesEvent::LocalRegistry)
                .boxed(),
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
