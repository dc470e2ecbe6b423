//! `/metrics`: Prometheus metrics. Labels are bounded (verbs, resources, codes, error
//! categories); no object names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api_requests::ApiRequests;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WarningLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    resource: String,
    code: String,
}

/// Each labelled metric (as scraped), its labels and the values they take: the metrics
/// reference (`docs/src/reference/metrics.md`) shows them; a test holds them to what renders.
pub const LABELS: &[(&str, &[(&str, &str)])] = &[
    (
        "imagemap_admissions_total",
        &[("result", "`mutated`, `unchanged`, `skipped`, `error`")],
    ),
    (
        "imagemap_admission_warnings_total",
        &[(
            "reason",
            "`not_mapped`, `refused_rule`, `ephemeral`, `pod_not_mapped`",
        )],
    ),
    (
        "imagemap_reconcile_errors_total",
        &[(
            "category",
            "`status_write`, `pod_create`, `pod_delete`, `pod_lookup`",
        )],
    ),
    ("imagemap_tag_checks_total", &[("result", "`ok`, `error`")]),
    (
        "imagemap_api_unbounded_lists_total",
        &[(
            "resource",
            "the resource listed, with its subresource (`pods`); `other` for a path that names none",
        )],
    ),
    (
        "imagemap_api_requests_total",
        &[
            (
                "verb",
                "`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, \
                 `deletecollection` (a resource); the method's name for other paths; `other`",
            ),
            (
                "resource",
                "the resource with its subresource (`pods`, `pods/eviction`, `leases`); \
                 `other` for a path that names none",
            ),
            (
                "code",
                "the HTTP status code; `error` when no answer came, `cancelled` when the \
                 request was dropped",
            ),
        ],
    ),
];

/// Every metric the operator registers, each labelled one with a series (a family renders
/// its `# HELP` and `# TYPE` only once it has one): the metrics reference is built from it.
#[must_use]
pub fn exposition() -> String {
    let metrics = Metrics::new(ApiRequests::new());
    metrics.admitted("mutated", 0.0, 0, 0);
    metrics.warned(&[("refused_rule", 1)].into());
    metrics.failed("pod_create");
    metrics.tag_checked(true);
    metrics
        .unbounded_lists
        .get_or_create(&ResourceLabels {
            resource: "pods".into(),
        })
        .inc();
    metrics
        .requests
        .get_or_create(&RequestLabels {
            verb: "get".into(),
            resource: "pods".into(),
            code: "200".into(),
        })
        .inc();
    metrics.render()
}

/// The operator's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
    recreations: Counter,
    conflicts: Gauge,
    invalid_objects: Counter,
    tag_checks: Family<CheckLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    unbounded_lists: Family<ResourceLabels, Counter>,
    admissions: Family<CheckLabels, Counter>,
    admission_duration: Histogram,
    admission_unpinned: Counter,
    admission_dry_run: Counter,
    admission_warnings: Family<WarningLabels, Counter>,
    pods_evicted: Counter,
    rolls: Gauge,
    /// The operator client's request counter, read into `requests` at each render.
    api: ApiRequests,
}

impl Metrics {
    /// The operator's metrics, reporting the requests `api` counts as `api_requests`.
    #[must_use]
    #[allow(clippy::too_many_lines)] // One registration per metric.
    pub fn new(api: ApiRequests) -> Self {
        let mut registry = Registry::with_prefix("imagemap");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let recreations = Counter::default();
        let conflicts = Gauge::default();
        let invalid_objects = Counter::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let unbounded_lists = Family::<ResourceLabels, Counter>::default();
        let tag_checks = Family::<CheckLabels, Counter>::default();
        let admissions = Family::<CheckLabels, Counter>::default();
        // From 10 µs to about 0.3 s.
        let admission_duration = Histogram::new(exponential_buckets(0.000_01, 2.0, 16));
        let (admission_unpinned, admission_dry_run) = (Counter::default(), Counter::default());
        let admission_warnings = Family::<WarningLabels, Counter>::default();
        let (pods_evicted, rolls) = (Counter::default(), Gauge::default());
        registry.register(
            "pods_evicted",
            "Pods of live-reload workloads evicted (successful evictions) because their images changed",
            pods_evicted.clone(),
        );
        registry.register(
            "workload_rolls",
            "Workloads whose live-reload roll is in progress",
            rolls.clone(),
        );
        registry.register(
            "admissions",
            "Pod admission requests by result (mutated, unchanged, skipped, error)",
            admissions.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time the webhook took to answer an admission request, body read included",
            admission_duration.clone(),
        );
        registry.register(
            "admission_unpinned_containers",
            "Containers admitted with a followed tag whose digest the replica did not hold yet",
            admission_unpinned.clone(),
        );
        registry.register(
            "admission_dry_run_containers",
            "Containers admitted unchanged that a dry-run mapping would rewrite",
            admission_dry_run.clone(),
        );
        registry.register(
            "admission_warnings",
            "Warnings admission answers gave, by reason (not_mapped, refused_rule, ephemeral, pod_not_mapped), told or past the bound",
            admission_warnings.clone(),
        );
        registry.register(
            "reconciles",
            "VirtualMachine reconciles finished",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed VirtualMachine reconciles by category",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of VirtualMachine reconciles",
            duration.clone(),
        );
        registry.register(
            "pod_recreations",
            "Runner pods replaced because liveReload VMs' images changed",
            recreations.clone(),
        );
        registry.register(
            "rule_conflicts",
            "Rules currently in conflict with another rule",
            conflicts.clone(),
        );
        registry.register(
            "invalid_objects",
            "VirtualMachines and mappings seen that the operator could not read (skipped)",
            invalid_objects.clone(),
        );
        registry.register(
            "tag_checks",
            "Registry manifest checks of followed tags, by result (ok or error)",
            tag_checks.clone(),
        );
        registry.register(
            "api_requests",
            "Kubernetes API requests by verb, resource and status code",
            requests.clone(),
        );
        registry.register(
            "api_unbounded_lists",
            "Kubernetes API LISTs sent without a limit of at most 500 objects, by resource (none is expected)",
            unbounded_lists.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            recreations,
            conflicts,
            invalid_objects,
            tag_checks,
            requests,
            unbounded_lists,
            admissions,
            admission_duration,
            admission_unpinned,
            admission_dry_run,
            admission_warnings,
            pods_evicted,
            rolls,
            api,
        }
    }

    /// An admission request answered: its result, how long it took, and the containers it
    /// admitted unpinned or that a dry-run mapping would rewrite.
    pub(crate) fn admitted(&self, result: &'static str, seconds: f64, unpinned: u64, dry_run: u64) {
        self.admissions.get_or_create(&CheckLabels { result }).inc();
        self.admission_duration.observe(seconds);
        self.admission_unpinned.inc_by(unpinned);
        self.admission_dry_run.inc_by(dry_run);
    }

    /// The warnings an admission answer gave, by reason.
    pub(crate) fn warned(&self, warned: &std::collections::BTreeMap<&'static str, usize>) {
        for (&reason, &count) in warned {
            self.admission_warnings
                .get_or_create(&WarningLabels { reason })
                .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
        }
    }

    pub(crate) fn reconciled(&self, seconds: f64) {
        self.reconciles.inc();
        self.duration.observe(seconds);
    }

    pub(crate) fn failed(&self, category: &'static str) {
        self.errors.get_or_create(&ErrorLabels { category }).inc();
    }

    pub(crate) fn recreated(&self) {
        self.recreations.inc();
    }

    pub(crate) fn pod_evicted(&self) {
        self.pods_evicted.inc();
    }

    /// The pods evicted by live reload so far.
    pub fn pods_evicted(&self) -> u64 {
        self.pods_evicted.get()
    }

    pub(crate) fn set_rolls(&self, n: usize) {
        self.rolls.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub(crate) fn invalid_object(&self) {
        self.invalid_objects.inc();
    }

    pub(crate) fn tag_checked(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.tag_checks.get_or_create(&CheckLabels { result }).inc();
    }

    /// The followed-tag checks made so far with `result` (`ok` or `error`).
    pub fn tag_checks(&self, result: &'static str) -> u64 {
        self.tag_checks.get_or_create(&CheckLabels { result }).get()
    }

    pub(crate) fn set_conflicts(&self, n: usize) {
        self.conflicts.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        for (key, n) in self.api.snapshot() {
            let counter = self.requests.get_or_create(&RequestLabels {
                verb: key.verb.to_string(),
                resource: key.resource,
                code: key.code,
            });
            counter.inc_by(n.saturating_sub(counter.get()));
        }
        for (resource, n) in self.api.unbounded_lists() {
            let counter = self
                .unbounded_lists
                .get_or_create(&ResourceLabels { resource });
            counter.inc_by(n.saturating_sub(counter.get()));
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_metric_with_bounded_labels() {
        let m = Metrics::new(ApiRequests::new());
        m.reconciled(0.004);
        m.failed("pod_create");
        m.recreated();
        m.set_conflicts(2);
        let text = m.render();
        for line in [
            "imagemap_reconciles_total 1",
            "imagemap_reconcile_errors_total{category=\"pod_create\"} 1",
            "imagemap_pod_recreations_total 1",
            "imagemap_rule_conflicts 2",
            "imagemap_reconcile_duration_seconds_count 1",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_documented_labels_are_those_rendered() {
        let mut rendered: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in exposition().lines().filter(|l| !l.starts_with('#')) {
            if let Some((name, rest)) = line.split_once('{') {
                if name.ends_with("_bucket") {
                    continue;
                }
                let labels = rest
                    .split(',')
                    .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.to_string()))
                    .collect();
                rendered.insert(name.to_string(), labels);
            }
        }
        let documented: BTreeMap<String, Vec<String>> = LABELS
            .iter()
            .map(|(name, labels)| {
                (
                    (*name).to_string(),
                    labels.iter().map(|(l, _)| (*l).to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(rendered, documented);
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Layer, Service, ServiceExt};

    #[tokio::test]
    async fn api_requests_are_rendered() {
        let api = ApiRequests::new();
        let mut svc = api.layer().layer(tower::service_fn(
            |_: http::Request<kube::client::Body>| async {
                Ok::<_, Infallible>(http::Response::new(kube::client::Body::empty()))
            },
        ));
        let req = http::Request::get("/api/v1/pods")
            .body(kube::client::Body::empty())
            .unwrap();
        svc.ready().await.unwrap().call(req).await.unwrap();
        let m = Metrics::new(api);
        let text = m.render();
        assert!(
            text.contains(
                "imagemap_api_requests_total{verb=\"list\",resource=\"pods\",code=\"200\"} 1"
            ),
            "{text}"
        );
    }
}
