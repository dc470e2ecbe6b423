//! `imagemap crds`: prints the CustomResourceDefinitions as YAML (or as the Helm chart's
//! template of them).

use std::io::Write;

/// Arguments of `imagemap crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Print the Helm chart's template instead (charts/imagemap/templates/crds.yaml): the
    /// CRDs kept on uninstall, behind `crds.install`.
    #[arg(long)]
    pub helm_template: bool,
}

/// Writes every CRD to `out`; returns the exit status.
pub fn run(args: &CrdsArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let rendered = if args.helm_template {
        crate::core::crd_yaml::chart_template()
    } else {
        crate::core::crd_yaml::all_yaml()
    };
    match rendered {
        Ok(yaml) => match out.write_all(yaml.as_bytes()) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(err, "error: writing output: {e}");
                1
            }
        },
        Err(e) => {
            let _ = writeln!(err, "error: rendering CRDs: {e}");
            1
        }
    }
}
