//! The source tree keeps the shape the README's Architecture describes: files stay small
//! enough to read, and the operator's rooms import each other directly, never through the
//! wiring in `operator/mod.rs`.

#![allow(clippy::unwrap_used)] // test code

use std::path::{Path, PathBuf};

const LIMIT: usize = 500;

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_source_file_but_tests_is_over_500_lines() {
    let long: Vec<String> = rust_files(&src())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs"))
        .filter_map(|p| {
            let lines = std::fs::read_to_string(&p).unwrap().lines().count();
            (lines > LIMIT).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {LIMIT} lines: {long:?}");
}

/// The identifiers that follow `prefix` in `text`.
fn after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn the_operators_rooms_never_import_its_wiring() {
    let operator = src().join("operator");
    let wiring = std::fs::read_to_string(operator.join("mod.rs")).unwrap();
    // The rooms and shared parts operator/mod.rs declares: the paths through it that
    // lead to a sibling, not to an item of the wiring.
    let modules: Vec<&str> = wiring
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("mod ")
                .or_else(|| l.trim().strip_prefix("pub mod "))
        })
        .filter_map(|l| l.strip_suffix(';'))
        .collect();
    assert!(
        modules.contains(&"vms") && modules.contains(&"leader"),
        "{modules:?}"
    );
    let mut through_wiring = Vec::new();
    for file in rust_files(&operator) {
        if file == operator.join("mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let mut names = after(&text, "crate::operator::");
        // `super::` leads to operator/mod.rs from its direct children only.
        if file.parent() == Some(operator.as_path()) {
            names.extend(after(&text, "super::"));
        }
        for name in names {
            if !modules.contains(&name) && name != "*" && !name.is_empty() {
                through_wiring.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert!(
        through_wiring.is_empty(),
        "items of operator/mod.rs imported by its rooms: {through_wiring:?}"
    );
}
