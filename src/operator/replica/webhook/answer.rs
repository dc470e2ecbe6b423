//! The AdmissionReview the webhook answers with, written once: the request's uid, always
//! allowed, a JSON patch as the API server reads a byte field (a base64 string) and the
//! warnings. kube's own response type writes the patch as a JSON array of numbers, which
//! the API server decodes number by number and scans three times as many bytes for; it
//! also writes a `status` no allowed answer needs. Called by the handler; calls nothing.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use json_patch::Patch;
use kube::core::TypeMeta;
use serde::Serialize;

/// The answer to the request `uid` of a review of `types`: the pod admitted, changed by
/// `patch` (none when empty), with `warnings`.
pub fn allowed(
    types: &TypeMeta,
    uid: &str,
    patch: &Patch,
    warnings: &[String],
) -> Result<Vec<u8>, serde_json::Error> {
    let patch = if patch.0.is_empty() {
        None
    } else {
        Some(STANDARD.encode(serde_json::to_vec(patch)?))
    };
    serde_json::to_vec(&Review {
        types,
        response: Response {
            uid,
            allowed: true,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: (!warnings.is_empty()).then_some(warnings),
        },
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    #[serde(flatten)]
    types: &'a TypeMeta,
    response: Response<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

#[cfg(test)]
mod tests {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{PatchOperation, ReplaceOperation};
    use serde_json::{Value, json};

    use super::*;

    fn types() -> TypeMeta {
        TypeMeta {
            api_version: "admission.k8s.io/v1".into(),
            kind: "AdmissionReview".into(),
        }
    }

    #[test]
    fn a_patch_is_written_as_base64_and_an_empty_one_not_at_all() {
        let patch = Patch(vec![PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["spec", "containers", "0", "image"]),
            value: json!("mirror.io/app:1"),
        })]);
        let body = allowed(&types(), "u-1", &patch, &["imagemap: a warning".into()]).unwrap();
        let review: Value = serde_json::from_slice(&body).unwrap();
        let written = STANDARD
            .decode(review["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&written).unwrap(),
            json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "mirror.io/app:1"}])
        );
        assert_eq!(
            review,
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": "u-1",
                    "allowed": true,
                    "patchType": "JSONPatch",
                    "patch": review["response"]["patch"],
                    "warnings": ["imagemap: a warning"],
                },
            })
        );

        let body = allowed(&types(), "u-2", &Patch(Vec::new()), &[]).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": "u-2", "allowed": true},
            })
        );
    }
}
