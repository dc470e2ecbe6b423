//! The MutatingWebhookConfiguration that sends pods to the webhook: pods on CREATE and the
//! `pods/ephemeralcontainers` subresource on UPDATE, never from a namespace that is never
//! mapped (a namespace selector on `kubernetes.io/metadata.name`), failing open
//! (`failurePolicy: Ignore`) within 5 s, called again after another webhook changed the pod
//! (`reinvocationPolicy: IfNeeded`), without side effects. An operator outside the cluster
//! (`--webhook-url`) registers its own and deletes it when it stops.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};

use crate::core::admission::scope::Excluded;
use crate::operator::replica::webhook::server::PATH;

/// The name of the one webhook in the configuration.
pub const WEBHOOK: &str = "pods.imagemap.dev";
/// How long the API server waits for an answer.
pub const TIMEOUT_SECONDS: i32 = 5;
/// The field manager of the configuration a local operator registers.
const FIELD_MANAGER: &str = "imagemap.dev/webhook";

/// Which namespaces are sent: all but the excluded ones, and only `acts_in` when it names
/// any.
#[must_use]
pub fn namespace_selector(excluded: &Excluded, acts_in: &[String]) -> LabelSelector {
    let name = "kubernetes.io/metadata.name".to_string();
    let mut expressions = vec![LabelSelectorRequirement {
        key: name.clone(),
        operator: "NotIn".into(),
        values: Some(excluded.iter().map(str::to_string).collect()),
    }];
    if !acts_in.is_empty() {
        expressions.push(LabelSelectorRequirement {
            key: name,
            operator: "In".into(),
            values: Some(acts_in.to_vec()),
        });
    }
    LabelSelector {
        match_expressions: Some(expressions),
        match_labels: None,
    }
}

/// The configuration `name` sending to `url` (the webhook's base, e.g.
/// `https://127.0.0.1:8443`), trusting `ca_bundle` (PEM).
#[must_use]
pub fn for_url(
    name: &str,
    url: &str,
    ca_bundle: &str,
    excluded: &Excluded,
    acts_in: &[String],
) -> MutatingWebhookConfiguration {
    let rule = |operation: &str, resource: &str| RuleWithOperations {
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec![operation.into()]),
        resources: Some(vec![resource.into()]),
        scope: Some("Namespaced".into()),
    };
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: WEBHOOK.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: WebhookClientConfig {
                url: Some(format!("{}{PATH}", url.trim_end_matches('/'))),
                ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
                service: None,
            },
            failure_policy: Some("Ignore".into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector: Some(namespace_selector(excluded, acts_in)),
            reinvocation_policy: Some("IfNeeded".into()),
            rules: Some(vec![
                rule("CREATE", "pods"),
                rule("UPDATE", "pods/ephemeralcontainers"),
            ]),
            side_effects: "None".into(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            ..MutatingWebhook::default()
        }]),
    }
}

/// A configuration this process registered; [`Registered::remove`] deletes it.
#[derive(Debug)]
pub struct Registered {
    api: Api<MutatingWebhookConfiguration>,
    name: String,
}

/// Registers `configuration` (replacing one of the same name).
pub async fn register(
    client: Client,
    configuration: &MutatingWebhookConfiguration,
) -> Result<Registered, kube::Error> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let name = configuration.metadata.name.clone().unwrap_or_default();
    let mut object = configuration.clone();
    object.metadata.managed_fields = None;
    let value = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": object.metadata,
        "webhooks": object.webhooks,
    });
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(value),
    )
    .await?;
    Ok(Registered { api, name })
}

impl Registered {
    /// Deletes the configuration: the API server no longer calls this process.
    pub async fn remove(self) -> Result<(), kube::Error> {
        match self.api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_fails_open_and_never_sends_excluded_namespaces() {
        let excluded = Excluded::new(Some("imagemap-system"), &[]);
        let c = for_url("imagemap", "https://127.0.0.1:8443/", "PEM", &excluded, &[]);
        let w = &c.webhooks.as_ref().expect("one webhook")[0];
        assert_eq!(
            w.client_config.url.as_deref(),
            Some("https://127.0.0.1:8443/mutate-pods")
        );
        assert_eq!(w.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
        assert_eq!(w.side_effects, "None");
        assert_eq!(w.timeout_seconds, Some(5));
        let selector = w.namespace_selector.as_ref().expect("a selector");
        let expressions = selector.match_expressions.as_ref().expect("expressions");
        assert_eq!(expressions.len(), 1);
        let values = expressions[0].values.as_ref().expect("values");
        for ns in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "imagemap-system",
        ] {
            assert!(values.iter().any(|v| v == ns), "{ns}");
        }
        let scoped = namespace_selector(&excluded, &["dev".into()]);
        assert_eq!(scoped.match_expressions.expect("two").len(), 2);
    }
}
