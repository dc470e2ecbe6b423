//! `imagemap resolve`: the mapping engine offline, over manifests and image references.

use std::io::Write;

use super::follow_tags::{ask_registries, read_registry_config};
use super::manifest_files;
use super::report::Report;
use super::resolve_args::{EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Output, ResolveArgs};

/// Runs the command, writing the result to `out` and notes to `err`; returns the exit status.
pub fn run(args: &ResolveArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if args.cluster.enabled {
        return super::cluster_preview::run(args, out, err);
    }
    let namespace = args.namespace.as_deref().unwrap_or("default");
    let manifests = match manifest_files::load(&args.files, namespace) {
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
             VirtualMachine (imagemap's and NeonVM's), Pod, Deployment, StatefulSet, \
             DaemonSet, ReplicaSet, Job, CronJob, Namespace and the ConfigMap \
             kube-public/local-registry-hosting"
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
