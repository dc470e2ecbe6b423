//! What every task of the operator shares, as named parts.

use std::sync::Arc;

use super::mappings::status_due::StatusDue;
use crate::namespaced_name::NamespacedName;
use kube::Client;

use super::mappings::rules_in_force::{RuleChange, RulesInForce};
use super::observe::health::Health;
use super::observe::metrics::Metrics;
use super::observe::progress::Progress;
use super::options::Options;
use super::tags::followed_tags::FollowedTags;
use super::vms::events::EventRecorder;
use super::vms::recreation_budget::RecreationBudget;
use super::vms::vm_memory::VmMemory;
use super::watches::caches::Caches;
use crate::api_requests::ApiRequests;
use crate::registry::{CredentialSource, Registries};

/// What the operator reports to: the probes, `/metrics`, whoever waits on its progress,
/// and the notification endpoint (which acts on it while it runs).
#[derive(Debug, Clone)]
pub struct Observers {
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub progress: Arc<Progress>,
    pub running: Arc<super::tags::push_endpoint::Running>,
}

impl Observers {
    /// Observers whose metrics report the requests `requests` counts.
    #[must_use]
    pub fn new(requests: ApiRequests) -> Self {
        Observers {
            health: Arc::default(),
            metrics: Arc::new(Metrics::new(requests)),
            progress: Arc::default(),
            running: Arc::default(),
        }
    }
}

/// Everything a reconcile reads and the state the operator's tasks share.
pub struct Context {
    pub client: Client,
    pub options: Options,
    pub recorder: EventRecorder,
    pub caches: Caches,
    pub rules: RulesInForce,
    /// What the VM controller remembers of each VM between reconciles.
    pub memory: VmMemory,
    pub budget: RecreationBudget,
    pub observers: Observers,
    /// When mapping statuses may need an update, and for which VMs.
    pub mapping_status_due: StatusDue,
    /// The tags VMs follow, and their digests.
    pub followed: FollowedTags,
    /// The registries followed tags are checked at.
    pub registries: Registries,
}

impl Context {
    /// The context, and the task that sends its queued Events.
    pub fn new(
        client: Client,
        options: Options,
        caches: Caches,
        observers: Observers,
    ) -> anyhow::Result<(Context, impl Future<Output = ()> + Send + 'static)> {
        let (recorder, event_sender) =
            EventRecorder::new(client.clone(), observers.health.running_reconciles());
        let ctx = Context {
            recorder,
            client,
            budget: RecreationBudget::new(options.max_recreates_per_minute),
            registries: Registries::new(
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
            followed: FollowedTags::default(),
            options,
            caches,
            rules: RulesInForce::default(),
            memory: VmMemory::default(),
            observers,
            mapping_status_due: StatusDue::default(),
        };
        Ok((ctx, event_sender))
    }

    /// `vm` was deleted: everything the operator's rooms kept about it goes.
    pub fn vm_deleted(&self, vm: &NamespacedName) {
        self.memory.forget(vm);
        self.followed.forget(vm);
        self.caches.pod_index.forget(vm);
        self.observers.progress.forget_vm(vm);
        self.mapping_status_due.vm(vm.clone());
    }

    /// Compiles the cached mappings and puts them in force.
    pub fn recompile(&self) -> RuleChange {
        let inputs = self.caches.mapping_inputs(&self.options);
        self.rules.recompile(
            &inputs,
            &self
                .options
                .compile_options(self.registries.local_registry()),
        )
    }
}
