//! What `imagemap explain` reads from the cluster, read-only: the mappings in force (with
//! what their statuses say refused, and when each was created), the namespace's labels, the
//! webhook configuration's namespace selector, the digests the operator published, and the
//! pods — each read that fails saying what could not be read and the permission to grant.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};

use crate::core::api::{ClusterImageMapping, ImageMapping, ImageMappingStatus};
use crate::core::excerpt::excerpt;
use crate::core::explain::explained_pod::Unread;
use crate::core::explain::sent_namespaces::SentNamespaces;
use crate::core::neonvm::{self, NeonVm};
use crate::core::rules::{MappingInput, MappingKey, MappingScope, RuleRef};
use crate::operator::{DIGESTS_DATA_KEY, Followed, decode_digests};

/// What a failed read says: why, and whether the object is simply absent.
fn failed(what: &str, grant: &str, e: &kube::Error) -> Unread {
    let why = match e {
        kube::Error::Api(s) if s.code == 403 => "forbidden".to_string(),
        other => excerpt(&other.to_string()),
    };
    Unread {
        what: format!("{what} ({why})"),
        grant: grant.to_string(),
    }
}

/// The mappings that apply in `namespace`, as the engine takes them; what their statuses
/// say each refused rule's problem is; and when each mapping was created.
pub struct Mappings {
    pub inputs: Vec<MappingInput>,
    pub refused: HashMap<(MappingKey, usize), String>,
    pub created: HashMap<MappingKey, Timestamp>,
}

impl Mappings {
    /// The problem the status of `rule`'s mapping reports for it, when it refuses it (a
    /// conflict is not a refusal: the rule still applies).
    pub fn status_problem(&self, rule: &RuleRef) -> Option<String> {
        self.refused
            .get(&(rule.mapping.clone(), rule.index))
            .cloned()
    }

    fn add(
        &mut self,
        input: MappingInput,
        status: Option<&ImageMappingStatus>,
        created: Option<Timestamp>,
    ) {
        let key = input.key();
        for rule in status.map(|s| s.rules.as_slice()).unwrap_or_default() {
            let Some(problem) = &rule.problem else {
                continue;
            };
            let prefix = format!("rule {}: ", rule.index);
            if let (Some(detail), Ok(index)) =
                (problem.strip_prefix(&prefix), usize::try_from(rule.index))
            {
                self.refused
                    .insert((key.clone(), index), detail.to_string());
            }
        }
        if let Some(created) = created {
            self.created.insert(key, created);
        }
        self.inputs.push(input);
    }
}

/// The ImageMappings of `namespace` and every ClusterImageMapping.
pub async fn mappings(client: &Client, namespace: &str) -> Result<Mappings, Unread> {
    let mut out = Mappings {
        inputs: Vec::new(),
        refused: HashMap::new(),
        created: HashMap::new(),
    };
    let namespaced: Api<ImageMapping> = Api::namespaced(client.clone(), namespace);
    let list = namespaced.list(&ListParams::default()).await.map_err(|e| {
        failed(
            &format!("the ImageMappings of {namespace}"),
            &format!("list imagemappings.imagemap.dev in {namespace} (the imagemap-view role)"),
            &e,
        )
    })?;
    for m in &list.items {
        let created = m.metadata.creation_timestamp.as_ref().map(|t| t.0);
        out.add(MappingInput::from(m), m.status.as_ref(), created);
    }
    let cluster: Api<ClusterImageMapping> = Api::all(client.clone());
    let list = cluster.list(&ListParams::default()).await.map_err(|e| {
        failed(
            "the ClusterImageMappings",
            "list clusterimagemappings.imagemap.dev (the imagemap-view role, bound cluster-wide)",
            &e,
        )
    })?;
    for m in &list.items {
        let created = m.metadata.creation_timestamp.as_ref().map(|t| t.0);
        out.add(MappingInput::from(m), m.status.as_ref(), created);
    }
    debug_assert!(
        out.inputs
            .iter()
            .all(|i| i.scope == MappingScope::Cluster || i.namespace.as_deref() == Some(namespace))
    );
    Ok(out)
}

/// The labels of `namespace`.
pub async fn namespace_labels(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, String>, Unread> {
    Api::<Namespace>::all(client.clone())
        .get(namespace)
        .await
        .map(|ns| ns.labels().clone())
        .map_err(|e| {
            failed(
                &format!("the namespace {namespace}'s labels"),
                "get namespaces (the imagemap-view role, bound cluster-wide)",
                &e,
            )
        })
}

/// Which namespaces the webhook configuration `name` sends.
pub async fn sent_namespaces(client: &Client, name: &str) -> Result<SentNamespaces, Unread> {
    let configuration = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| {
            failed(
                &format!("the webhook configuration {name}"),
                &format!(
                    "get mutatingwebhookconfigurations {name} (the imagemap-view role, bound cluster-wide)"
                ),
                &e,
            )
        })?;
    let webhooks = configuration.webhooks.unwrap_or_default();
    let selectors: Vec<_> = webhooks
        .iter()
        .map(|w| w.namespace_selector.clone())
        .collect();
    let operator = webhooks.iter().find_map(|w| {
        w.client_config
            .service
            .as_ref()
            .map(|s| s.namespace.clone())
    });
    Ok(SentNamespaces::of(&selectors, operator.as_deref()))
}

/// The digests the operator published in `namespace`'s ConfigMap `imagemap-digests`:
/// empty (with a note) when it cannot be read.
pub async fn digests(
    client: &Client,
    namespace: &str,
    notes: &mut Vec<String>,
) -> HashMap<Followed, String> {
    let read = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get("imagemap-digests")
        .await;
    match read {
        Ok(cm) => {
            let text = cm
                .data
                .as_ref()
                .and_then(|d| d.get(DIGESTS_DATA_KEY))
                .cloned()
                .unwrap_or_default();
            decode_digests(&text).unwrap_or_default()
        }
        Err(e) => {
            notes.push(format!(
                "the operator's published digests ({namespace}/imagemap-digests) could not be \
                 read ({}): followed tags are shown unpinned",
                excerpt(&e.to_string())
            ));
            HashMap::new()
        }
    }
}

/// NeonVM's VirtualMachine `name` in `namespace`.
pub async fn neonvm_vm(client: &Client, namespace: &str, name: &str) -> Result<NeonVm, String> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(neonvm::GROUP, "v1", "VirtualMachine"),
        "virtualmachines",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let object = api.get(name).await.map_err(|e| {
        format!(
            "virtualmachines.vm.neon.tech {namespace}/{name}: {}",
            excerpt(&e.to_string())
        )
    })?;
    let mut value = object.data.clone();
    value["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
    NeonVm::read(&value)
        .ok_or_else(|| format!("virtualmachines.vm.neon.tech {namespace}/{name} cannot be read"))
}
