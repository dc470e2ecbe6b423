//! The CustomResourceDefinitions, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{ClusterImageMapping, ImageMapping, VirtualMachine};

/// Every CRD of the project, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        ImageMapping::crd(),
        ClusterImageMapping::crd(),
        VirtualMachine::crd(),
    ]
}

/// One CRD as a YAML document.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(crd)
}

/// Every CRD as one multi-document YAML stream, as `imagemap crds` prints it.
pub fn all_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn committed_crds_match_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/imagemap.dev.yaml");
        let committed = std::fs::read_to_string(path).unwrap();
        let generated = super::all_yaml().unwrap();
        assert!(
            committed == generated,
            "crds/imagemap.dev.yaml is out of date: run `cargo run -q -- crds > crds/imagemap.dev.yaml`"
        );
    }

    #[test]
    fn every_kind_is_in_the_imagemap_category_without_kubevirt_short_names() {
        for crd in super::all() {
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&["imagemap".to_string()][..])
            );
            let short = crd.spec.names.short_names.unwrap_or_default();
            assert!(!short.iter().any(|s| s == "vm" || s == "vms"), "{short:?}");
        }
    }
}
