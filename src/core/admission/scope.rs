//! Which admission requests are left alone (pure): namespaces never mapped, requests other
//! than a pod's creation or its new ephemeral containers, static (mirror) pods, and the
//! runner pods of imagemap's own VirtualMachines (their images are resolved already).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::core::api::GROUP;

/// Namespaces whose pods are never mapped, besides the operator's own: the cluster's own.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The annotation the kubelet puts on the API server's copy of a static pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Why a request is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The namespace is never mapped.
    ExcludedNamespace,
    /// Not a pod's creation, nor ephemeral containers added to one.
    OtherRequest,
    /// A static pod's mirror: the kubelet runs what its file says.
    MirrorPod,
    /// A runner pod of imagemap's own VirtualMachine.
    OwnVirtualMachine,
}

impl Skip {
    /// Every reason a request is left alone.
    pub const ALL: [Skip; 4] = [
        Skip::ExcludedNamespace,
        Skip::OtherRequest,
        Skip::MirrorPod,
        Skip::OwnVirtualMachine,
    ];

    /// A bounded label for metrics and logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::ExcludedNamespace => "excluded_namespace",
            Skip::OtherRequest => "other_request",
            Skip::MirrorPod => "mirror_pod",
            Skip::OwnVirtualMachine => "own_virtual_machine",
        }
    }
}

/// What an admission request is, for scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A pod is created.
    CreatePod,
    /// Ephemeral containers are added to a pod (`pods/ephemeralcontainers`).
    AddEphemeralContainers,
    /// Anything else.
    Other,
}

impl RequestKind {
    /// The kind of a request for `resource` (`group`, `resource`, `subresource`) and
    /// `operation` (as `AdmissionReview` spells it: `CREATE`, `UPDATE`, …).
    #[must_use]
    pub fn of(group: &str, resource: &str, subresource: Option<&str>, operation: &str) -> Self {
        match (group, resource, subresource, operation) {
            ("", "pods", None | Some(""), "CREATE") => RequestKind::CreatePod,
            ("", "pods", Some("ephemeralcontainers"), "UPDATE") => {
                RequestKind::AddEphemeralContainers
            }
            _ => RequestKind::Other,
        }
    }
}

/// The namespaces never mapped: the cluster's own, the operator's, and those an
/// administrator names.
#[derive(Debug, Clone, Default)]
pub struct Excluded(BTreeSet<String>);

impl Excluded {
    /// The system namespaces, `own` (the operator's namespace) and `extra`.
    #[must_use]
    pub fn new(own: Option<&str>, extra: &[String]) -> Excluded {
        let mut set: BTreeSet<String> =
            SYSTEM_NAMESPACES.iter().map(|s| (*s).to_string()).collect();
        set.extend(own.map(str::to_string));
        set.extend(extra.iter().cloned());
        Excluded(set)
    }

    /// Whether `namespace` is never mapped.
    #[must_use]
    pub fn contains(&self, namespace: &str) -> bool {
        self.0.contains(namespace)
    }

    /// The namespaces, sorted (for the webhook configuration's namespace selector).
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// Who asks, as the request's `userInfo` says, and who the operator is: a runner pod of
/// imagemap's own VirtualMachine is left alone only when the operator itself creates it
/// (anyone may write such an owner reference).
#[derive(Debug, Clone, Copy)]
pub struct Requesters<'a> {
    pub user: &'a str,
    /// The operator's own user name; `None`: unknown, and no pod is taken for its own.
    pub operator: Option<&'a str>,
}

/// Why the request for `pod` in `namespace` is left alone, if it is.
#[must_use]
pub fn skip(
    excluded: &Excluded,
    namespace: &str,
    kind: RequestKind,
    pod: &Value,
    who: Requesters<'_>,
) -> Option<Skip> {
    if excluded.contains(namespace) {
        return Some(Skip::ExcludedNamespace);
    }
    if kind == RequestKind::Other {
        return Some(Skip::OtherRequest);
    }
    let metadata = pod.get("metadata");
    if metadata
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
    {
        return Some(Skip::MirrorPod);
    }
    let owned_by_vm = metadata
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .is_some_and(|owners| owners.iter().any(is_own_vm));
    (owned_by_vm && who.operator == Some(who.user)).then_some(Skip::OwnVirtualMachine)
}

/// Whether an owner reference is the controller reference of imagemap's VirtualMachine
/// (NeonVM's shares the kind name: the group tells them apart).
fn is_own_vm(owner: &Value) -> bool {
    let field = |k: &str| owner.get(k).and_then(Value::as_str);
    owner.get("controller").and_then(Value::as_bool) == Some(true)
        && field("kind") == Some("VirtualMachine")
        && field("apiVersion").and_then(|v| v.split('/').next()) == Some(GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OPERATOR: Requesters<'static> = Requesters {
        user: "system:serviceaccount:imagemap-system:imagemap",
        operator: Some("system:serviceaccount:imagemap-system:imagemap"),
    };

    #[test]
    fn requests_are_classified_by_resource_and_operation() {
        assert_eq!(
            RequestKind::of("", "pods", None, "CREATE"),
            RequestKind::CreatePod
        );
        assert_eq!(
            RequestKind::of("", "pods", Some("ephemeralcontainers"), "UPDATE"),
            RequestKind::AddEphemeralContainers
        );
        for (sub, op) in [
            (None, "UPDATE"),
            (Some("status"), "UPDATE"),
            (None, "DELETE"),
        ] {
            assert_eq!(RequestKind::of("", "pods", sub, op), RequestKind::Other);
        }
        assert_eq!(
            RequestKind::of("apps", "deployments", None, "CREATE"),
            RequestKind::Other
        );
    }

    #[test]
    fn system_own_and_named_namespaces_mirror_pods_and_own_vms_are_left_alone() {
        let excluded = Excluded::new(Some("imagemap-system"), &["infra".into()]);
        let pod = json!({"metadata": {}});
        let create = RequestKind::CreatePod;
        for ns in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "imagemap-system",
            "infra",
        ] {
            assert_eq!(
                skip(&excluded, ns, create, &pod, OPERATOR),
                Some(Skip::ExcludedNamespace),
                "{ns}"
            );
        }
        assert_eq!(skip(&excluded, "dev", create, &pod, OPERATOR), None);
        assert_eq!(
            skip(&excluded, "dev", RequestKind::Other, &pod, OPERATOR),
            Some(Skip::OtherRequest)
        );
        let mirror = json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "abc"}}});
        assert_eq!(
            skip(&excluded, "dev", create, &mirror, OPERATOR),
            Some(Skip::MirrorPod)
        );
        let owned = |api_version: &str| {
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": api_version, "kind": "VirtualMachine", "name": "vm",
                "uid": "u", "controller": true,
            }]}})
        };
        assert_eq!(
            skip(
                &excluded,
                "dev",
                create,
                &owned("imagemap.dev/v1alpha1"),
                OPERATOR
            ),
            Some(Skip::OwnVirtualMachine)
        );
        // Anyone else may write that owner reference: their pod is mapped.
        let tenant = Requesters {
            user: "system:serviceaccount:dev:default",
            operator: OPERATOR.operator,
        };
        assert_eq!(
            skip(
                &excluded,
                "dev",
                create,
                &owned("imagemap.dev/v1alpha1"),
                tenant
            ),
            None
        );
        let unknown = Requesters {
            user: "system:serviceaccount:imagemap-system:imagemap",
            operator: None,
        };
        assert_eq!(
            skip(
                &excluded,
                "dev",
                create,
                &owned("imagemap.dev/v1alpha1"),
                unknown
            ),
            None
        );
        // NeonVM's runner pods are mapped.
        assert_eq!(
            skip(
                &excluded,
                "dev",
                create,
                &owned("vm.neon.tech/v1"),
                OPERATOR
            ),
            None
        );
    }
}
