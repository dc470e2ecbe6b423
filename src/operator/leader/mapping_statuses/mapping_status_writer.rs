//! Keeps every mapping's status current: computes them all from the caches, writes each
//! one that changed on its own, so that one refused write never holds back the others.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::ResourceExt;
use kube::api::Api;

use crate::core::admission::pod_view::Admission;
use crate::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use crate::core::conditions;
use crate::core::mapping_status::{self, MappingView, VmCount, VmTally};
use crate::core::namespaced_name::NamespacedName;
use crate::core::neonvm::reload::LIVE_RELOAD_LABEL;
use crate::core::neonvm::{self, NeonVmRestartPolicy};
use crate::core::neonvm_status::slot_statuses;
use crate::core::rule_change;
use crate::core::rules::{MappingKey, MappingScope, Mode, RuleSet};
use crate::core::vm_images::{Resolutions, VmResolution, VmView};
use crate::core::vm_plan;
use crate::operator::acts_in::ActsIn;
use crate::operator::leader::followed_tags::FollowedTags;
use crate::operator::leader::mapping_statuses::pod_counts::PodCounts;
use crate::operator::leader::mapping_statuses::status_due::StatusDue;
use crate::operator::observe::metrics::Metrics;
use crate::operator::observe::progress::Progress;
use crate::operator::replica::neonvm_watch::neonvm_state::NeonVmState;
use crate::operator::replica::rule_watch::rules_in_force::RulesInForce;
use crate::operator::replica::watches::caches::Caches;
use crate::operator::writes::requests::{Written, apply_status};

/// How long a burst of VM reconciles is gathered into one status pass.
const COALESCE: Duration = Duration::from_millis(200);
/// Pause before a pass that follows a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// What the status writer counts from, and writes and reports to.
pub struct StatusWriter {
    pub client: Client,
    pub acts_in: ActsIn,
    /// `--default-runner-image`: what a VM without `runnerImage` runs.
    pub default_runner_image: String,
    /// `--neonvm-default-runner-image`: what a NeonVM VM without `runnerImage` runs.
    pub neonvm_default_runner_image: Option<String>,
    pub caches: Caches,
    pub rules: Arc<RulesInForce>,
    /// The digests a status lists for the tags a mapping's rules follow.
    pub followed: Arc<FollowedTags>,
    pub due: Arc<StatusDue>,
    pub progress: Arc<Progress>,
    pub metrics: Arc<Metrics>,
    /// NeonVM's VMs, counted beside imagemap's.
    pub neonvm: Arc<NeonVmState>,
    /// The pods, counted beside the VMs.
    pub pods: Arc<PodCounts>,
}

/// Runs one status pass each time [`StatusWriter::due`] is notified.
pub async fn run(ctx: StatusWriter) {
    // Counting VMs from caches that have not listed them would write wrong counts.
    let listed = ctx.caches.listed.clone();
    futures::future::join(listed.vms.wait(), listed.pods.wait()).await;
    let progress = Arc::clone(&ctx.progress);
    let mut counted = Counted::default();
    loop {
        ctx.due.notified().await;
        tokio::time::sleep(COALESCE).await;
        let covered = progress.status_pass_start();
        let failed = write_statuses(&ctx, &mut counted).await;
        progress.status_pass_done(covered);
        if failed > 0 {
            ctx.due.mappings();
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }
}

/// What the passes keep between them: the VMs' counts, and the rules they were counted
/// under (none before the first pass).
#[derive(Default)]
struct Counted {
    tally: VmTally,
    rules: Option<Arc<RuleSet>>,
    /// The NeonVM VMs counted (keyed `vm.neon.tech/NAME` in the tally).
    neonvm: HashSet<NamespacedName>,
}

impl Counted {
    /// Counts again the VMs named since the last pass and, when the rules changed, those
    /// that resolve differently under the new ones: a pass costs the VMs whose counts may
    /// have changed (plus, after a change of rules, a look at each VM's resolution key).
    fn update(
        &mut self,
        ctx: &StatusWriter,
        rules: &Arc<RuleSet>,
        dry_runs: &BTreeSet<&MappingKey>,
    ) {
        let mut due: HashSet<NamespacedName> = ctx.due.take();
        let runner = ctx.default_runner_image.as_str();
        let neonvm_due = ctx.due.take_neonvm()
            || self
                .rules
                .as_ref()
                .is_none_or(|old| !Arc::ptr_eq(old, rules));
        if neonvm_due {
            self.count_neonvm(ctx, rules);
        }
        match &self.rules {
            None => {
                let scope = ctx.caches.vms_in_scope(&ctx.acts_in);
                due.extend(scope.vms.iter().map(|vm| NamespacedName::of(vm.as_ref())));
            }
            Some(old) if !Arc::ptr_eq(old, rules) => {
                let scope = ctx.caches.vms_in_scope(&ctx.acts_in);
                // Dry-run rules count from what they would decide.
                let modes = [Mode::Live, Mode::Preview];
                let changed =
                    rule_change::resolving_differently(old, rules, scope.views(), runner, &modes);
                due.extend(changed.into_iter().map(NamespacedName::of));
            }
            Some(_) => {}
        }
        self.rules = Some(Arc::clone(rules));
        if due.is_empty() {
            return;
        }
        let now = conditions::now();
        let vms: Vec<(NamespacedName, Option<Arc<VirtualMachine>>)> = due
            .into_iter()
            .map(|name| {
                let vm = ctx
                    .caches
                    .vms
                    .get(&name.object_ref())
                    .filter(|_| ctx.acts_in.contains(&name.namespace));
                (name, vm)
            })
            .collect();
        let mut labels: HashMap<&str, BTreeMap<String, String>> = HashMap::new();
        for (name, _) in vms.iter().filter(|(_, vm)| vm.is_some()) {
            labels
                .entry(&name.namespace)
                .or_insert_with(|| ctx.caches.namespace_labels(&name.namespace));
        }
        let none = BTreeMap::new();
        let mut live = Resolutions::new(rules, runner, Mode::Live);
        let mut preview = Resolutions::new(rules, runner, Mode::Preview);
        for (name, vm) in &vms {
            let Some(vm) = vm else {
                self.tally.set(name.clone(), None);
                continue;
            };
            let view = VmView {
                vm: vm.as_ref(),
                namespace_labels: labels.get(name.namespace.as_str()).unwrap_or(&none),
            };
            let resolution = live.of(view);
            let awaiting = !vm.spec.live_reload && {
                let pods = ctx.caches.pods_of(vm);
                let pods: Vec<&Pod> = pods.iter().collect();
                vm_plan::awaits_restart(vm, &pods, resolution, &now)
            };
            let preview = (!dry_runs.is_empty()).then(|| preview.of(view));
            let count = VmCount::of(resolution, preview, dry_runs, awaiting);
            self.tally.set(name.clone(), Some(count));
        }
    }
}

impl Counted {
    /// Counts every NeonVM VM again (they are few; each is keyed `vm.neon.tech/NAME`), and
    /// forgets those gone.
    fn count_neonvm(&mut self, ctx: &StatusWriter, rules: &Arc<RuleSet>) {
        let mut now = HashSet::new();
        // As admission maps NeonVM's runner pods, before a followed tag is pinned.
        let labels_of = |namespace: &str| ctx.caches.namespace_labels(namespace);
        let admission = Admission::without_digests(rules, &labels_of);
        for vm in ctx.neonvm.vms() {
            if !ctx.acts_in.contains(&vm.namespace) {
                continue;
            }
            let key = NamespacedName::new(&vm.namespace, &format!("{}/{}", neonvm::GROUP, vm.name));
            let runner = ctx.neonvm_default_runner_image.as_deref();
            let slots = vm.slots(runner);
            let asked = slots
                .iter()
                .map(|s| (s.slot.as_str(), s.requested.as_str()));
            let resolution = VmResolution {
                slots: admission
                    .slots(&vm.namespace, &vm.labels, asked)
                    .into_iter()
                    .map(|outcome| outcome.resolution)
                    .collect(),
            };
            let pod = ctx.neonvm.runner_pod(&vm).map(|p| p.images);
            // Live reload replaces the pod only under restartPolicy Always.
            let reloads = vm.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true")
                && vm.restart_policy == NeonVmRestartPolicy::Always;
            let awaiting = !reloads
                && slot_statuses(&vm, pod.as_ref(), &admission, runner)
                    .iter()
                    .any(|s| s.running.is_some() && s.resolved.is_some() && !s.current);
            let count = VmCount::of(&resolution, None, &BTreeSet::new(), awaiting);
            self.tally.set(key.clone(), Some(count));
            now.insert(key);
        }
        for gone in self.neonvm.difference(&now) {
            self.tally.set(gone.clone(), None);
        }
        self.neonvm = now;
    }
}

/// Computes every status and writes those that changed; returns how many writes failed.
async fn write_statuses(ctx: &StatusWriter, counted: &mut Counted) -> usize {
    let rules = ctx.rules.current();
    let mappings = ctx.caches.mappings.state();
    let cluster = ctx.caches.cluster_mappings.state();
    let mut list: Vec<MappingView> = mappings
        .iter()
        .filter(|m| ctx.acts_in.contains(&m.namespace().unwrap_or_default()))
        .map(|m| MappingView::from(m.as_ref()))
        .collect();
    // ClusterImageMapping statuses count VMs of every namespace: only an operator that acts
    // in all namespaces writes them.
    if ctx.acts_in.everywhere() {
        list.extend(cluster.iter().map(|m| MappingView::from(m.as_ref())));
    }
    counted.update(ctx, &rules, &mapping_status::dry_runs(&list));
    let computed = ctx.pods.with(|pods| {
        mapping_status::statuses(
            &rules,
            &list,
            &counted.tally,
            pods,
            &|mapping, reference| ctx.followed.digest_for_mapping(mapping, reference),
            &conditions::now(),
        )
    });
    ctx.metrics.set_conflicts(computed.rules_in_conflict);
    let mut failed = 0;
    for m in &list {
        let Some(status) = computed.statuses.get(&m.key) else {
            continue;
        };
        let written = match m.key.scope {
            MappingScope::Namespaced => {
                let ns = m.key.namespace.as_deref().unwrap_or_default();
                let api: Api<ImageMapping> = Api::namespaced(ctx.client.clone(), ns);
                apply_status(&api, &m.key.name, m.previous, status).await
            }
            MappingScope::Cluster => {
                let api: Api<ClusterImageMapping> = Api::all(ctx.client.clone());
                apply_status(&api, &m.key.name, m.previous, status).await
            }
        };
        match written {
            Ok(Written::Changed | Written::Unchanged | Written::Gone) => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(mapping = %m.key, error = %crate::core::excerpt::excerpt(&e.to_string()), "writing mapping status");
            }
        }
    }
    failed
}
