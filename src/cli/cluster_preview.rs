//! `imagemap resolve --cluster`: what a change would do to the VMs, workloads and NeonVM VMs
//! that run now, read from the live cluster (read-only) with the -f files laid over it and
//! `--delete` removals. Its output is [`super::cluster_preview_output`]'s.

use std::io::Write;
use std::path::PathBuf;

use std::collections::BTreeMap;

use super::cluster::{self, Target};
use super::cluster_preview_output::{to_json, to_table};
use super::cluster_workloads;
use super::manifest_files;
use super::preview_scope::{self, NamespaceMismatch, PreviewScope, ScopeRequest};
use super::report::problem_line;
use super::resolve_args::{EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Output, ResolveArgs};
use super::status::read_vms;
use crate::core::manifests::{Manifests, ObjectKey, ObjectKind};
use crate::core::neonvm_preview::preview_neonvm;
use crate::core::slot_resolution;
use crate::core::vm_preview::{Preview, compile, preview};
use crate::core::workload_preview::preview_workloads;

/// Runs the preview; returns the exit status: 2 when the cluster or a file cannot be read,
/// 1 when the change brings new problems (or, with `--exit-code`, changes anything), else 0.
pub fn run(args: &ResolveArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some(runtime) = cluster::runtime(err) else {
        return EXIT_USAGE;
    };
    let target = Target {
        kubeconfig: args.cluster.kubeconfig.clone(),
        context: args.cluster.context.clone(),
    };
    let read = runtime.block_on(async {
        let (client, context_namespace) = cluster::connect(&target).await?;
        // As kubectl: --namespace, else the context's, for objects that name none.
        let namespace = args.namespace.clone().unwrap_or(context_namespace);
        let change = ProposedChange::load(args, &namespace)?;
        let scope = change.scope(args, &namespace).map_err(|e| e.to_string())?;
        let (mut live, mut notes) = cluster::read(&client, &scope).await?;
        let (templates, more) = cluster_workloads::read(&client, &scope).await;
        live.pod_templates = templates;
        notes.extend(more);
        // NeonVM's VMs, when it is installed; one that cannot be listed is a note.
        match read_vms(&client, &scope).await {
            Ok(vms) => {
                live.neonvm_vms = vms
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(vm, _)| vm)
                    .collect();
            }
            Err(e) => notes.push(e),
        }
        Ok::<_, String>((live, notes, change, scope))
    });
    let (live, notes, change, scope) = match read {
        Ok(read) => read,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return EXIT_USAGE;
        }
    };
    for note in notes {
        let _ = writeln!(err, "note: {note}");
    }
    for skipped in &change.files.skipped {
        let _ = writeln!(
            err,
            "note: skipping {skipped}: resolve reads ImageMapping, ClusterImageMapping, \
             VirtualMachine, Namespace and the ConfigMap kube-public/local-registry-hosting"
        );
    }
    let after = change.applied_to(&live);
    let result = preview(
        &live,
        &after,
        &args.compile_options(),
        &args.default_runner_image,
    );
    let (workloads, neonvms) = {
        let options = args.compile_options();
        let (now, later) = (compile(&live, &options), compile(&after, &options));
        let labels = |ns: &str| {
            slot_resolution::namespace_labels(
                ns,
                after.namespaces.get(ns).unwrap_or(&BTreeMap::new()),
            )
        };
        (
            preview_workloads(&now, &later, &live.pod_templates, &labels),
            preview_neonvm(
                &now,
                &later,
                &live.neonvm_vms,
                args.neonvm_default_runner_image.as_deref(),
                &labels,
            ),
        )
    };
    for line in problem_lines(&result) {
        let _ = writeln!(err, "problem: {line}");
    }
    let written = match args.output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut *out, &to_json(&result, &workloads, &neonvms, &scope))
                .map_err(std::io::Error::other)
                .and_then(|()| writeln!(out))
        }
        Output::Table => out.write_all(to_table(&result, &workloads, &neonvms, &scope).as_bytes()),
    };
    if let Err(e) = written {
        let _ = writeln!(err, "error: writing output: {e}");
        return EXIT_USAGE;
    }
    let changes_anything =
        result.changes_anything() || !workloads.0.is_empty() || !neonvms.0.is_empty();
    if result.has_new_problems() || (args.cluster.exit_code && changes_anything) {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }
}

/// The change a preview shows: the objects of the -f files, and those `--delete` removes.
struct ProposedChange {
    files: Manifests,
    /// What the files `--delete` names hold.
    deleted_from_files: Vec<ObjectKey>,
    /// What `--delete` names as KIND/NAME or KIND/NAMESPACE/NAME.
    deleted_named: Vec<ObjectKey>,
}

impl ProposedChange {
    /// Reads the -f files and what `--delete` names; objects without a namespace are in
    /// `namespace`.
    fn load(args: &ResolveArgs, namespace: &str) -> Result<ProposedChange, String> {
        let files = manifest_files::load(&args.files, namespace).map_err(|e| e.to_string())?;
        let mut change = ProposedChange {
            files,
            deleted_from_files: Vec::new(),
            deleted_named: Vec::new(),
        };
        for value in &args.cluster.delete {
            match deleted(value, namespace)? {
                Removal::File(keys) => change.deleted_from_files.extend(keys),
                Removal::Named(key) => change.deleted_named.push(key),
            }
        }
        Ok(change)
    }

    /// The namespaces the preview looks at (see [`preview_scope`]).
    fn scope(
        &self,
        args: &ResolveArgs,
        namespace: &str,
    ) -> Result<PreviewScope, NamespaceMismatch> {
        let mut from_files = self.files.keys();
        from_files.extend(self.deleted_from_files.iter().cloned());
        preview_scope::scope(&ScopeRequest {
            default_namespace: namespace,
            namespace_given: args.namespace.is_some(),
            all_namespaces: args.cluster.all_namespaces,
            from_files: &from_files,
            named: &self.deleted_named,
        })
    }

    /// The live objects with the -f files laid over them and the `--delete` ones removed.
    fn applied_to(self, live: &Manifests) -> Manifests {
        let mut after = Manifests {
            image_mappings: live.image_mappings.clone(),
            cluster_image_mappings: live.cluster_image_mappings.clone(),
            virtual_machines: live.virtual_machines.clone(),
            pod_templates: live.pod_templates.clone(),
            neonvm_vms: live.neonvm_vms.clone(),
            namespaces: live.namespaces.clone(),
            local_registry: live.local_registry.clone(),
            skipped: Vec::new(),
        };
        after.overlay(self.files);
        let mut removed = self.deleted_from_files;
        removed.extend(self.deleted_named);
        after.remove(&removed);
        after
    }
}

/// What one `--delete` value names.
#[derive(Debug, PartialEq, Eq)]
enum Removal {
    /// The objects of a file or folder.
    File(Vec<ObjectKey>),
    /// One object, by name.
    Named(ObjectKey),
}

/// The objects one `--delete` value names.
fn deleted(value: &str, namespace: &str) -> Result<Removal, String> {
    let path = PathBuf::from(value);
    if path.exists() {
        return manifest_files::load(&[path], namespace)
            .map(|m| Removal::File(m.keys()))
            .map_err(|e| e.to_string());
    }
    let parts: Vec<&str> = value.split('/').collect();
    let usage = || {
        format!(
            "--delete {value:?}: give KIND/NAME, KIND/NAMESPACE/NAME or a file (KIND: \
             imagemapping, clusterimagemapping, virtualmachine, namespace)"
        )
    };
    let kind = ObjectKind::parse(parts[0]).ok_or_else(usage)?;
    let (ns, name) = match (kind.namespaced(), parts.as_slice()) {
        (true, [_, name]) => (namespace, *name),
        (true, [_, ns, name]) => (*ns, *name),
        (false, [_, name]) => ("", *name),
        _ => return Err(usage()),
    };
    if name.is_empty() {
        return Err(usage());
    }
    Ok(Removal::Named(ObjectKey {
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
    }))
}

fn problem_lines(p: &Preview) -> Vec<String> {
    p.new_problems
        .iter()
        .map(problem_line)
        .chain(p.vms.iter().flat_map(|v| {
            v.new_problems
                .iter()
                .map(move |line| format!("VirtualMachine {}/{} {line}", v.namespace, v.name))
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn delete_names_objects_as_kubectl_does() {
        let key = |kind, ns: &str, name: &str| ObjectKey {
            kind,
            namespace: ns.into(),
            name: name.into(),
        };
        assert_eq!(
            deleted("imagemapping/tilt", "dev").unwrap(),
            Removal::Named(key(ObjectKind::ImageMapping, "dev", "tilt"))
        );
        assert_eq!(
            deleted("imvm/prod/db", "dev").unwrap(),
            Removal::Named(key(ObjectKind::VirtualMachine, "prod", "db"))
        );
        assert_eq!(
            deleted("ClusterImageMapping/mirror", "dev").unwrap(),
            Removal::Named(key(ObjectKind::ClusterImageMapping, "", "mirror"))
        );
        for bad in [
            "pod/x",
            "imagemapping",
            "clusterimagemapping/a/b",
            "imgmap/",
        ] {
            assert!(
                deleted(bad, "dev").unwrap_err().contains("KIND/NAME"),
                "{bad}"
            );
        }
    }
}
