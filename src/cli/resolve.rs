//! `imagemap resolve`: the mapping engine offline, over manifests and image references.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use kube::ResourceExt;
use serde_json::{Value, json};

use super::follow_tags::{Digests, ask_registries, read_registry_config};
use super::table;
use crate::allowed_registries::AllowedRegistries;
use crate::manifests::Manifests;
use crate::reference::Reference;
use crate::registry::RegistryError;
use crate::rules::RuleProblem;
use crate::rules::{CompileOptions, MappingKey, Mode, Requester, RuleRef};
use crate::vm_images::SlotResolution;
use crate::vm_images::{self, VmResolution};

/// Output format of `imagemap resolve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Arguments of `imagemap resolve`.
#[derive(Debug, clap::Args)]
pub struct ResolveArgs {
    /// A YAML file or folder (searched recursively for .yaml/.yml) holding ImageMappings,
    /// ClusterImageMappings, VirtualMachines, Namespaces and the ConfigMap
    /// kube-public/local-registry-hosting. Repeatable. With --cluster: the changes to preview.
    #[arg(short = 'f', long = "filename", value_name = "FILE_OR_DIR")]
    pub files: Vec<PathBuf>,
    /// An image reference to resolve as if an unlabelled VirtualMachine in --namespace asked
    /// for it. Repeatable; use --image=VALUE for values starting with '-'.
    #[arg(
        long = "image",
        value_name = "REF",
        allow_hyphen_values = true,
        conflicts_with = "cluster"
    )]
    pub images: Vec<String>,
    /// Namespace of --image requests, and of objects in -f that name none (default:
    /// `default`; with --cluster, the context's). With --cluster: the namespace whose
    /// ImageMappings and VMs are previewed (ClusterImageMappings are always read).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// `--cluster` and the flags that go with it.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The operator's --allowed-registries, for a preview that refuses what it refuses.
    /// Default: rules may point anywhere, and tags are followed anywhere.
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub allowed_registries: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Runner image of VirtualMachines that name none (the operator's flag of the same name).
    #[arg(long, default_value = vm_images::DEFAULT_RUNNER_IMAGE)]
    pub default_runner_image: String,
    /// Ask the registries which digest each followed tag (`followTag`) points to now.
    /// Off by default: the preview stays offline.
    #[arg(long, conflicts_with = "cluster")]
    pub follow_tags: bool,
    /// Registries (`host[:port]`) to ask over plain HTTP with --follow-tags.
    #[arg(long, value_delimiter = ',', value_name = "REGISTRY")]
    pub insecure_registries: Vec<String>,
    /// A Docker config (`{"auths": …}`, as in `~/.docker/config.json` or the operator's
    /// Secret) whose entries --follow-tags asks registries with. Default: anonymously.
    #[arg(long, value_name = "FILE", requires = "follow_tags")]
    pub registry_config: Option<PathBuf>,
}

/// `imagemap resolve --cluster`: the preview against the live cluster.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// Preview against the live cluster: read its mappings, VirtualMachines, Namespaces and
    /// local registry through the kubeconfig, lay the -f files over them, and print what
    /// changes for each VM that runs now (images now → after, and what happens to its pod).
    #[arg(long = "cluster", id = "cluster")]
    pub enabled: bool,
    /// With --cluster: an object the change removes, as KIND/NAME (in --namespace),
    /// KIND/NAMESPACE/NAME, or a file or folder whose objects are removed. Repeatable.
    #[arg(long, value_name = "KIND/NAME|FILE", requires = "cluster")]
    pub delete: Vec<String>,
    /// With --cluster: exit 1 when the change would change anything (as `kubectl diff`).
    #[arg(long, requires = "cluster")]
    pub exit_code: bool,
    /// With --cluster: the kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// With --cluster: the kubeconfig context (default: its current one).
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub context: Option<String>,
    /// With --cluster: preview the VMs and ImageMappings of every namespace.
    #[arg(short = 'A', long, requires = "cluster", conflicts_with = "namespace")]
    pub all_namespaces: bool,
}

/// Exit status: everything resolved.
pub const EXIT_OK: i32 = 0;
/// Exit status: an invalid reference or rule, or a conflict.
pub const EXIT_PROBLEMS: i32 = 1;
/// Exit status: usage, file or YAML error.
pub const EXIT_USAGE: i32 = 2;

impl ResolveArgs {
    /// How the rules are compiled: as the operator does with `--allowed-registries` when
    /// given, else anywhere.
    #[must_use]
    pub fn compile_options(&self) -> CompileOptions {
        if self.allowed_registries.is_empty() {
            return CompileOptions::default();
        }
        CompileOptions {
            allowed_registries: AllowedRegistries::only(self.allowed_registries.clone()),
            follow_needs_list: true,
            local_registry: None,
        }
    }
}

/// Runs the command, writing the result to `out` and notes to `err`; returns the exit status.
pub fn run(args: &ResolveArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if args.cluster.enabled {
        return super::preview::run(args, out, err);
    }
    let namespace = args.namespace.as_deref().unwrap_or("default");
    let manifests = match Manifests::load(&args.files, namespace) {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return EXIT_USAGE;
        }
    };
    for skipped in &manifests.skipped {
        let _ = writeln!(
            err,
            "note: skipping {skipped}: resolve reads ImageMapping, ClusterImageMapping, \
             VirtualMachine, Namespace and the ConfigMap kube-public/local-registry-hosting"
        );
    }
    let mut report = Report::build(&manifests, args);
    if args.follow_tags {
        let credentials = match &args.registry_config {
            None => None,
            Some(path) => match read_registry_config(path) {
                Ok((credentials, problems)) => {
                    for problem in problems {
                        let _ =
                            writeln!(err, "note: --registry-config {}: {problem}", path.display());
                    }
                    Some((path.display().to_string(), credentials))
                }
                Err(e) => {
                    let _ = writeln!(err, "error: --registry-config {}: {e}", path.display());
                    return EXIT_USAGE;
                }
            },
        };
        let digests = ask_registries(
            &report.followed(),
            &args.insecure_registries,
            credentials,
            manifests.local_registry(),
        );
        for (reference, result) in &digests {
            if let Err(e) = result {
                let _ = writeln!(err, "note: {reference}: digest unknown: {e}");
            }
        }
        report.pin(&digests);
    }
    for line in report.problem_lines() {
        let _ = writeln!(err, "problem: {line}");
    }
    let written = match args.output {
        Output::Json => serde_json::to_writer_pretty(&mut *out, &report.to_json())
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
        Output::Table => out.write_all(report.to_table().as_bytes()),
    };
    if let Err(e) = written {
        let _ = writeln!(err, "error: writing output: {e}");
        return EXIT_USAGE;
    }
    if report.has_problems() {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }
}

struct ImageEntry {
    input: String,
    parsed: Result<Reference, String>,
    resolved: Option<Result<Reference, String>>,
    rule: Option<RuleRef>,
    conflicts: Vec<RuleRef>,
    more_conflicts: usize,
    follow_tag: bool,
    /// With --follow-tags: the registry's answer for a followed result.
    digest: Option<Result<String, RegistryError>>,
}

struct VmEntry {
    namespace: String,
    name: String,
    resolution: VmResolution,
}

struct Report {
    images: Vec<ImageEntry>,
    vms: Vec<VmEntry>,
    problems: Vec<RuleProblem>,
}

impl Report {
    /// The distinct references followed by tag.
    fn followed(&self) -> BTreeSet<String> {
        let images = self.images.iter().filter(|i| i.follow_tag).filter_map(|i| {
            i.resolved
                .as_ref()
                .and_then(|r| r.as_ref().ok())
                .map(ToString::to_string)
        });
        let slots = self
            .vms
            .iter()
            .flat_map(|v| v.resolution.followed().map(str::to_string));
        images.chain(slots).collect()
    }

    /// Pins followed results to the digests the registries gave.
    fn pin(&mut self, digests: &Digests) {
        for i in &mut self.images {
            if let (true, Some(Ok(r))) = (i.follow_tag, &i.resolved) {
                i.digest = digests.get(r.as_str()).cloned();
            }
        }
        for v in &mut self.vms {
            v.resolution.pin(
                |r, _| match digests.get(r) {
                    Some(Ok(d)) => (Some(d.clone()), None),
                    Some(Err(e)) => (None, Some(e.to_string())),
                    None => (None, None),
                },
                &[],
            );
        }
    }

    fn build(manifests: &Manifests, args: &ResolveArgs) -> Report {
        let set = crate::preview::compile(manifests, &args.compile_options());
        let problems = set.problems().to_vec();
        let ns_labels = |ns: &str| {
            vm_images::namespace_labels(
                ns,
                manifests.namespaces.get(ns).unwrap_or(&BTreeMap::new()),
            )
        };
        let unlabelled = BTreeMap::new();
        let namespace = args.namespace.as_deref().unwrap_or("default");
        let request_ns_labels = ns_labels(namespace);
        let who = Requester {
            namespace,
            labels: &unlabelled,
            namespace_labels: &request_ns_labels,
        };
        let images = args
            .images
            .iter()
            .map(|input| {
                let parsed = Reference::parse_normalized(input).map_err(|e| e.to_string());
                let mut entry = ImageEntry {
                    input: input.clone(),
                    parsed: parsed.clone(),
                    resolved: None,
                    rule: None,
                    conflicts: Vec::new(),
                    more_conflicts: 0,
                    follow_tag: false,
                    digest: None,
                };
                if let Ok(r) = &parsed {
                    let res = set.resolve(r, &who, Mode::Live);
                    entry.rule = res.rule.map(|id| set.rule_ref(id));
                    entry.conflicts = res.conflicts.iter().map(|&id| set.rule_ref(id)).collect();
                    entry.more_conflicts = res.more_conflicts;
                    entry.follow_tag = res.follow_tag && res.resolved.is_ok();
                    entry.resolved = Some(res.resolved.map_err(|e| e.to_string()));
                }
                entry
            })
            .collect();
        let vms = manifests
            .virtual_machines
            .iter()
            .map(|vm| {
                let namespace = vm.namespace().unwrap_or_default();
                let resolution = vm_images::resolve_vm(
                    &set,
                    vm,
                    &ns_labels(&namespace),
                    &args.default_runner_image,
                    Mode::Live,
                );
                VmEntry {
                    namespace,
                    name: vm.name_any(),
                    resolution,
                }
            })
            .collect();
        Report {
            images,
            vms,
            problems,
        }
    }

    fn has_problems(&self) -> bool {
        !self.problems.is_empty()
            || self.images.iter().any(|i| {
                i.parsed.is_err() || matches!(i.resolved, Some(Err(_))) || !i.conflicts.is_empty()
            })
            || self
                .vms
                .iter()
                .any(|v| !v.resolution.all_resolved() || v.resolution.has_conflicts())
    }

    /// Each problem once: a conflict between two rules is one line, however many mappings,
    /// images and VMs show it.
    fn problem_lines(&self) -> Vec<String> {
        // Rule pairs (mapping, index) already reported, in both orders.
        type At<'a> = (&'a MappingKey, usize);
        let mut pairs: BTreeSet<(At, At)> = BTreeSet::new();
        let mut lines = Vec::new();
        for p in &self.problems {
            if let (Some(index), Some(other)) = (p.rule, p.detail.conflicting_rule()) {
                let (this, other) = ((&p.mapping, index), (&other.mapping, other.index));
                if !pairs.insert((this, other)) {
                    continue;
                }
                pairs.insert((other, this));
            }
            lines.push(problem_line(p));
        }
        let known = |winner: Option<&RuleRef>, loser: &RuleRef| {
            winner.is_some_and(|w| {
                pairs.contains(&((&w.mapping, w.index), (&loser.mapping, loser.index)))
            })
        };
        for i in &self.images {
            for c in i.conflicts.iter().filter(|c| !known(i.rule.as_ref(), c)) {
                lines.push(format!(
                    "image {:?}: Conflict: {} also matches with a different result",
                    i.input,
                    describe(c)
                ));
            }
            if i.more_conflicts > 0 {
                lines.push(format!(
                    "image {:?}: Conflict: {} more rules also match with a different result",
                    i.input, i.more_conflicts
                ));
            }
        }
        for v in &self.vms {
            for slot in &v.resolution.slots {
                for c in slot
                    .conflicts
                    .iter()
                    .filter(|c| !known(slot.rule.as_ref(), c))
                {
                    lines.push(format!(
                        "VirtualMachine {}/{} slot {}: Conflict: {} also matches with a different result",
                        v.namespace,
                        v.name,
                        slot.slot,
                        describe(c)
                    ));
                }
            }
        }
        lines
    }

    fn to_json(&self) -> Value {
        let images: Vec<Value> = self.images.iter().map(image_json).collect();
        let vms: Vec<Value> = self
            .vms
            .iter()
            .map(|v| {
                let images: Vec<Value> = v.resolution.slots.iter().map(slot_json).collect();
                json!({"namespace": v.namespace, "name": v.name, "images": images})
            })
            .collect();
        let problems: Vec<Value> = self.problems.iter().map(problem_json).collect();
        json!({"images": images, "virtualMachines": vms, "problems": problems})
    }

    fn to_table(&self) -> String {
        let mut out = String::new();
        if !self.images.is_empty() {
            let mut rows = vec![["IMAGE".to_string(), "RESOLVED".into(), "RULE".into()]];
            for i in &self.images {
                let resolved = match (&i.parsed, &i.resolved) {
                    (Err(e), _) | (_, Some(Err(e))) => format!("error: {e}"),
                    (_, Some(Ok(r))) => followed(
                        r.as_str(),
                        i.follow_tag,
                        i.digest.as_ref().and_then(|d| d.as_ref().ok()),
                    ),
                    (Ok(_), None) => String::new(),
                };
                rows.push([
                    i.input.clone(),
                    resolved,
                    rule_cell(i.rule.as_ref(), i.conflicts.len() + i.more_conflicts),
                ]);
            }
            out.push_str(&table::render(&rows));
        }
        if !self.vms.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            let mut rows = vec![[
                "VIRTUALMACHINE".to_string(),
                "SLOT".into(),
                "REQUESTED".into(),
                "RESOLVED".into(),
                "RULE".into(),
            ]];
            for v in &self.vms {
                for slot in &v.resolution.slots {
                    let resolved = match &slot.outcome {
                        Ok(r) => followed(r, slot.follow_tag, slot.digest.as_ref()),
                        Err(e) => format!("error: {e}"),
                    };
                    rows.push([
                        format!("{}/{}", v.namespace, v.name),
                        slot.slot.clone(),
                        slot.requested.clone(),
                        resolved,
                        rule_cell(
                            slot.rule.as_ref(),
                            slot.conflicts.len() + slot.more_conflicts,
                        ),
                    ]);
                }
            }
            out.push_str(&table::render(&rows));
        }
        if out.is_empty() {
            out.push_str("nothing to resolve: pass --image REF or -f with VirtualMachines\n");
        }
        out
    }
}

/// A resolved image as the table shows it: a followed tag says so, pinned when
/// --follow-tags asked its registry.
fn followed(resolved: &str, follow_tag: bool, digest: Option<&String>) -> String {
    match (follow_tag, digest) {
        (true, Some(d)) => format!("{resolved}@{d} (follows tag)"),
        (true, None) => format!("{resolved} (follows tag)"),
        (false, _) => resolved.to_string(),
    }
}

/// A rule problem as one line: the mapping, the rule, the reason and what is wrong.
pub(super) fn problem_line(p: &RuleProblem) -> String {
    let rule = p.rule.map(|r| format!(" rule {r}")).unwrap_or_default();
    format!("{}{rule}: {}: {}", p.mapping, p.reason().as_str(), p.detail)
}

pub(super) fn problem_json(p: &RuleProblem) -> Value {
    json!({
        "mapping": p.mapping.to_string(),
        "rule": p.rule,
        "reason": p.reason().as_str(),
        "message": p.detail.to_string(),
    })
}

pub(super) fn describe(r: &RuleRef) -> String {
    format!("{r} ({})", r.kind.as_str())
}

fn rule_cell(rule: Option<&RuleRef>, conflicts: usize) -> String {
    let mut cell = rule.map_or_else(|| "-".to_string(), describe);
    if conflicts > 0 {
        let _ = write!(cell, " [conflicts with {conflicts}]");
    }
    cell
}

pub(super) fn source_json(r: &RuleRef) -> Value {
    let s = r.source();
    json!({"kind": s.kind, "namespace": s.namespace, "name": s.name, "rule": s.rule, "match": s.match_kind})
}

fn image_json(i: &ImageEntry) -> Value {
    let r = match &i.parsed {
        Ok(r) => r,
        Err(e) => {
            return json!({
                "input": i.input, "normalized": null, "familiar": null, "registry": null,
                "repository": null, "tag": null, "digest": null, "resolved": null,
                "rule": null, "conflicts": null, "error": e,
            });
        }
    };
    let (resolved, error) = match &i.resolved {
        Some(Ok(out)) => (Some(out.to_string()), None),
        Some(Err(e)) => (None, Some(e.clone())),
        None => (None, None),
    };
    json!({
        "input": i.input,
        "normalized": r.as_str(),
        "familiar": r.familiar(),
        "registry": non_empty(r.domain()),
        "repository": r.path(),
        "tag": r.tag(),
        "digest": r.digest(),
        "resolved": resolved,
        "rule": i.rule.as_ref().map(source_json),
        "conflicts": i.conflicts.iter().map(source_json).collect::<Vec<_>>(),
        "moreConflicts": i.more_conflicts,
        "followTag": i.follow_tag,
        "resolvedDigest": i.digest.as_ref().and_then(|d| d.as_ref().ok()),
        "digestError": i.digest.as_ref().and_then(|d| d.as_ref().err()).map(ToString::to_string),
        "error": error,
    })
}

fn slot_json(slot: &SlotResolution) -> Value {
    json!({
        "slot": slot.slot,
        "requested": slot.requested,
        "resolved": slot.outcome.as_ref().ok(),
        "source": slot.rule.as_ref().map(source_json),
        "conflicts": slot.conflicts.iter().map(source_json).collect::<Vec<_>>(),
        "moreConflicts": slot.more_conflicts,
        "followTag": slot.follow_tag,
        "digest": slot.digest,
        "digestError": slot.digest_error,
        "error": slot.outcome.as_ref().err().map(ToString::to_string),
    })
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}
