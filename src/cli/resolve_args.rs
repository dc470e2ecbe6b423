//! The arguments of `imagemap resolve` (and the output formats and exit codes it shares
//! with `imagemap status`), and how the rules are compiled from them.

use std::path::PathBuf;

use crate::core::allowed_registries::AllowedRegistries;
use crate::core::rules::CompileOptions;
use crate::core::vm_images;

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
    /// `default`; with --cluster, the context's). With --cluster: previewed with every
    /// namespace the files and --delete name; an ImageMapping or VirtualMachine of a file in
    /// another namespace is an error, as with `kubectl apply -n`.
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
    /// The runner image NeonVM's controller gives a NeonVM VirtualMachine that names none, as
    /// the operator's flag of the same name; without it such a VM's runner slot is not shown.
    #[arg(long, value_name = "IMAGE")]
    pub neonvm_default_runner_image: Option<String>,
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
    /// It looks at --namespace (else the context's) and every namespace the -f files and
    /// --delete name, as kubectl applies objects in their own namespaces; ClusterImageMappings
    /// are always read.
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
    /// With --cluster: preview the VMs and ImageMappings of every namespace (as for a
    /// ClusterImageMapping change).
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
    /// How the rules are compiled: as the operator does with `--allowed-registries`.
    #[must_use]
    pub fn compile_options(&self) -> CompileOptions {
        compile_options(&self.allowed_registries)
    }
}

/// How the rules are compiled: as the operator does with `--allowed-registries allowed`
/// when given, else anywhere.
#[must_use]
pub fn compile_options(allowed: &[String]) -> CompileOptions {
    if allowed.is_empty() {
        return CompileOptions::default();
    }
    CompileOptions {
        allowed_registries: AllowedRegistries::only(allowed.to_vec()),
        follow_needs_list: true,
        local_registry: None,
    }
}
