//! The `imagemap` command line.

pub mod cluster;
pub mod cluster_preview;
mod cluster_preview_output;
pub mod cluster_workloads;
pub mod crds;
pub mod explain;
mod explain_output;
mod explain_reads;
pub mod follow_tags;
pub mod manifest_files;
pub mod preview_scope;
mod report;
pub mod resolve;
pub mod resolve_args;
pub mod run;
pub mod status;
pub mod table;

use clap::{Parser, Subcommand};

/// imagemap: use image Y wherever image X is asked for.
#[derive(Debug, Parser)]
#[command(name = "imagemap", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Resolve images through ImageMappings offline, as the operator would.
    Resolve(Box<resolve_args::ResolveArgs>),
    /// Print the CustomResourceDefinitions as YAML.
    Crds(crds::CrdsArgs),
    /// Run the operator against the cluster of KUBECONFIG (or in-cluster credentials).
    Run(Box<run::RunArgs>),
    /// Show what each NeonVM VirtualMachine's images resolve to now, and whether its runner
    /// pod runs it.
    Status(status::StatusArgs),
    /// Explain why a pod (or a workload's pods, or a VM's) runs what it runs: each
    /// container's request, what it runs, what the rules make of it now, and a verdict.
    Explain(Box<explain::ExplainArgs>),
}
