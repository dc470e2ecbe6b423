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

/// File name of a CRD in `crds/`: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!(
        "{}.yaml",
        crd.spec.names.plural.clone() + "." + &crd.spec.group
    )
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
