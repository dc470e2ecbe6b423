//! `imagemap crds`: prints the CustomResourceDefinitions as YAML.

use std::io::Write;

/// Writes every CRD to `out`; returns the exit status.
pub fn run(out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match crate::crds::all_yaml() {
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
