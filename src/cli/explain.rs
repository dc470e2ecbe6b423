//! `imagemap explain KIND/NAME`: why a pod runs what it runs. For each container slot, what
//! it asked for, what it runs, what the rules in force make of it now and by which rule, and
//! one verdict with its evidence — read from the cluster, read-only, and judged by the one
//! admission view (`core::explain`). For a workload, its pod template, then the pods it owns
//! in one line each (at most 20, then counts).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::cluster::{self, Target, runtime};
use super::explain_output::{Explained, to_json, to_table};
use super::explain_reads::{self, Mappings};
use super::resolve_args::{EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, compile_options};
use crate::core::admission::pod_view::Admission;
use crate::core::api::VirtualMachine;
use crate::core::excerpt::excerpt;
use crate::core::explain::explained_pod::{Explaining, SlotExplanation, Unread, explain};
use crate::core::explain::explained_vm::explain_vm;
use crate::core::explain::pod_facts::PodFacts;
use crate::core::explain::sent_namespaces::SentNamespaces;
use crate::core::pod_template::{PodTemplate, TemplateKind};
use crate::core::rules::{RuleRef, RuleSet};
use crate::core::slot_resolution::namespace_labels;
use crate::core::vm_images;
use crate::operator::Followed;

/// Output format of `imagemap explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainOutput {
    Table,
    Json,
    Yaml,
}

/// Arguments of `imagemap explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// What to explain: pod/NAME, deploy/NAME, sts/NAME, ds/NAME, rs/NAME, job/NAME,
    /// cronjob/NAME, vm/NAME (imagemap's VirtualMachine) or
    /// virtualmachines.vm.neon.tech/NAME (NeonVM's).
    pub target: String,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ExplainOutput::Table)]
    pub output: ExplainOutput,
    /// Exit 1 when a slot is stale, refused, not mapped at admission or unpinned.
    #[arg(long)]
    pub exit_code: bool,
    /// The operator's `--allowed-registries`, so that what it refuses shows as refused
    /// (what the mappings' statuses say refused shows so either way).
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub allowed_registries: Vec<String>,
    /// The operator's namespace, where it publishes the digests of followed tags.
    #[arg(long, value_name = "NAMESPACE", default_value = "imagemap-system")]
    pub operator_namespace: String,
    /// The webhook configuration the operator's install ships.
    #[arg(long, value_name = "NAME", default_value = "imagemap")]
    pub webhook_configuration: String,
    /// Runner image of imagemap's VirtualMachines that name none (the operator's flag).
    #[arg(long, default_value = vm_images::DEFAULT_RUNNER_IMAGE)]
    pub default_runner_image: String,
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// What KIND/NAME names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Workload(TemplateKind),
    Vm,
    NeonVm,
}

fn parse_target(target: &str) -> Result<(Kind, String), String> {
    let (kind, name) = target
        .split_once('/')
        .filter(|(_, name)| !name.is_empty())
        .ok_or_else(|| format!("{target:?}: give KIND/NAME, for example pod/web-0"))?;
    let kind = match kind.to_ascii_lowercase().as_str() {
        "pod" | "pods" | "po" => Kind::Pod,
        "deploy" | "deployment" | "deployments" => Kind::Workload(TemplateKind::Deployment),
        "sts" | "statefulset" | "statefulsets" => Kind::Workload(TemplateKind::StatefulSet),
        "ds" | "daemonset" | "daemonsets" => Kind::Workload(TemplateKind::DaemonSet),
        "rs" | "replicaset" | "replicasets" => Kind::Workload(TemplateKind::ReplicaSet),
        "job" | "jobs" => Kind::Workload(TemplateKind::Job),
        "cronjob" | "cronjobs" | "cj" => Kind::Workload(TemplateKind::CronJob),
        "vm" | "virtualmachine" | "virtualmachines" | "imvm" | "virtualmachines.imagemap.dev" => {
            Kind::Vm
        }
        "virtualmachine.vm.neon.tech" | "virtualmachines.vm.neon.tech" => Kind::NeonVm,
        other => {
            return Err(format!(
                "{other:?} is not a kind explain reads: pod, deploy, sts, ds, rs, job, cronjob, \
                 vm, virtualmachines.vm.neon.tech"
            ));
        }
    };
    Ok((kind, name.to_string()))
}

/// Runs the command; returns the exit status.
pub fn run(args: &ExplainArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let (kind, name) = match parse_target(&args.target) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return EXIT_USAGE;
        }
    };
    let Some(runtime) = runtime(err) else {
        return EXIT_USAGE;
    };
    let explained = match runtime.block_on(read_and_explain(args, kind, &name)) {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return EXIT_USAGE;
        }
    };
    for note in &explained.notes {
        let _ = writeln!(err, "note: {note}");
    }
    let written = match args.output {
        ExplainOutput::Table => out.write_all(to_table(&explained).as_bytes()),
        ExplainOutput::Json => serde_json::to_writer_pretty(&mut *out, &to_json(&explained))
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
        ExplainOutput::Yaml => serde_yaml_ng::to_string(&to_json(&explained))
            .map_err(std::io::Error::other)
            .and_then(|text| out.write_all(text.as_bytes())),
    };
    if let Err(e) = written {
        let _ = writeln!(err, "error: writing output: {e}");
        return EXIT_USAGE;
    }
    let attention = explained
        .slots
        .iter()
        .chain(explained.pods.iter().flat_map(|(_, s)| s))
        .any(|s| s.verdict.needs_attention());
    if args.exit_code && attention {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }
}

/// What explain needs besides the object, read once.
struct Context {
    rules: RuleSet,
    mappings: Option<Mappings>,
    labels: Option<BTreeMap<String, String>>,
    rules_unread: Option<Unread>,
    sent: Result<SentNamespaces, Unread>,
    digests: HashMap<Followed, String>,
}

async fn context(
    client: &Client,
    args: &ExplainArgs,
    namespace: &str,
    notes: &mut Vec<String>,
) -> Context {
    let mappings = explain_reads::mappings(client, namespace).await;
    let labels = explain_reads::namespace_labels(client, namespace).await;
    let rules_unread = match (&mappings, &labels) {
        (Err(u), _) | (_, Err(u)) => Some(u.clone()),
        _ => None,
    };
    let mappings = mappings.ok();
    let rules = RuleSet::compile(
        mappings.as_ref().map_or(&[][..], |m| m.inputs.as_slice()),
        &compile_options(&args.allowed_registries),
    );
    if args.allowed_registries.is_empty() {
        notes.push(
            "without --allowed-registries every registry is taken as allowed: rules the \
             operator refused show refused by their mapping's status"
                .into(),
        );
    }
    Context {
        rules,
        mappings,
        labels: labels.ok(),
        rules_unread,
        sent: explain_reads::sent_namespaces(client, &args.webhook_configuration).await,
        digests: explain_reads::digests(client, &args.operator_namespace, notes).await,
    }
}

impl Context {
    /// `f` given what explain answers from.
    fn explaining<R>(&self, namespace: &str, f: impl FnOnce(&Explaining<'_>) -> R) -> R {
        let none = BTreeMap::new();
        let labels_of = |ns: &str| namespace_labels(ns, self.labels.as_ref().unwrap_or(&none));
        let digest_of = |reference: &str, rule: Option<&RuleRef>, ns: &str| {
            self.digests
                .get(&Followed::of(reference, rule, ns))
                .cloned()
        };
        let no_runner = |_: &str, _: &str| None;
        let admission = Admission {
            rules: &self.rules,
            namespace_labels: &labels_of,
            digest_of: &digest_of,
            runner_images: &no_runner,
        };
        let status_problem =
            |rule: &RuleRef| self.mappings.as_ref().and_then(|m| m.status_problem(rule));
        let mapping_created = |key: &crate::core::rules::MappingKey| {
            self.mappings
                .as_ref()
                .and_then(|m| m.created.get(key).copied())
        };
        let _ = namespace;
        f(&Explaining {
            admission: &admission,
            sent: self.sent.as_ref().ok(),
            rules_unread: self.rules_unread.as_ref(),
            scope_unread: self.sent.as_ref().err(),
            status_problem: &status_problem,
            mapping_created: &mapping_created,
        })
    }
}

/// The object named, its pods, and what explain makes of them.
async fn read_and_explain(args: &ExplainArgs, kind: Kind, name: &str) -> Result<Explained, String> {
    let target = Target {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let (client, default_namespace) = cluster::connect(&target).await?;
    let namespace = args.namespace.clone().unwrap_or(default_namespace);
    let mut notes = Vec::new();
    let ctx = context(&client, args, &namespace, &mut notes).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let got = |what: &str, e: kube::Error| {
        format!("{what} {namespace}/{name}: {}", excerpt(&e.to_string()))
    };
    let mut explained = Explained {
        kind: "",
        namespace: namespace.clone(),
        name: name.to_string(),
        slots: Vec::new(),
        pods: Vec::new(),
        notes: Vec::new(),
    };
    match kind {
        Kind::Pod => {
            let pod = pods.get(name).await.map_err(|e| got("pod", e))?;
            explained.kind = "Pod";
            explained.slots = explain_pod(&client, &ctx, &pod).await;
        }
        Kind::Workload(template_kind) => {
            let object = workload(&client, &namespace, template_kind, name)
                .await
                .map_err(|e| got(template_kind.name(), e))?;
            let template = PodTemplate::read(template_kind, &object, &namespace)?;
            explained.kind = template_kind.name();
            explained.slots = ctx.explaining(&namespace, |x| {
                explain(x, &PodFacts::of_template(&template))
            });
            match owned_pods(&client, &pods, template_kind, &object).await {
                Ok(owned) => {
                    for pod in owned {
                        let slots = explain_pod(&client, &ctx, &pod).await;
                        explained.pods.push((pod.name_any(), slots));
                    }
                }
                Err(e) => notes.push(format!(
                    "its pods cannot be listed ({}): the template is explained alone",
                    excerpt(&e.to_string())
                )),
            }
        }
        Kind::Vm => {
            explained.kind = "VirtualMachine";
            explained.slots = explain_own_vm(&client, &ctx, args, &namespace, name, &mut notes)
                .await
                .map_err(|e| got("virtualmachines.imagemap.dev", e))?;
        }
        Kind::NeonVm => {
            let vm = explain_reads::neonvm_vm(&client, &namespace, name).await?;
            let pod = match &vm.pod_name {
                Some(pod) => pods.get_opt(pod).await.ok().flatten(),
                None => None,
            };
            explained.kind = "VirtualMachine.vm.neon.tech";
            explained.slots = ctx.explaining(&namespace, |x| {
                explain(x, &PodFacts::of_neonvm(&vm, pod.as_ref()))
            });
        }
    }
    explained.notes = notes;
    Ok(explained)
}

/// imagemap's VirtualMachine `name` explained, against what its runner pod runs.
async fn explain_own_vm(
    client: &Client,
    ctx: &Context,
    args: &ExplainArgs,
    namespace: &str,
    name: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<SlotExplanation>, kube::Error> {
    let vm = Api::<VirtualMachine>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={name}", crate::core::runner_pod::VM_LABEL);
    let runs = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list
            .items
            .first()
            .map(crate::core::runner_pod::pod_images)
            .unwrap_or_default(),
        Err(e) => {
            notes.push(format!(
                "its runner pod cannot be read: {}",
                excerpt(&e.to_string())
            ));
            BTreeMap::new()
        }
    };
    let none = BTreeMap::new();
    let labels = namespace_labels(namespace, ctx.labels.as_ref().unwrap_or(&none));
    let status_problem =
        |rule: &RuleRef| ctx.mappings.as_ref().and_then(|m| m.status_problem(rule));
    Ok(explain_vm(
        &ctx.rules,
        &vm,
        &labels,
        &args.default_runner_image,
        &runs,
        &status_problem,
    ))
}

/// A pod explained; a NeonVM VM's runner pod by its VM's spec (NeonVM resets the pod's
/// labels and annotations).
async fn explain_pod(client: &Client, ctx: &Context, pod: &Pod) -> Vec<SlotExplanation> {
    let namespace = pod.namespace().unwrap_or_default();
    let neonvm_owner = pod
        .owner_references()
        .iter()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == "VirtualMachine"
                && o.api_version.starts_with("vm.neon.tech/")
        })
        .map(|o| o.name.clone());
    let facts = match neonvm_owner {
        Some(vm) => match explain_reads::neonvm_vm(client, &namespace, &vm).await {
            Ok(vm) => PodFacts::of_neonvm(&vm, Some(pod)),
            Err(_) => PodFacts::of_pod(pod),
        },
        None => PodFacts::of_pod(pod),
    };
    ctx.explaining(&namespace, |x| explain(x, &facts))
}

/// The workload `name` of `kind`, as JSON.
async fn workload(
    client: &Client,
    namespace: &str,
    kind: TemplateKind,
    name: &str,
) -> Result<Value, kube::Error> {
    let (group, version, plural) = match kind {
        TemplateKind::Deployment => ("apps", "v1", "deployments"),
        TemplateKind::StatefulSet => ("apps", "v1", "statefulsets"),
        TemplateKind::DaemonSet => ("apps", "v1", "daemonsets"),
        TemplateKind::ReplicaSet => ("apps", "v1", "replicasets"),
        TemplateKind::Job => ("batch", "v1", "jobs"),
        TemplateKind::CronJob => ("batch", "v1", "cronjobs"),
        TemplateKind::Pod => ("", "v1", "pods"),
    };
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind.name()),
        plural,
    );
    let object = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
        .get(name)
        .await?;
    let mut value = object.data.clone();
    value["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
    value["apiVersion"] = json!(resource.api_version);
    value["kind"] = json!(kind.name());
    Ok(value)
}

/// The pods `object` owns: its controller's (a Deployment's through its ReplicaSets, a
/// CronJob's through its Jobs), found by its selector or its UID.
async fn owned_pods(
    client: &Client,
    pods: &Api<Pod>,
    kind: TemplateKind,
    object: &Value,
) -> Result<Vec<Pod>, kube::Error> {
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // The UIDs whose pods are the workload's: its own, and its ReplicaSets' or Jobs'.
    let mut owners = vec![uid.clone()];
    let middle = match kind {
        TemplateKind::Deployment => Some(("apps", "ReplicaSet", "replicasets")),
        TemplateKind::CronJob => Some(("batch", "Job", "jobs")),
        _ => None,
    };
    if let Some((group, kind, plural)) = middle {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
        let list = Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource)
            .list(&ListParams::default())
            .await?;
        owners.extend(
            list.items
                .into_iter()
                .filter(|o| {
                    o.owner_references()
                        .iter()
                        .any(|r| r.controller == Some(true) && r.uid == uid)
                })
                .filter_map(|o| o.uid()),
        );
    }
    let list = pods.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && owners.contains(&r.uid))
        })
        .collect())
}
