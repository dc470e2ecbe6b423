//! What a change does to the workloads and pods that run now (`imagemap resolve --cluster`):
//! each pod template's containers as the rules resolve them now → after the change, and
//! what happens to its pods — rolled by live reload (a Deployment, StatefulSet, DaemonSet
//! or ReplicaSet whose pods opt in), a restart required (a pod nothing recreates: a bare
//! Pod, a Job's or CronJob's that opts in), or new pods only (the others: the next pods
//! admission maps get the new images). Pure.

use std::collections::BTreeMap;

use crate::core::admission::pod_view::Admission;
use crate::core::pod::records::LIVE_RELOAD_LABEL;
use crate::core::pod_template::{PodTemplate, TemplateKind};
use crate::core::rules::RuleSet;
use crate::core::vm_preview::SlotChange;

/// What happens to a workload's pods once the change is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    /// Live reload evicts its pods one at a time; its controller recreates them, mapped.
    Rolled,
    /// Nothing would recreate its pods: they keep their images until recreated.
    RestartRequired,
    /// Its running pods keep their images; the pods it creates next get the new ones.
    NewPodsOnly,
}

impl Fate {
    /// As the JSON output names it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Rolled => "rolled",
            Fate::RestartRequired => "restartRequired",
            Fate::NewPodsOnly => "newPodsOnly",
        }
    }

    /// As the table says it.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Fate::Rolled => "rolled (live reload)",
            Fate::RestartRequired => "kept: RestartRequired",
            Fate::NewPodsOnly => "new pods only",
        }
    }

    /// The fate of `template`'s pods.
    #[must_use]
    pub fn of(template: &PodTemplate) -> Fate {
        let opted_in = template.labels.get(LIVE_RELOAD_LABEL).map(String::as_str) == Some("true");
        match (template.kind, opted_in) {
            (TemplateKind::Pod, _) => Fate::RestartRequired,
            (kind, true) if kind.rolls() => Fate::Rolled,
            (_, true) => Fate::RestartRequired,
            (_, false) => Fate::NewPodsOnly,
        }
    }
}

/// One workload's (or pod's) preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadPreview {
    pub kind: TemplateKind,
    pub namespace: String,
    pub name: String,
    pub fate: Fate,
    /// Every container, now and after.
    pub slots: Vec<SlotChange>,
}

/// What changing the rules `now` into `after` does to `templates` (namespace labels from
/// `namespace_labels`): the ones whose images change, and how many stay as they are.
#[must_use]
pub fn preview_workloads(
    now: &RuleSet,
    after: &RuleSet,
    templates: &[PodTemplate],
    namespace_labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> (Vec<WorkloadPreview>, usize) {
    let mut changed = Vec::new();
    let mut unchanged = 0;
    let (before, later) = (
        Admission::without_digests(now, namespace_labels),
        Admission::without_digests(after, namespace_labels),
    );
    for t in templates {
        // As admission maps the pods they make, under each rule set.
        let asked: Vec<(&str, &str)> = t
            .images
            .iter()
            .map(|(s, i)| (s.as_str(), i.as_str()))
            .collect();
        let slots = SlotChange::between(&before, &later, &t.namespace, &t.labels, &asked);
        if slots.iter().any(SlotChange::changes) {
            changed.push(WorkloadPreview {
                kind: t.kind,
                namespace: t.namespace.clone(),
                name: t.name.clone(),
                fate: Fate::of(t),
                slots,
            });
        } else {
            unchanged += 1;
        }
    }
    (changed, unchanged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::repository_mapping;
    use crate::core::rules::CompileOptions;

    fn template(kind: TemplateKind, name: &str, live: bool) -> PodTemplate {
        let mut labels = BTreeMap::new();
        if live {
            labels.insert(LIVE_RELOAD_LABEL.to_string(), "true".to_string());
        }
        PodTemplate {
            kind,
            namespace: "dev".into(),
            name: name.into(),
            labels,
            images: vec![
                ("app".into(), "nginx:1.27".into()),
                ("side".into(), "redis:7".into()),
            ],
        }
    }

    #[test]
    fn each_workload_is_told_what_happens_to_its_pods() {
        let options = CompileOptions::default();
        let mut before = repository_mapping("m", "nginx", "mirror.io/nginx", false);
        before.namespace = Some("dev".into());
        let mut later = repository_mapping("m", "nginx", "mirror2.io/nginx", false);
        later.namespace = Some("dev".into());
        let now = RuleSet::compile(&[before], &options);
        let after = RuleSet::compile(&[later], &options);
        let templates = [
            template(TemplateKind::Deployment, "web", true),
            template(TemplateKind::StatefulSet, "db", false),
            template(TemplateKind::Job, "once", true),
            template(TemplateKind::Pod, "bare", false),
        ];
        let labels = |_: &str| BTreeMap::new();
        let (changed, unchanged) = preview_workloads(&now, &after, &templates, &labels);
        assert_eq!(unchanged, 0);
        let fates: Vec<(&str, Fate)> = changed.iter().map(|w| (w.name.as_str(), w.fate)).collect();
        assert_eq!(
            fates,
            [
                ("web", Fate::Rolled),
                ("db", Fate::NewPodsOnly),
                ("once", Fate::RestartRequired),
                ("bare", Fate::RestartRequired)
            ]
        );
        let web = &changed[0].slots;
        assert_eq!(web[0].now.as_deref(), Some("mirror.io/nginx:1.27"));
        assert_eq!(web[0].after.as_deref(), Ok("mirror2.io/nginx:1.27"));
        assert!(web[0].changes() && !web[1].changes());
        // The same rules: nothing changes.
        let (changed, unchanged) = preview_workloads(&now, &now, &templates, &labels);
        assert!(changed.is_empty());
        assert_eq!(unchanged, 4);
    }
}
