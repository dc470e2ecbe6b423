//! The Helm chart (`charts/imagemap`), with Helm 4 built from its Go module by
//! `scripts/control-plane build`: lint, the same objects as the Kustomize base, every
//! operator flag reachable from values and the values schema matching the flags — and on the
//! control plane, `helm install --wait`, an upgrade that changes a flag and a CRD, a rollout,
//! and an uninstall that keeps the CRDs and users' objects — and the webhook's Secret and
//! configuration, kept by a running leader, removed by an upgrade that disables the webhook,
//! a rollback to a release without it and the uninstall, and never recreated. Run with
//! `scripts/test`.

#![allow(clippy::unwrap_used)] // test code
// Each scenario reads top to bottom, as a user would go through it.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::time::Instant;

use imagemap::core::api::ImageMapping;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use support::*;

const CHART: &str = "charts/imagemap";

fn helm(args: &[&str]) -> Output {
    Command::new("helm")
        .args(args)
        .current_dir(REPO)
        .output()
        .expect("helm (built by scripts/control-plane build, on PATH in scripts/test)")
}

fn helm_ok(args: &[&str]) -> String {
    let out = helm(args);
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The objects of a multi-document YAML stream, by (kind, namespace, name).
fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .filter_map(|doc| {
            let value: Value = serde::Deserialize::deserialize(doc).unwrap();
            (!value.is_null()).then_some(value)
        })
        .map(|o| {
            let key = (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            );
            (key, o)
        })
        .collect()
}

/// The chart rendered with `values` (`--set-json` pairs), as the release `imagemap` in
/// `imagemap-system`.
fn render(values: &[String]) -> String {
    let mut args = vec!["template", "imagemap", CHART, "-n", "imagemap-system"];
    for v in values {
        args.extend(["--set-json", v]);
    }
    helm_ok(&args)
}

#[test]
#[ignore = "needs helm: run scripts/test"]
fn the_chart_lints_strictly() {
    helm_ok(&["lint", "--strict", CHART]);
}

#[test]
#[ignore = "needs helm: run scripts/test"]
fn the_default_render_is_the_kustomize_base_plus_the_crds() {
    let chart = objects(&render(&[]));
    let base = objects(&kubectl_ok(&["kustomize", "deploy/"]));
    // The base makes the namespace (`kubectl apply -k` needs it); Helm is told it
    // (`--create-namespace`). The CRDs come with the chart, apart from the base.
    let (crds, rest): (BTreeMap<_, _>, BTreeMap<_, _>) = chart
        .into_iter()
        .partition(|(k, _)| k.0 == "CustomResourceDefinition");
    let base: BTreeMap<_, _> = base
        .into_iter()
        .filter(|(k, _)| k.0 != "Namespace")
        .collect();
    let keys =
        |m: &BTreeMap<(String, String, String), Value>| m.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(keys(&rest), keys(&base), "the same objects");
    for (key, object) in &base {
        assert_eq!(
            &rest[key], object,
            "{key:?} differs between the chart and deploy/"
        );
    }
    // The chart's CRDs are crds/'s, kept on uninstall.
    let shipped = imagemap::core::crd_yaml::all();
    assert_eq!(crds.len(), shipped.len());
    for crd in shipped {
        let name = crd.metadata.name.clone().unwrap();
        let rendered = &crds[&(
            "CustomResourceDefinition".to_string(),
            String::new(),
            name.clone(),
        )];
        assert_eq!(
            rendered["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
        assert_eq!(
            rendered["spec"],
            serde_json::to_value(&crd.spec).unwrap(),
            "{name}"
        );
    }
}

/// `imagemap run`'s flags, from its help.
fn run_flags() -> BTreeSet<String> {
    let help = Command::new(env!("CARGO_BIN_EXE_imagemap"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&help.stdout)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| l.split([' ', '=', '<']).next().unwrap().to_string())
        .filter(|f| f != "help")
        .collect()
}

fn camel(flag: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in flag.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
#[ignore = "needs helm: run scripts/test"]
fn every_operator_flag_is_reachable_from_values_and_the_schema_matches_the_flags() {
    let flags = run_flags();
    assert!(
        flags.contains("allowed-registries") && flags.len() > 15,
        "{flags:?}"
    );
    // Notifications come from a Secret (notifications.*); the other flags are operator.*.
    let notification_flags = [
        "registry-notifications-token-file",
        "registry-notifications-addr",
    ];
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{REPO}/{CHART}/values.schema.json")).unwrap(),
    )
    .unwrap();
    let in_schema: BTreeSet<String> = schema["properties"]["operator"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "extraArgs")
        .cloned()
        .collect();
    // (The repeatable --namespace is the list `namespaces`.)
    let expected: BTreeSet<String> = flags
        .iter()
        .filter(|f| !notification_flags.contains(&f.as_str()))
        .map(|f| {
            if f == "namespace" {
                "namespaces".into()
            } else {
                camel(f)
            }
        })
        .collect();
    assert_eq!(
        in_schema, expected,
        "values.schema.json's operator.* and `imagemap run`'s flags"
    );
    assert!(schema["properties"]["notifications"]["properties"]["addr"].is_object());

    // Every flag set through values reaches the container's arguments.
    let values = json!({
        "defaultRunnerImage": "r.io/runner:1", "namespaces": ["a", "b"],
        "allowedRegistries": ["x.io", "y.io"], "maxRecreatesPerMinute": 7, "concurrency": 9,
        "tagPollInterval": "45s", "podCountSeconds": 120, "insecureRegistries": ["x.io"],
        "registryCredentialsSecret": "creds", "registryCredentialsNamespaces": ["ci"],
        "healthAddr": "0.0.0.0:9090", "leaderElect": true, "leaseNamespace": "leases",
        "leaseName": "lead", "leaseDurationSeconds": 20, "logFormat": "plain",
        "localRegistryVantage": "host",
        "webhookAddr": "0.0.0.0:9443", "webhookCertDir": "/certs", "webhookUrl": "https://x:1",
        "webhookConfiguration": "w", "webhookDrainSeconds": 5, "webhookExcludeNamespaces": ["ops"],
        "neonvmDefaultRunnerImage": "r.io/neonvm-runner:1",
    });
    let mut sets: Vec<String> = values
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("operator.{k}={v}"))
        .collect();
    sets.push("notifications.enabled=true".into());
    let rendered = objects(&render(&sets));
    let deployment = &rendered[&(
        "Deployment".into(),
        "imagemap-system".into(),
        "imagemap".into(),
    )];
    let args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for flag in &flags {
        assert!(
            args.iter()
                .any(|a| a == &format!("--{flag}") || a.starts_with(&format!("--{flag}="))),
            "--{flag} not in {args:?}"
        );
    }
    assert!(
        args.contains(&"--namespace=a".to_string()) && args.contains(&"--namespace=b".to_string())
    );
    assert!(
        args.contains(&"--allowed-registries=x.io,y.io".to_string()),
        "{args:?}"
    );
    // Acting in named namespaces binds the operator there, not cluster-wide.
    assert!(rendered.contains_key(&("RoleBinding".into(), "a".into(), "imagemap-operator".into())));
    assert!(!rendered.contains_key(&(
        "ClusterRoleBinding".into(),
        String::new(),
        "imagemap-operator".into()
    )));
    // And the notification endpoint its Service and port.
    assert!(rendered.contains_key(&(
        "Service".into(),
        "imagemap-system".into(),
        "imagemap-notifications".into()
    )));

    // The schema refuses what the operator would.
    let refused = helm(&[
        "template",
        "imagemap",
        CHART,
        "--set",
        "operator.logFormat=xml",
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("logFormat"));
    let refused = helm(&[
        "template",
        "imagemap",
        CHART,
        "--set",
        "operator.noSuchFlag=1",
    ]);
    assert!(!refused.status.success(), "unknown values are refused");
}

/// Puts the shipped CRDs back (a test changed one).
async fn restore_crds(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for mut crd in imagemap::core::crd_yaml::all() {
        let name = crd.metadata.name.clone().unwrap();
        let current = api.get(&name).await.unwrap();
        crd.metadata.resource_version = current.metadata.resource_version;
        crd.metadata.annotations = current.metadata.annotations;
        crd.metadata.labels = current.metadata.labels;
        api.replace(&name, &PostParams::default(), &crd)
            .await
            .unwrap();
    }
}

/// The release's webhook Secret and configuration (the chart's names).
struct ReleaseWebhook {
    secrets: Api<Secret>,
    configurations: Api<MutatingWebhookConfiguration>,
}

/// What the leader logs when the Secret or configuration is gone.
const WEBHOOK_ABSENT: &str = "the webhook's Secret or configuration does not exist";

impl ReleaseWebhook {
    fn new(client: &kube::Client, ns: &str) -> ReleaseWebhook {
        ReleaseWebhook {
            secrets: Api::namespaced(client.clone(), ns),
            configurations: Api::all(client.clone()),
        }
    }

    /// Whether the Secret holds a serving certificate and every webhook of the
    /// configuration trusts its CA.
    async fn kept(&self) -> bool {
        let (Some(secret), Some(configuration)) = (
            self.secrets.get_opt("imagemap-webhook-tls").await.unwrap(),
            self.configurations.get_opt("imagemap").await.unwrap(),
        ) else {
            return false;
        };
        let data = secret.data.unwrap_or_default();
        let (Some(ca), Some(cert)) = (data.get("ca.crt"), data.get("tls.crt")) else {
            return false;
        };
        !cert.0.is_empty()
            && configuration
                .webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref() == Some(ca))
    }

    async fn wait_kept(&self, leader: &OperatorProcess) {
        let deadline = Instant::now() + WAIT;
        while !self.kept().await {
            assert!(
                Instant::now() < deadline,
                "the leader keeps the release's webhook: not within {WAIT:?}\n{}",
                leader.logs()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Waits until the leader saw the webhook gone (once more than `seen` times), then
    /// checks that neither object exists: it recreated neither.
    async fn wait_gone(&self, leader: &OperatorProcess, seen: usize) {
        wait_until(WAIT, "the leader sees the webhook gone", || {
            leader.logs().matches(WEBHOOK_ABSENT).count() > seen
        })
        .await;
        assert!(
            self.secrets
                .get_opt("imagemap-webhook-tls")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            self.configurations
                .get_opt("imagemap")
                .await
                .unwrap()
                .is_none()
        );
    }
}

#[tokio::test]
#[ignore = "needs a control plane: run scripts/test"]
async fn helm_installs_upgrades_rolls_and_uninstalls_as_users_do() {
    let client = client().await;
    install_crds(&client).await;
    let ns = fresh_namespace(&client, "helm").await;
    let users = fresh_namespace(&client, "helm-users").await;

    // Install, waiting as Helm 4 does (kstatus): the CRDs the test bed applied with kubectl
    // are taken over (their fields too), as a user moving to the chart would.
    let started = Instant::now();
    helm_ok(&[
        "install",
        "imagemap",
        CHART,
        "-n",
        &ns,
        "--wait",
        "--timeout",
        "3m",
        "--take-ownership",
        "--force-conflicts",
    ]);
    let installed = started.elapsed();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment = deployments.get("imagemap").await.unwrap();
    assert_eq!(kstatus(&[&deployment]), ["Current"]);
    // The webhook as installed: an empty Secret and a configuration without caBundle, which
    // a leader (this process, as the release's replicas would run it) keeps.
    let webhook = ReleaseWebhook::new(&client, &ns);
    let shipped = webhook.secrets.get("imagemap-webhook-tls").await.unwrap();
    assert!(shipped.data.is_none());
    let configuration = webhook.configurations.get("imagemap").await.unwrap();
    let first = &configuration.webhooks.unwrap()[0];
    assert!(first.client_config.ca_bundle.is_none());
    assert_eq!(
        first.client_config.service.as_ref().unwrap().namespace,
        ns,
        "the configuration calls the release's Service"
    );
    let webhook_addr = format!("127.0.0.1:{}", free_port());
    let leader = OperatorProcess::start_in(
        &ns,
        &[
            "--namespace",
            &users,
            "--webhook-addr",
            &webhook_addr,
            "--webhook-secret",
            "imagemap-webhook-tls",
        ],
    )
    .await;
    webhook.wait_kept(&leader).await;
    let mappings: Api<ImageMapping> = Api::namespaced(client.clone(), &users);
    mappings
        .create(
            &PostParams::default(),
            &support::vms::mapping("kept", &support::vms::tilt_rule("localhost:5000/app:1")),
        )
        .await
        .unwrap();

    // Upgrade: a flag, and a field of a CRD, from a newer chart.
    let newer = std::env::temp_dir().join(format!("{ns}-chart"));
    let _ = std::fs::remove_dir_all(&newer);
    let copied = Command::new("cp")
        .args(["-r", CHART])
        .arg(&newer)
        .current_dir(REPO)
        .status()
        .unwrap();
    assert!(copied.success());
    let crds = newer.join("templates/crds.yaml");
    let text = std::fs::read_to_string(&crds).unwrap();
    assert!(text.contains("Higher priority wins"));
    std::fs::write(
        &crds,
        text.replacen("Higher priority wins", "Higher priority (upgraded) wins", 1),
    )
    .unwrap();
    // (kubectl, which applied the CRDs first, still shares their fields: the first upgrade
    // that changes them takes them over.)
    helm_ok(&[
        "upgrade",
        "imagemap",
        newer.to_str().unwrap(),
        "-n",
        &ns,
        "--reuse-values",
        "--set",
        "operator.maxRecreatesPerMinute=7",
        "--wait",
        "--timeout",
        "3m",
        "--force-conflicts",
    ]);
    let deployment = deployments.get("imagemap").await.unwrap();
    let args =
        serde_json::to_value(&deployment.spec.unwrap().template.spec.unwrap().containers[0].args)
            .unwrap();
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--max-recreates-per-minute=7")),
        "{args}"
    );
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("imagemappings.imagemap.dev")
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&crd.spec)
            .unwrap()
            .contains("Higher priority (upgraded) wins"),
        "helm upgrade upgraded the CRD"
    );

    // An upgrade that disables the webhook removes it; a rollback brings it back (the
    // leader keeps it again), and a rollback to a release without it removes it again.
    helm_ok(&[
        "upgrade",
        "imagemap",
        newer.to_str().unwrap(),
        "-n",
        &ns,
        "--reuse-values",
        "--set",
        "webhook.enabled=false",
        "--wait",
        "--timeout",
        "3m",
    ]);
    webhook.wait_gone(&leader, 0).await;
    helm_ok(&[
        "rollback",
        "imagemap",
        "2",
        "-n",
        &ns,
        "--wait",
        "--timeout",
        "3m",
    ]);
    webhook.wait_kept(&leader).await;
    helm_ok(&[
        "rollback",
        "imagemap",
        "3",
        "-n",
        &ns,
        "--wait",
        "--timeout",
        "3m",
    ]);
    webhook.wait_gone(&leader, 1).await;
    helm_ok(&[
        "rollback",
        "imagemap",
        "4",
        "-n",
        &ns,
        "--wait",
        "--timeout",
        "3m",
    ]);
    webhook.wait_kept(&leader).await;

    // A rollout: new replicas first, then the old ones go.
    let started = Instant::now();
    kubectl_ok(&["rollout", "restart", "deployment/imagemap", "-n", &ns]);
    kubectl_ok(&[
        "rollout",
        "status",
        "deployment/imagemap",
        "-n",
        &ns,
        "--timeout=3m",
    ]);
    let rolled = started.elapsed();
    let deployment = deployments.get("imagemap").await.unwrap();
    assert_eq!(kstatus(&[&deployment]), ["Current"]);

    // Uninstall: the operator goes; the CRDs and users' objects stay.
    helm_ok(&[
        "uninstall",
        "imagemap",
        "-n",
        &ns,
        "--wait",
        "--timeout",
        "3m",
    ]);
    assert!(deployments.get_opt("imagemap").await.unwrap().is_none());
    webhook.wait_gone(&leader, 2).await;
    for crd in imagemap::core::crd_yaml::all() {
        let name = crd.metadata.name.unwrap();
        assert!(
            Api::<CustomResourceDefinition>::all(client.clone())
                .get_opt(&name)
                .await
                .unwrap()
                .is_some(),
            "{name} kept"
        );
    }
    assert!(
        mappings.get_opt("kept").await.unwrap().is_some(),
        "users' objects kept"
    );
    restore_crds(&client).await;
    let _ = std::fs::remove_dir_all(&newer);
    println!(
        "helm install --wait: {installed:.1?}; kubectl rollout restart to complete: {rolled:.1?}"
    );
}
