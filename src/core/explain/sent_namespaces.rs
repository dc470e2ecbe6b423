//! Which namespaces the API server sends the webhook, as its configuration's namespace
//! selector says (`kubernetes.io/metadata.name NotIn [...]`, and `In [...]` with
//! `--namespace`), and why a namespace is never sent: the cluster's own, the operator's,
//! excluded by `--webhook-exclude-namespaces`, or outside `--namespace`.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::core::admission::scope::SYSTEM_NAMESPACES;

/// The label every namespace carries with its name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces the webhook is sent, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SentNamespaces {
    excluded: BTreeSet<String>,
    /// `None`: every namespace not excluded.
    only: Option<BTreeSet<String>>,
    /// The operator's namespace: the one its webhook's Service is in.
    operator: Option<String>,
}

impl SentNamespaces {
    /// What `selectors` (each webhook's namespace selector) send, the operator living in
    /// `operator`. Expressions on other labels are not read: a namespace they leave out is
    /// taken as sent.
    #[must_use]
    pub fn of(selectors: &[Option<LabelSelector>], operator: Option<&str>) -> SentNamespaces {
        let mut out = SentNamespaces {
            operator: operator.map(str::to_string),
            ..SentNamespaces::default()
        };
        for selector in selectors.iter().flatten() {
            for e in selector.match_expressions.iter().flatten() {
                if e.key != NAME_LABEL {
                    continue;
                }
                let values = e.values.iter().flatten().cloned();
                match e.operator.as_str() {
                    "NotIn" => out.excluded.extend(values),
                    "In" => out.only.get_or_insert_with(BTreeSet::new).extend(values),
                    _ => {}
                }
            }
            if let Some(name) = selector
                .match_labels
                .as_ref()
                .and_then(|l| l.get(NAME_LABEL))
            {
                out.only
                    .get_or_insert_with(BTreeSet::new)
                    .insert(name.clone());
            }
        }
        out
    }

    /// Why the pods of `namespace` are never sent, if they are not.
    #[must_use]
    pub fn never_sent(&self, namespace: &str) -> Option<String> {
        if SYSTEM_NAMESPACES.contains(&namespace) {
            return Some(format!(
                "{namespace} is one of the cluster's own namespaces"
            ));
        }
        if self.operator.as_deref() == Some(namespace) {
            return Some(format!("{namespace} is the operator's own namespace"));
        }
        if self.excluded.contains(namespace) {
            return Some(format!(
                "the webhook configuration excludes {namespace} (--webhook-exclude-namespaces)"
            ));
        }
        match &self.only {
            Some(only) if !only.contains(namespace) => Some(format!(
                "the operator acts only in {} (--namespace)",
                only.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_never_sent_for_the_reason_the_selector_gives() {
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchExpressions": [
                {"key": NAME_LABEL, "operator": "NotIn",
                 "values": ["kube-system", "imagemap-system", "infra"]},
                {"key": NAME_LABEL, "operator": "In", "values": ["dev", "infra"]},
            ]
        }))
        .unwrap_or_default();
        let sent = SentNamespaces::of(&[Some(selector)], Some("imagemap-system"));
        assert!(sent.never_sent("dev").is_none());
        assert!(
            sent.never_sent("kube-system")
                .unwrap()
                .contains("cluster's own")
        );
        assert!(
            sent.never_sent("imagemap-system")
                .unwrap()
                .contains("operator's own")
        );
        assert!(sent.never_sent("infra").unwrap().contains("excludes infra"));
        assert!(
            sent.never_sent("prod")
                .unwrap()
                .contains("acts only in dev, infra")
        );
        let everywhere = SentNamespaces::of(&[None], None);
        assert!(everywhere.never_sent("prod").is_none());
    }
}
