//! One admission request, answered from memory: the rules in force, the namespaces' labels
//! and the digests the replica holds. Nothing here calls the API server or a registry: a
//! followed tag admitted without a digest is only recorded in memory (`TagAsks`), from
//! where other tasks ask the leader for it; a dry run records nothing. A
//! request that is not an AdmissionReview is refused (the API server then admits the pod
//! as it is: the webhook fails open); every other answer admits the pod, mapped or not.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::Patch;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::runtime::watcher;
use serde_json::Value;

#[cfg(doc)]
use crate::core::admission::pod_mutation::MAX_WARNINGS;
use crate::core::admission::pod_mutation::{self, Decision, Outcome, PodChange, PodRequest};
use crate::core::admission::scope::{self, Excluded, RequestKind, Requesters, Skip};
use crate::core::excerpt::excerpt;
use crate::core::rules::{CompileOptions, MappingInput};
use crate::operator::acts_in::ActsIn;
use crate::operator::replica::admission_sources::AdmissionSources;
use crate::operator::replica::digests::followed::Followed;
use crate::operator::replica::digests::tag_asks::TagAsks;
use crate::operator::replica::rule_watch::rules_in_force::RulesInForce;
use crate::operator::replica::webhook::answer;
use crate::operator::replica::webhook::review::{self, ReviewPods};

/// What admission answers from.
#[derive(Clone)]
pub struct Admitter {
    /// The rules, namespaces' labels, digests and NeonVM runner pods it answers from.
    pub sources: AdmissionSources,
    /// Namespaces never mapped.
    pub excluded: Excluded,
    /// The namespaces the operator acts in.
    pub acts_in: ActsIn,
    /// The operator's own user name (its pods are resolved already); `None`: unknown.
    pub own_user: Option<String>,
    /// The followed tags admitted without a digest, asked of the leader.
    pub asks: Arc<TagAsks>,
}

/// A request the webhook cannot answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAReview(String);

/// What an answer says, for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// `mutated`, `unchanged` or `skipped`.
    pub result: &'static str,
    pub unpinned: usize,
    pub dry_run: usize,
    /// How many warnings of each reason the answer gave, told or not.
    pub warned: BTreeMap<&'static str, usize>,
    /// The serialized AdmissionReview.
    pub body: Vec<u8>,
}

impl Admitter {
    /// An admitter answering from `mappings` compiled with `options` and from the labels of
    /// `namespaces`, holding no digest of a followed tag: what the webhook answers from once
    /// the read side has loaded the same objects, without its watches (the handler's
    /// benchmark, benches/admission.rs, builds it so).
    pub fn from_mappings(
        mappings: &[MappingInput],
        options: &CompileOptions,
        namespaces: impl IntoIterator<Item = Namespace>,
        excluded: Excluded,
        acts_in: Vec<String>,
    ) -> Admitter {
        let rules = Arc::new(RulesInForce::default());
        rules.recompile(mappings, options);
        let mut writer = kube::runtime::reflector::store::Writer::<Namespace>::default();
        for namespace in namespaces {
            writer.apply_watcher_event(&watcher::Event::Apply(namespace));
        }
        Admitter {
            sources: AdmissionSources {
                rules,
                namespaces: writer.as_reader(),
                digests: Arc::default(),
                neonvm: Arc::default(),
            },
            excluded,
            acts_in: ActsIn::new(acts_in),
            own_user: None,
            asks: Arc::default(),
        }
    }

    /// The answer to `body`, an AdmissionReview of a pod.
    pub fn answer(&self, body: &[u8]) -> Result<Answered, NotAReview> {
        let (request, pods) = review::parse(body)
            .map_err(|e| NotAReview(excerpt(&e.to_string())))?
            .ok_or_else(|| NotAReview("an AdmissionReview without a request".into()))?;
        let (result, decision) = match self.decide(&request, pods) {
            Err(skip) => {
                tracing::trace!(reason = skip.as_str(), "admission skipped");
                ("skipped", None)
            }
            Ok(decision) => {
                let result = match decision.outcome {
                    Outcome::Mutated => "mutated",
                    Outcome::Unchanged => "unchanged",
                };
                (result, Some(decision))
            }
        };
        let (mut unpinned, mut dry_run, mut warned) = (0, 0, BTreeMap::new());
        let (mut patch, mut warnings) = (Patch(Vec::new()), Vec::new());
        if let Some(d) = decision {
            (unpinned, dry_run, warned) = (d.unpinned.len(), d.dry_run, d.warned);
            // A tag admitted without a digest is asked of the leader, so that later pods are
            // pinned; a dry run asks nothing.
            if !request.dry_run && !d.unpinned.is_empty() {
                let namespace = request.namespace.as_deref().unwrap_or_default();
                let now = std::time::Instant::now();
                for follows in &d.unpinned {
                    let followed =
                        Followed::of(&follows.reference, follows.rule.as_ref(), namespace);
                    self.asks.ask(followed, now);
                }
            }
            warnings = bounded(&d.warnings);
            patch = d.patch;
        }
        // A patch that cannot be written admits the pod as it is, warnings kept.
        let body = answer::allowed(&request.types, &request.uid, &patch, &warnings)
            .or_else(|_| {
                answer::allowed(&request.types, &request.uid, &Patch(Vec::new()), &warnings)
            })
            .map_err(|e| NotAReview(format!("answer not serializable: {e}")))?;
        Ok(Answered {
            result,
            unpinned,
            dry_run,
            warned,
            body,
        })
    }

    /// What admission does to the request's pod, or why it is left alone.
    fn decide(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        pods: ReviewPods,
    ) -> Result<Decision, Skip> {
        let operation = match request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        };
        let kind = RequestKind::of(
            &request.resource.group,
            &request.resource.resource,
            request.sub_resource.as_deref(),
            operation,
        );
        let namespace = request.namespace.clone().unwrap_or_default();
        if !self.acts_in.contains(&namespace) {
            return Err(Skip::ExcludedNamespace);
        }
        let pod = pods.object.unwrap_or(Value::Null);
        let who = Requesters {
            user: request.user_info.username.as_deref().unwrap_or_default(),
            operator: self.own_user.as_deref(),
        };
        if let Some(skip) = scope::skip(&self.excluded, &namespace, kind, &pod, who) {
            return Err(skip);
        }
        let old = pods.old_object;
        let change = match (kind, &old) {
            (RequestKind::CreatePod, _) => PodChange::Create,
            (RequestKind::AddEphemeralContainers, Some(old)) => {
                PodChange::EphemeralContainers { old }
            }
            _ => return Err(Skip::OtherRequest),
        };
        Ok(self.sources.view(|admission| {
            pod_mutation::decide(
                admission,
                &PodRequest {
                    namespace: &namespace,
                    pod: &pod,
                    change,
                },
            )
        }))
    }
}

/// The warnings (at most [`MAX_WARNINGS`] and a count of the rest), each short and
/// printable.
fn bounded(warnings: &[String]) -> Vec<String> {
    warnings.iter().map(|w| excerpt(w)).collect()
}

#[cfg(test)]
mod tests;
