//! What admission answers from on every replica — the rules in force, the namespaces'
//! labels, the digests the leader verified and NeonVM's runner pods — made into the core's
//! one view of what admission makes of a pod ([`crate::core::admission::pod_view`]). The
//! webhook answers through it; on the leader, the passes over the pods, live reload of
//! workloads and of NeonVM's runner pods judge through it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::Store;

use crate::core::admission::pod_view::Admission;
use crate::core::rules::{RuleRef, RuleSet};
use crate::operator::replica::digests::followed::Followed;
use crate::operator::replica::digests::verified_digests::VerifiedDigests;
use crate::operator::replica::neonvm_watch::neonvm_state::NeonVmState;
use crate::operator::replica::rule_watch::rules_in_force::RulesInForce;
use crate::operator::replica::watches::caches::namespace_labels;

/// What admission answers from.
#[derive(Clone)]
pub struct AdmissionSources {
    pub rules: Arc<RulesInForce>,
    /// The namespaces, for the labels ClusterImageMappings select them by.
    pub namespaces: Store<Namespace>,
    /// The digests of followed tags the leader verified, as this replica holds them.
    pub digests: Arc<VerifiedDigests>,
    /// NeonVM's VMs and runner pods: what a migration's target pod takes.
    pub neonvm: Arc<NeonVmState>,
}

impl AdmissionSources {
    /// `f` given admission as it answers now: the rules in force at this moment, and the
    /// labels, digests and runner pods as this replica holds them when `f` asks.
    pub fn view<R>(&self, f: impl FnOnce(&Admission<'_>) -> R) -> R {
        self.view_with(&self.rules.current(), f)
    }

    /// [`AdmissionSources::view`] under `rules`: one pass that judges many pods under one
    /// rule set, however the rules change meanwhile.
    pub fn view_with<R>(&self, rules: &RuleSet, f: impl FnOnce(&Admission<'_>) -> R) -> R {
        let labels_of = |namespace: &str| namespace_labels(&self.namespaces, namespace);
        let digest_of = |reference: &str, rule: Option<&RuleRef>, namespace: &str| {
            self.digests.get(&Followed::of(reference, rule, namespace))
        };
        let runner_images = |namespace: &str, vm: &str| self.neonvm.runner_images(namespace, vm);
        f(&Admission {
            rules,
            namespace_labels: &labels_of,
            digest_of: &digest_of,
            runner_images: &runner_images,
        })
    }
}
