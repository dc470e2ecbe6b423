//! The install manifests on the real API server, and the operator's RBAC proven: the shipped
//! ServiceAccount (with a TokenRequest token) passes the main scenario — its leader keeps
//! the install's webhook Secret and configuration too, after which the install shows no
//! drift — and removing any one of its rules makes the scenario fail. Run with
//! `scripts/test`.

// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used)] // test code

mod support;

use std::process::Command;
use std::time::Duration;

use imagemap::core::admission::scope::Excluded;
use imagemap::core::api::{ClusterImageMapping, ImageMapping, VirtualMachine};
use imagemap::core::namespaced_name::NamespacedName;
use imagemap::core::runner_pod::VM_LABEL;
use imagemap::core::runner_pod::pod_images;
use imagemap::core::webhook_certificate::plan::Lifetimes;
use imagemap::operator::{LeaderElection, LeaseTiming, Options, Webhook, WebhookCertificate};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use support::registry::{PRIVATE_PASSWORD, TestRegistry, credentials_secret};
use support::*;

const SYSTEM_NS: &str = "imagemap-system";

static DEPLOYED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// The CRDs, then `kubectl apply --server-side -k deploy/` (as Flux applies), once per test
/// binary (concurrent applies of the same new objects race on their creation).
async fn install(client: &Client) {
    install_crds(client).await;
    DEPLOYED
        .get_or_init(|| async {
            kubectl_ok(&["apply", "--server-side", "-k", "deploy/"]);
        })
        .await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn deploy_installs_with_kustomize_and_its_flags_exist() {
    let client = client().await;
    install(&client).await;
    // Of all Secrets, the operator may read only its registry credentials, by name.
    let can = |verb: &str, what: &str| {
        let out = kubectl(&[
            "auth",
            "can-i",
            verb,
            what,
            "-n",
            SYSTEM_NS,
            "--as=system:serviceaccount:imagemap-system:imagemap",
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(can("list", "secrets/imagemap-registry-credentials"), "yes");
    assert_eq!(can("watch", "secrets/imagemap-registry-credentials"), "yes");
    assert_eq!(can("list", "secrets"), "no");
    assert_eq!(can("get", "secrets/imagemap-registry-credentials"), "no");
    assert_eq!(can("list", "secrets/another"), "no");
    // And the webhook's, which the leader fills.
    for verb in ["get", "list", "watch", "patch"] {
        assert_eq!(can(verb, "secrets/imagemap-webhook-tls"), "yes", "{verb}");
    }
    assert_eq!(can("patch", "secrets/another"), "no");
    // Of all webhook configurations, only the install's, and never created or deleted.
    assert_eq!(
        can("patch", "mutatingwebhookconfigurations/imagemap"),
        "yes"
    );
    assert_eq!(can("patch", "mutatingwebhookconfigurations/other"), "no");
    assert_eq!(can("create", "mutatingwebhookconfigurations"), "no");
    assert_eq!(
        can("delete", "mutatingwebhookconfigurations/imagemap"),
        "no"
    );
    // Of all ConfigMaps, only the cluster's local registry hosting, in kube-public.
    let can_public = |verb: &str, what: &str| {
        let out = kubectl(&[
            "auth",
            "can-i",
            verb,
            what,
            "-n",
            "kube-public",
            "--as=system:serviceaccount:imagemap-system:imagemap",
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        can_public("watch", "configmaps/local-registry-hosting"),
        "yes"
    );
    assert_eq!(
        can_public("list", "configmaps/local-registry-hosting"),
        "yes"
    );
    assert_eq!(can_public("list", "configmaps"), "no");
    assert_eq!(can_public("get", "configmaps/cluster-info"), "no");
    let deployment = kubectl_ok(&[
        "get",
        "deployment",
        "imagemap",
        "-n",
        SYSTEM_NS,
        "-o",
        "json",
    ]);
    let deployment: serde_json::Value = serde_json::from_str(&deployment).unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["command"][0], "/usr/local/bin/imagemap",
        "the Dockerfile installs the binary there"
    );
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    assert!(dockerfile.contains("/usr/local/bin/imagemap"));
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(args[0], "run");
    let help = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in &args[1..] {
        let name = flag.split('=').next().unwrap();
        assert!(
            help.contains(&format!("{name} "))
                || help.contains(&format!("{name}="))
                || help.contains(&format!("{name}\n")),
            "{name} is not a flag of `imagemap run`:\n{help}"
        );
    }
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
}

fn repo(rel: &str) -> String {
    format!("{REPO}/{rel}")
}

/// A ServiceAccount token from the TokenRequest API, as a kube Config.
async fn config_for(service_account: &str) -> kube::Config {
    let token = kubectl_ok(&[
        "create",
        "token",
        service_account,
        "-n",
        SYSTEM_NS,
        "--duration=1h",
    ])
    .trim()
    .to_string();
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(secrecy::SecretString::from(token)),
        ..Default::default()
    };
    config
}

/// A private registry holding `acme/private:dev`, and the registry credentials Secret the
/// shipped Deployment names, holding its password.
struct Private {
    /// Kept running while the scenarios use it.
    _registry: TestRegistry,
    tag: String,
    digest: String,
}

impl Drop for Private {
    fn drop(&mut self) {
        kubectl(&[
            "delete",
            "configmap",
            "local-registry-hosting",
            "-n",
            "kube-public",
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

const CREDENTIALS_SECRET: &str = "imagemap-registry-credentials";

impl Private {
    async fn start(admin: &Client) -> Private {
        let registry = TestRegistry::start_private("rbac").await;
        let digest = registry.push("acme/private", "dev", "private build");
        // The cluster advertises it as its local registry: pods pull it as
        // `imagemap-rbac-registry:PORT`, the operator asks it at `host`, and neither registry
        // flag names it.
        let runtime = format!("imagemap-rbac-registry:{}", registry.port);
        let hosting: ConfigMap = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
            "data": {"localRegistryHosting.v1":
                format!("host: \"{}\"\nhostFromContainerRuntime: \"{runtime}\"\n", registry.host())}
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(admin.clone(), "kube-public")
            .patch(
                "local-registry-hosting",
                &PatchParams::apply("rbac-test").force(),
                &Patch::Apply(&hosting),
            )
            .await
            .unwrap();
        let tag = format!("{runtime}/acme/private:dev");
        let secret = credentials_secret(CREDENTIALS_SECRET, &registry.host(), PRIVATE_PASSWORD);
        Api::<Secret>::namespaced(admin.clone(), SYSTEM_NS)
            .patch(
                CREDENTIALS_SECRET,
                &PatchParams::apply("rbac-test").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
        Private {
            _registry: registry,
            tag,
            digest,
        }
    }

    /// The operator's options for following its tags, from ImageMappings in `ns`, with its
    /// objects in `install`; acting in every namespace, or in `ns` alone.
    fn options(ns: &str, install: &Install, everywhere: bool) -> Options {
        let system = install.system_ns.as_str();
        Options {
            namespaces: if everywhere {
                Vec::new()
            } else {
                vec![ns.to_string()]
            },
            // The mirrors the scenario's rules rewrite to (the private registry is the
            // cluster's local one: allowed, and plain HTTP, by its ConfigMap).
            allowed_registries: imagemap::core::allowed_registries::AllowedRegistries::only(vec![
                "mirror.io".into(),
                "mirror2.io".into(),
                "x.io".into(),
            ]),
            registry_credentials: Some(NamespacedName::new(system, CREDENTIALS_SECRET)),
            registry_credentials_namespaces: vec![ns.to_string()],
            // Under leader election the leader publishes the digests it verified beside its
            // Lease, as `--leader-elect` sets it.
            published_digests: Some(NamespacedName::new(system, PUBLISHED_DIGESTS)),
            // And each replica asks it for followed tags its admissions found no digest
            // for in the ConfigMap beside it, as `--leader-elect` sets it.
            asks: Some(imagemap::operator::AsksPlace {
                configmap: NamespacedName::new(system, "imagemap-asked-tags"),
                key: "rbac".into(),
            }),
            // The install's webhook: the leader keeps its Secret and configuration.
            webhook: Some(Webhook {
                addr: format!("127.0.0.1:{}", free_port()),
                drain: Duration::ZERO,
                certificate: WebhookCertificate::Secret {
                    secret: NamespacedName::new(system, WEBHOOK_SECRET),
                    configuration: install.configuration.clone(),
                    lifetimes: Lifetimes::default(),
                },
                excluded: Excluded::new(Some(system), &[]),
            }),
            ..Options::default()
        }
    }
}

const WEBHOOK_SECRET: &str = "imagemap-webhook-tls";
/// The ConfigMap the leader publishes the digests it verified in.
const PUBLISHED_DIGESTS: &str = "imagemap-digests";
const WEBHOOK_CONFIGURATION: &str = "imagemap";

/// Where a scenario's operator keeps its objects: its system namespace (its Lease, the
/// webhook's Secret, the published digests, the registry credentials) and its webhook
/// configuration.
struct Install {
    system_ns: String,
    configuration: String,
}

impl Install {
    /// The install `deploy/` made.
    fn shipped() -> Install {
        Install {
            system_ns: SYSTEM_NS.into(),
            configuration: WEBHOOK_CONFIGURATION.into(),
        }
    }

    /// An install of one scenario's own, made as `deploy/` makes the shipped one: a system
    /// namespace holding the empty webhook Secret and the registry credentials, and a webhook
    /// configuration that sends only `scenario_ns`'s pods. Scenarios on installs of their own
    /// run side by side: none sees what another's operator did.
    async fn own(admin: &Client, scenario_ns: &str) -> Install {
        let system_ns = fresh_namespace(admin, "rbac-system").await;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), &system_ns);
        let pp = PostParams::default();
        let webhook_secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": WEBHOOK_SECRET}, "type": "Opaque",
        }))
        .unwrap();
        secrets.create(&pp, &webhook_secret).await.unwrap();
        let shipped = Api::<Secret>::namespaced(admin.clone(), SYSTEM_NS)
            .get(CREDENTIALS_SECRET)
            .await
            .unwrap();
        let credentials = Secret {
            metadata: ObjectMeta {
                name: Some(CREDENTIALS_SECRET.into()),
                ..Default::default()
            },
            data: shipped.data,
            type_: shipped.type_,
            ..Default::default()
        };
        secrets.create(&pp, &credentials).await.unwrap();
        let text = std::fs::read_to_string(repo("deploy/webhook.yaml")).unwrap();
        let mut configuration: MutatingWebhookConfiguration =
            documents(&text, "MutatingWebhookConfiguration").remove(0);
        let name = format!("imagemap-{system_ns}");
        configuration.metadata = ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        };
        for webhook in configuration.webhooks.iter_mut().flatten() {
            if let Some(service) = webhook.client_config.service.as_mut() {
                service.namespace.clone_from(&system_ns);
            }
            webhook.namespace_selector = Some(
                serde_json::from_value(json!({
                    "matchLabels": {"kubernetes.io/metadata.name": scenario_ns}
                }))
                .unwrap(),
            );
        }
        Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .create(&pp, &configuration)
            .await
            .unwrap();
        Install {
            system_ns,
            configuration: name,
        }
    }

    /// Deletes its webhook configuration (its namespaces stay, as every test's do).
    async fn remove(&self, admin: &Client) {
        let _ = Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .delete(&self.configuration, &DeleteParams::default())
            .await;
    }
}

/// Empties the install's webhook Secret and the configuration's `caBundle`, as installed.
async fn reset_webhook(admin: &Client, install: &Install) {
    Api::<Secret>::namespaced(admin.clone(), &install.system_ns)
        .patch(
            WEBHOOK_SECRET,
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": null})),
        )
        .await
        .unwrap();
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let names: Vec<String> = configurations
        .get(&install.configuration)
        .await
        .unwrap()
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.name)
        .collect();
    let webhooks: Vec<_> = names
        .iter()
        .map(|name| json!({"name": name, "clientConfig": {"caBundle": null}}))
        .collect();
    configurations
        .patch(
            &install.configuration,
            &PatchParams::default(),
            &Patch::Strategic(&json!({"webhooks": webhooks})),
        )
        .await
        .unwrap();
}

/// Whether the install's webhook Secret holds a serving certificate and every webhook of its
/// configuration trusts the Secret's CA.
async fn webhook_kept(admin: &Client, install: &Install) -> bool {
    let secret = Api::<Secret>::namespaced(admin.clone(), &install.system_ns)
        .get(WEBHOOK_SECRET)
        .await
        .unwrap();
    let data = secret.data.unwrap_or_default();
    let (Some(ca), Some(cert)) = (data.get("ca.crt"), data.get("tls.crt")) else {
        return false;
    };
    let configuration = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .get(&install.configuration)
        .await
        .unwrap();
    !cert.0.is_empty()
        && configuration
            .webhooks
            .unwrap_or_default()
            .iter()
            .all(|w| w.client_config.ca_bundle.as_ref() == Some(ca))
}

/// The main scenario in namespace `ns`, as the operator's ServiceAccount, its objects in
/// `install`, acting in every namespace or in `ns` alone (a ClusterImageMapping's status is
/// written only by an operator acting in every namespace: that step is left out then).
/// `Err` names the first step that did not happen within `limit`.
#[allow(clippy::too_many_arguments)] // One scenario, each part named where it is called.
async fn scenario(
    admin: &Client,
    config: kube::Config,
    private: &Private,
    lease: &str,
    limit: Duration,
    install: &Install,
    ns: &str,
    everywhere: bool,
) -> Result<(), String> {
    let ns = ns.to_string();
    reset_webhook(admin, install).await;
    // Published anew by each scenario's leader (created, then patched).
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &install.system_ns);
    let _ = configmaps
        .delete(PUBLISHED_DIGESTS, &DeleteParams::default())
        .await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"imagemap-rbac": ns}}})),
        )
        .await
        .unwrap();
    let _op = Operator::start_as(
        config,
        LeaderElection {
            lease_name: lease.into(),
            namespace: install.system_ns.clone(),
            identity: format!("{lease}-0"),
            timing: LeaseTiming::for_duration(Duration::from_secs(10)),
        },
        Private::options(&ns, install, everywhere),
    );
    let cluster_name = format!("{ns}-mirror");
    let cluster = |to: &str| -> ClusterImageMapping {
        serde_json::from_value(json!({
            "apiVersion": "imagemap.dev/v1alpha1", "kind": "ClusterImageMapping",
            "metadata": {"name": cluster_name},
            "spec": {"namespaceSelector": {"matchLabels": {"imagemap-rbac": ns}},
                     "rules": [{"match": {"prefix": "docker.io/neondatabase"}, "to": to}]}
        }))
        .unwrap()
    };
    let clusters: Api<ClusterImageMapping> = Api::all(admin.clone());
    clusters
        .create(&PostParams::default(), &cluster("mirror.io/neon"))
        .await
        .unwrap();
    let mapping: ImageMapping = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping", "metadata": {"name": "local"},
        "spec": {"rules": [{"match": {"repository": "busybox"}, "to": "x.io/busybox"},
                           {"match": {"repository": "acme/private"}, "to": private.tag, "followTag": true}]}
    }))
    .unwrap();
    let mappings: Api<ImageMapping> = Api::namespaced(admin.clone(), &ns);
    mappings
        .create(&PostParams::default(), &mapping)
        .await
        .unwrap();
    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": "vm"},
        "spec": {"liveReload": true, "guest": {"rootDisk": {"image": "neondatabase/vm-compute-node-v17:latest"}}}
    }))
    .unwrap();
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    vms.create(&PostParams::default(), &vm).await.unwrap();
    let private_vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": "private"},
        "spec": {"guest": {"rootDisk": {"image": "acme/private:latest"}}}
    }))
    .unwrap();
    vms.create(&PostParams::default(), &private_vm)
        .await
        .unwrap();
    // A Deployment whose pods opt into live reload; no webhook answers here, so its pod is
    // admitted unmapped: live reload evicts it (the Deployment is read, the pod evicted) and
    // tells its replacement, unmapped too, NotMappedAtAdmission.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", "imagemap.dev/live-reload": "true"}},
                              "spec": {"containers": [{"name": "app", "image": "busybox"}]}}},
    }))
    .unwrap();
    Api::<Deployment>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);

    let step = |what: &'static str, ok: bool| if ok { Ok(()) } else { Err(what.to_string()) };
    let deadline = tokio::time::Instant::now() + limit;
    let until = |what: &'static str| async move {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{what}: not within {limit:?}"));
        }
        Ok(())
    };
    let pod_disk = |pods: &[Pod]| {
        pods.first()
            .map(|p| pod_images(p).get("rootDisk").cloned().unwrap_or_default())
    };
    // Each step polls the API (as the admin) until it holds or the time is up.
    macro_rules! wait {
        ($what:literal, $check:expr) => {
            loop {
                if $check {
                    break;
                }
                until($what).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
    }
    let list = ListParams::default().labels(&format!("{VM_LABEL}=vm"));
    wait!("a pod with the mapped image", {
        let p = pods.list(&list).await.unwrap().items;
        p.len() == 1 && pod_disk(&p).as_deref() == Some("mirror.io/neon/vm-compute-node-v17:latest")
    });
    let private_list = ListParams::default().labels(&format!("{VM_LABEL}=private"));
    let pinned = format!("{}@{}", private.tag, private.digest);
    wait!("a pod pinned to the digest the private registry holds", {
        let p = pods.list(&private_list).await.unwrap().items;
        p.len() == 1 && pod_disk(&p).as_deref() == Some(pinned.as_str())
    });
    wait!("the verified digest published for every replica", {
        configmaps
            .get_opt(PUBLISHED_DIGESTS)
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .is_some_and(|data| data.values().any(|v| v.contains(&private.digest)))
    });
    wait!("VM status naming the ClusterImageMapping", {
        let v = vms.get("vm").await.unwrap();
        v.status.as_ref().is_some_and(|s| {
            s.resolved_images
                .iter()
                .any(|i| i.source.as_ref().is_some_and(|s| s.name == cluster_name))
        })
    });
    wait!(
        "ImageMapping status",
        mappings.get("local").await.unwrap().status.is_some()
    );
    wait!(
        "the webhook's Secret filled and its CA in the configuration",
        webhook_kept(admin, install).await
    );
    if everywhere {
        wait!(
            "ClusterImageMapping status",
            clusters.get(&cluster_name).await.unwrap().status.is_some()
        );
    }
    wait!("a PodCreated event", {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("PodCreated"))
    });
    clusters
        .patch(&cluster_name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"rules": [{"match": {"prefix": "docker.io/neondatabase"}, "to": "mirror2.io/neon"}]}})))
        .await
        .unwrap();
    wait!("the pod replaced for liveReload", {
        let p = pods.list(&list).await.unwrap().items;
        p.len() == 1
            && pod_disk(&p).as_deref() == Some("mirror2.io/neon/vm-compute-node-v17:latest")
    });
    wait!(
        "a live-reload pod evicted, its unmapped replacement told",
        {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("NotMappedAtAdmission"))
        }
    );
    let _ = clusters
        .delete(&cluster_name, &DeleteParams::default())
        .await;
    step("done", true)
}

fn documents<T: serde::de::DeserializeOwned>(text: &str, kind: &str) -> Vec<T> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| v["kind"] == kind)
        .map(|v| serde_json::from_value(v).unwrap())
        .collect()
}

/// A new ServiceAccount `name` in the operator's namespace, as a binding's subject.
async fn service_account(admin: &Client, name: &str) -> Subject {
    Api::<ServiceAccount>::namespaced(admin.clone(), SYSTEM_NS)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(SYSTEM_NS.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(SYSTEM_NS.into()),
        ..Default::default()
    }
}

/// A ServiceAccount bound to the shipped roles with one rule removed (`None`: all rules),
/// for `install`: the Roles of the operator's namespace in its system namespace, and the
/// webhook configuration the ClusterRole names, its own.
async fn account_without(
    admin: &Client,
    name: &str,
    drop_rule: Option<usize>,
    install: &Install,
) -> String {
    let text = std::fs::read_to_string(repo("deploy/operator-rbac.yaml")).unwrap();
    let mut cluster_role: ClusterRole = documents(&text, "ClusterRole").remove(0);
    let mut roles: Vec<Role> = documents(&text, "Role");
    // Rules are numbered over the ClusterRole, then each Role in turn.
    if let Some(mut i) = drop_rule {
        let cluster_rules = cluster_role.rules.as_mut().unwrap();
        if i < cluster_rules.len() {
            cluster_rules.remove(i);
        } else {
            i -= cluster_rules.len();
            for role in &mut roles {
                let role_rules = role.rules.as_mut().unwrap();
                if i < role_rules.len() {
                    role_rules.remove(i);
                    break;
                }
                i -= role_rules.len();
            }
        }
    }
    let meta = |ns: Option<&str>| ObjectMeta {
        name: Some(name.to_string()),
        namespace: ns.map(Into::into),
        ..Default::default()
    };
    let subject = service_account(admin, name).await;
    let pp = PostParams::default();
    cluster_role.metadata = meta(None);
    for rule in cluster_role.rules.iter_mut().flatten() {
        if let Some(names) = rule.resource_names.as_mut() {
            for name in names.iter_mut().filter(|n| *n == WEBHOOK_CONFIGURATION) {
                name.clone_from(&install.configuration);
            }
        }
    }
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &cluster_role)
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &ClusterRoleBinding {
                metadata: meta(None),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: name.into(),
                },
                subjects: Some(vec![subject.clone()]),
            },
        )
        .await
        .unwrap();
    for (j, mut role) in roles.into_iter().enumerate() {
        let role_name = format!("{name}-{j}");
        // In the namespace the shipped Role is in (the operator's — the install's system
        // namespace —, or kube-public).
        let shipped_ns = role.metadata.namespace.clone().unwrap();
        let ns = if shipped_ns == SYSTEM_NS {
            install.system_ns.clone()
        } else {
            shipped_ns
        };
        role.metadata = ObjectMeta {
            name: Some(role_name.clone()),
            namespace: Some(ns.clone()),
            ..Default::default()
        };
        Api::<Role>::namespaced(admin.clone(), &ns)
            .create(&pp, &role)
            .await
            .unwrap();
        Api::<RoleBinding>::namespaced(admin.clone(), &ns)
            .create(
                &pp,
                &RoleBinding {
                    metadata: role.metadata.clone(),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: role_name,
                    },
                    subjects: Some(vec![subject.clone()]),
                },
            )
            .await
            .unwrap();
    }
    name.to_string()
}

fn describe(rule: &k8s_openapi::api::rbac::v1::PolicyRule) -> String {
    format!(
        "{:?} {:?} {:?}",
        rule.api_groups.clone().unwrap_or_default(),
        rule.resources.clone().unwrap_or_default(),
        rule.verbs
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a control plane: run scripts/test"]
async fn the_shipped_rbac_is_enough_and_every_rule_is_needed() {
    let admin = client().await;
    install(&admin).await;
    let run_id = std::process::id();

    // The shipped ServiceAccount itself, acting in every namespace.
    let private = Private::start(&admin).await;
    let config = config_for("imagemap").await;
    let ns = fresh_namespace(&admin, "rbac").await;
    scenario(
        &admin,
        config,
        &private,
        &format!("rbac-shipped-{run_id}"),
        WAIT,
        &Install::shipped(),
        &ns,
        true,
    )
    .await
    .expect("the shipped RBAC is enough");
    // The leader wrote the webhook's Secret and caBundle: the install shows no drift.
    let diff = kubectl(&["diff", "--server-side", "-k", "deploy/"]);
    assert!(
        diff.status.success(),
        "kubectl diff --server-side -k deploy/ after the leader kept the webhook:\n{}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );

    let text = std::fs::read_to_string(repo("deploy/operator-rbac.yaml")).unwrap();
    let rules: Vec<_> = documents::<ClusterRole>(&text, "ClusterRole")[0]
        .rules
        .clone()
        .unwrap()
        .into_iter()
        .chain(
            documents::<Role>(&text, "Role")
                .into_iter()
                .flat_map(|r| r.rules.unwrap()),
        )
        .collect();
    // Rules this scenario cannot exercise: no OwnerReferencesPermissionEnforcement
    // admission plugin runs here, so nothing needs virtualmachines/finalizers; NeonVM's two
    // rules are not reached by this scenario (no NeonVM runs in it).
    let unprovable = [
        "virtualmachines/finalizers",
        "virtualmachinemigrations",
        "customresourcedefinitions",
    ];
    // Each other rule removed in turn, every scenario at once: each on an install of its
    // own, its operator acting in its namespace alone, so none does another's work. (The
    // rule that writes mapping statuses is shown needed by the ImageMapping's.)
    let provable: Vec<(usize, &k8s_openapi::api::rbac::v1::PolicyRule)> = rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| {
            !rule
                .resources
                .iter()
                .flatten()
                .any(|r| unprovable.contains(&r.as_str()))
        })
        .collect();
    let without = |i: usize| {
        let (admin, private) = (&admin, &private);
        async move {
            let ns = fresh_namespace(admin, "rbac").await;
            let install = Install::own(admin, &ns).await;
            let name = format!("imagemap-minus-{i}-{run_id}");
            let name = account_without(admin, &name, Some(i), &install).await;
            let config = config_for(&name).await;
            let lease = format!("rbac-minus-{i}-{run_id}");
            let result = scenario(
                admin,
                config,
                private,
                &lease,
                Duration::from_secs(15),
                &install,
                &ns,
                false,
            )
            .await;
            install.remove(admin).await;
            result
        }
    };
    let results = futures::future::join_all(provable.iter().map(|(i, _)| without(*i))).await;
    let mut report: Vec<String> = rules
        .iter()
        .filter(|rule| {
            rule.resources
                .iter()
                .flatten()
                .any(|r| unprovable.contains(&r.as_str()))
        })
        .map(|rule| format!("{}: not exercised here", describe(rule)))
        .collect();
    for ((_, rule), result) in provable.iter().zip(results) {
        let failed_at = result.expect_err(&format!(
            "the scenario passed without rule {}",
            describe(rule)
        ));
        report.push(format!(
            "{}: removing it fails at \"{failed_at}\"",
            describe(rule)
        ));
    }
    println!("RBAC rules:\n{}", report.join("\n"));
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn with_namespaces_the_operator_needs_rights_only_in_them() {
    let admin = client().await;
    install(&admin).await;
    let ns = fresh_namespace(&admin, "rbac-scoped").await;
    let name = format!("imagemap-scoped-{ns}");
    let meta = |namespace: Option<&str>| ObjectMeta {
        name: Some(name.clone()),
        namespace: namespace.map(Into::into),
        ..Default::default()
    };
    let subject = service_account(&admin, &name).await;
    let pp = PostParams::default();
    // Cluster-wide: only reading namespaces and ClusterImageMappings.
    let cluster_role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["imagemap.dev"], "resources": ["clusterimagemappings"], "verbs": ["list", "watch"]}
        ]
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &cluster_role)
        .await
        .unwrap();
    let binding = |kind: &str, role: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: role.into(),
    };
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &ClusterRoleBinding {
                metadata: meta(None),
                role_ref: binding("ClusterRole", &name),
                subjects: Some(vec![subject.clone()]),
            },
        )
        .await
        .unwrap();
    // In the one namespace: the shipped operator role, bound there only.
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(
            &pp,
            &RoleBinding {
                metadata: meta(Some(&ns)),
                role_ref: binding("ClusterRole", "imagemap-operator"),
                subjects: Some(vec![subject]),
            },
        )
        .await
        .unwrap();
    let config = config_for(&name).await;
    let _op = Operator::start_with(config, &[&ns], imagemap::operator::Options::default());
    let mapping: ImageMapping = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "ImageMapping", "metadata": {"name": "local"},
        "spec": {"rules": [{"match": {"repository": "busybox"}, "to": "x.io/busybox"}]}
    }))
    .unwrap();
    Api::<ImageMapping>::namespaced(admin.clone(), &ns)
        .create(&pp, &mapping)
        .await
        .unwrap();
    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "imagemap.dev/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": "vm"},
        "spec": {"guest": {"rootDisk": {"image": "busybox:1.36"}}}
    }))
    .unwrap();
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    vms.create(&pp, &vm).await.unwrap();
    // Watches of all namespaces would be refused: the pod and the status show the
    // operator watched, wrote and resolved in its namespace.
    wait_list(
        Api::<Pod>::namespaced(admin.clone(), &ns),
        kube::runtime::watcher::Config::default().labels(&format!("{VM_LABEL}=vm")),
        "the runner pod with the mapped image",
        |pods| {
            pods.len() == 1
                && pod_images(&pods[0])
                    .values()
                    .any(|image| image == "x.io/busybox:1.36")
        },
    )
    .await;
    wait_for(vms, "vm", |vm: Option<&VirtualMachine>| {
        vm.and_then(|vm| vm.status.as_ref())
            .is_some_and(|s| !s.resolved_images.is_empty())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn namespace_editors_write_image_mappings_but_not_cluster_ones() {
    let admin = client().await;
    install(&admin).await;
    let ns = fresh_namespace(&admin, "rbac-edit").await;
    let user = format!("alice-{ns}");
    // The built-in `edit` role, bound in one namespace. imagemap's rules reach it through
    // ClusterRole aggregation (the control plane runs that controller).
    kubectl_ok(&[
        "create",
        "rolebinding",
        "alice-edit",
        "--clusterrole=edit",
        &format!("--user={user}"),
        "-n",
        &ns,
    ]);
    let can = |verb: &str, resource: &str, namespace: Option<&str>| {
        let mut args = vec!["auth", "can-i", verb, resource, "--as", user.as_str()];
        if let Some(n) = namespace {
            args.extend(["-n", n]);
        }
        kubectl(&args).status.success()
    };
    wait_list(
        Api::<ClusterRole>::all(admin.clone()),
        kube::runtime::watcher::Config::default().fields("metadata.name=edit"),
        "imagemap-edit aggregated into edit",
        |roles| {
            roles.iter().any(|r| {
                r.rules.iter().flatten().any(|rule| {
                    rule.api_groups
                        .iter()
                        .flatten()
                        .any(|g| g == "imagemap.dev")
                        && rule.verbs.iter().any(|v| v == "create")
                })
            })
        },
    )
    .await;
    assert!(can("create", "imagemappings.imagemap.dev", Some(&ns)));
    assert!(can("create", "virtualmachines.imagemap.dev", Some(&ns)));
    assert!(can("get", "imagemappings.imagemap.dev", Some(&ns)));
    assert!(
        !can("create", "imagemappings.imagemap.dev", Some("default")),
        "only in their namespace"
    );
    assert!(!can("create", "clusterimagemappings.imagemap.dev", None));
    let status = kubectl(&[
        "auth",
        "can-i",
        "patch",
        "virtualmachines.imagemap.dev",
        "--subresource=status",
        "--as",
        &user,
        "-n",
        &ns,
    ]);
    assert!(!status.status.success(), "status is the operator's");
    // And for real, as that user: the example mapping, moved into their namespace.
    let yaml = std::fs::read_to_string(repo("examples/tilt-dev-mapping.yaml"))
        .unwrap()
        .replace("namespace: dev", &format!("namespace: {ns}"));
    let tmp = std::env::temp_dir().join(format!("{ns}-mapping.yaml"));
    std::fs::write(&tmp, yaml).unwrap();
    let created = kubectl(&["create", "--as", &user, "-f", tmp.to_str().unwrap()]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let cluster = kubectl(&[
        "create",
        "--as",
        &user,
        "-f",
        "examples/registry-mirror.yaml",
        "--dry-run=server",
    ]);
    assert!(!cluster.status.success());
    assert!(
        String::from_utf8_lossy(&cluster.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&cluster.stderr)
    );
}
