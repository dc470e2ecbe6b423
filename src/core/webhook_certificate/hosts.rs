//! The names the webhook is reached at, as its configuration says: a Service's names (the
//! API server checks `NAME.NAMESPACE.svc`), or a URL's host. The serving certificate must be
//! valid for each.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;

/// Every name the configuration's webhooks reach the webhook at, sorted, once each.
#[must_use]
pub fn hosts(configuration: &MutatingWebhookConfiguration) -> Vec<String> {
    let mut hosts = Vec::new();
    for webhook in configuration.webhooks.iter().flatten() {
        let client = &webhook.client_config;
        if let Some(service) = &client.service {
            let (name, ns) = (&service.name, &service.namespace);
            hosts.extend([
                format!("{name}.{ns}.svc"),
                format!("{name}.{ns}.svc.cluster.local"),
                format!("{name}.{ns}"),
                name.clone(),
            ]);
        } else if let Some(host) = client
            .url
            .as_deref()
            .and_then(|url| url.parse::<http::Uri>().ok())
            .and_then(|uri| uri.host().map(|h| h.trim_matches(['[', ']']).to_string()))
        {
            hosts.push(host);
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhook, ServiceReference, WebhookClientConfig,
    };

    fn webhook(client_config: WebhookClientConfig) -> MutatingWebhook {
        MutatingWebhook {
            client_config,
            ..MutatingWebhook::default()
        }
    }

    #[test]
    fn a_service_gives_its_names_and_a_url_its_host() {
        let configuration = MutatingWebhookConfiguration {
            webhooks: Some(vec![
                webhook(WebhookClientConfig {
                    service: Some(ServiceReference {
                        name: "imagemap-webhook".into(),
                        namespace: "imagemap-system".into(),
                        ..ServiceReference::default()
                    }),
                    ..WebhookClientConfig::default()
                }),
                webhook(WebhookClientConfig {
                    url: Some("https://[::1]:8443/mutate-pods".into()),
                    ..WebhookClientConfig::default()
                }),
                webhook(WebhookClientConfig {
                    url: Some("https://127.0.0.1:8443/mutate-pods".into()),
                    ..WebhookClientConfig::default()
                }),
            ]),
            ..MutatingWebhookConfiguration::default()
        };
        assert_eq!(
            hosts(&configuration),
            [
                "127.0.0.1",
                "::1",
                "imagemap-webhook",
                "imagemap-webhook.imagemap-system",
                "imagemap-webhook.imagemap-system.svc",
                "imagemap-webhook.imagemap-system.svc.cluster.local",
            ]
        );
        assert!(hosts(&MutatingWebhookConfiguration::default()).is_empty());
    }
}
