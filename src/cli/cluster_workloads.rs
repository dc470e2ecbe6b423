//! Reading the workloads and pods `imagemap resolve --cluster` previews from the live
//! cluster: the Deployments, StatefulSets, DaemonSets, ReplicaSets (not a Deployment's),
//! Jobs (not a CronJob's), CronJobs and the Pods no controller owns, of the namespaces in
//! scope, each as its pod template. Read-only; a kind that cannot be listed is a note, not
//! an error (the `imagemap-view` role does not grant them).

use kube::api::{DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};

use super::preview_scope::PreviewScope;
use crate::core::excerpt::excerpt;
use crate::core::pod_template::{PodTemplate, TemplateKind};

/// The kinds listed, with their group, version and plural.
const KINDS: [(TemplateKind, &str, &str, &str); 7] = [
    (TemplateKind::Deployment, "apps", "v1", "deployments"),
    (TemplateKind::StatefulSet, "apps", "v1", "statefulsets"),
    (TemplateKind::DaemonSet, "apps", "v1", "daemonsets"),
    (TemplateKind::ReplicaSet, "apps", "v1", "replicasets"),
    (TemplateKind::Job, "batch", "v1", "jobs"),
    (TemplateKind::CronJob, "batch", "v1", "cronjobs"),
    (TemplateKind::Pod, "", "v1", "pods"),
];

/// Whether a controller owns the object (a ReplicaSet's Deployment, a Job's CronJob, a
/// Pod's anything): its template is previewed through its owner, or it is not one's own.
fn controlled(object: &DynamicObject) -> bool {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// The pod templates of the namespaces in `scope`, and notes on what could not be read.
pub async fn read(client: &Client, scope: &PreviewScope) -> (Vec<PodTemplate>, Vec<String>) {
    let (mut templates, mut notes) = (Vec::new(), Vec::new());
    let namespaces: Vec<Option<&str>> = match scope.namespaces() {
        None => vec![None],
        Some(namespaces) => namespaces.iter().map(|ns| Some(ns.as_str())).collect(),
    };
    for (kind, group, version, plural) in KINDS {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind.name()),
            plural,
        );
        for ns in &namespaces {
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let list = match api.list(&ListParams::default()).await {
                Ok(list) => list,
                Err(e) => {
                    notes.push(format!(
                        "cannot list {plural} ({}): the preview leaves them out",
                        excerpt(&e.to_string())
                    ));
                    break;
                }
            };
            for object in list.items.iter().filter(|o| !controlled(o)) {
                let namespace = object.metadata.namespace.clone().unwrap_or_default();
                let mut value = object.data.clone();
                value["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
                match PodTemplate::read(kind, &value, &namespace) {
                    Ok(template) => templates.push(template),
                    Err(why) => notes.push(why),
                }
            }
        }
    }
    (templates, notes)
}
