//! The source tree keeps the shape the README's Architecture describes: files stay small
//! enough to read; the operator's rooms import each other directly, never through the
//! wiring (`operator/mod.rs`, and each side's `mod.rs`), never in a circle, and never
//! through a hub that gathers the parts of many rooms.

#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, BTreeSet};
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

/// The operator's source files, by their path below `operator/` ("read/mod.rs"), each
/// with its code less comments (doc links are not imports) and unit tests.
fn operator_files() -> BTreeMap<String, String> {
    let operator = src().join("operator");
    rust_files(&operator)
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(&operator).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            (name, code.join("\n"))
        })
        .collect()
}

/// The files that wire rooms together: the operator's, and each side's.
const WIRING: [&str; 4] = ["mod.rs", "admission/mod.rs", "read/mod.rs", "write/mod.rs"];

/// The file of module `path` (`["read", "watches"]` → `read/watches/mod.rs`).
fn module_file(files: &BTreeMap<String, String>, path: &[&str]) -> Option<String> {
    let joined = path.join("/");
    [format!("{joined}.rs"), format!("{joined}/mod.rs")]
        .into_iter()
        .find(|f| files.contains_key(f))
}

/// The module path of `file` (`write/vms/trigger.rs` → `["write", "vms", "trigger"]`).
fn module_of(file: &str) -> Vec<&str> {
    let mut path: Vec<&str> = file.trim_end_matches(".rs").split('/').collect();
    if path.last() == Some(&"mod") {
        path.pop();
    }
    path
}

/// The paths `file` names below `crate::operator::`, as module paths from `operator/`
/// (`super::` resolved), each cut after its last segment that is a module of the tree.
fn imports(files: &BTreeMap<String, String>, file: &str) -> BTreeSet<String> {
    let text = &files[file];
    let module = module_of(file);
    let mut paths: Vec<Vec<String>> = after_path(text, "crate::operator::")
        .into_iter()
        .map(|p| p.split("::").map(String::from).collect())
        .collect();
    // `use child::…` names a module of this one.
    for p in after_path(text, "use ") {
        let first = p.split("::").next().unwrap_or_default();
        let mut child = module.clone();
        child.push(first);
        if p.contains("::") && module_file(files, &child).is_some() {
            let mut full: Vec<String> = module.iter().map(|s| (*s).to_string()).collect();
            full.extend(p.split("::").map(String::from));
            paths.push(full);
        }
    }
    for p in after_path(text, "super::") {
        if module.is_empty() {
            continue;
        }
        let mut full: Vec<String> = module[..module.len() - 1]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        full.extend(p.split("::").map(String::from));
        paths.push(full);
    }
    let mut out = BTreeSet::new();
    for path in paths
        .into_iter()
        .filter(|p| p.iter().all(|s| !s.is_empty()))
    {
        let segments: Vec<&str> = path.iter().map(String::as_str).collect();
        let found = (1..=segments.len())
            .rev()
            .find_map(|n| module_file(files, &segments[..n]))
            .unwrap_or_else(|| "mod.rs".to_string());
        if found != file {
            out.insert(found);
        }
    }
    out
}

/// The `::`-joined paths that follow `prefix` in `text`.
fn after_path<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter(|(i, _)| {
            // Not the tail of a longer path (`x::super::`).
            !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
        })
        .map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].trim_end_matches(':')
        })
        .collect()
}

/// The room of a file: its directory below `operator/` (one level deeper in a side), or the
/// file itself for the shared parts.
fn room(file: &str) -> String {
    let parts: Vec<&str> = file.split('/').collect();
    let depth = if matches!(parts[0], "read" | "write") && parts.len() > 2 {
        2
    } else {
        1
    };
    parts[..depth.min(parts.len())]
        .join("/")
        .trim_end_matches(".rs")
        .to_string()
}

#[test]
fn the_operators_rooms_never_import_its_wiring() {
    let files = operator_files();
    assert!(
        files.contains_key("write/vms/vm_reconciler.rs") && files.contains_key("read/mod.rs"),
        "{:?}",
        files.keys().collect::<Vec<_>>()
    );
    let mut through_wiring = Vec::new();
    for file in files.keys() {
        for imported in imports(&files, file) {
            // A wiring file's items are for the wiring above it alone.
            let wiring = WIRING.contains(&imported.as_str());
            let above = WIRING.contains(&file.as_str())
                && (file == "mod.rs" || imported != "mod.rs" && file != &imported);
            if wiring && !above {
                through_wiring.push(format!("{file} → {imported}"));
            }
        }
    }
    assert!(
        through_wiring.is_empty(),
        "items of the wiring imported by its rooms: {through_wiring:?}"
    );
}

/// Depth-first from `file`: a file met again while it is on the path closes a circle.
fn visit<'a>(
    file: &'a str,
    graph: &'a BTreeMap<&str, BTreeSet<String>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
    circles: &mut Vec<String>,
) {
    if let Some(i) = path.iter().position(|f| *f == file) {
        circles.push(format!("{} → {file}", path[i..].join(" → ")));
        return;
    }
    if !done.insert(file) {
        return;
    }
    path.push(file);
    for next in graph.get(file).into_iter().flatten() {
        visit(next, graph, path, done, circles);
    }
    path.pop();
}

#[test]
fn no_circle_inside_the_operator() {
    let files = operator_files();
    let graph: BTreeMap<&str, BTreeSet<String>> = files
        .keys()
        .map(|f| (f.as_str(), imports(&files, f)))
        .collect();
    assert!(
        graph["write/mod.rs"].contains("write/vms/vm_reconciler.rs"),
        "{:?}",
        graph["write/mod.rs"]
    );
    let (mut done, mut circles) = (BTreeSet::new(), Vec::new());
    for file in graph.keys() {
        visit(file, &graph, &mut Vec::new(), &mut done, &mut circles);
    }
    assert!(circles.is_empty(), "imports in a circle: {circles:?}");
}

#[test]
fn no_room_imports_a_hub() {
    let files = operator_files();
    // What another room imports stays narrow: a file imported from outside its room
    // imports from at most two other rooms itself. Gathering the parts of many rooms for
    // all of them is the wiring's job, done once.
    let mut hubs = Vec::new();
    for file in files.keys().filter(|f| !WIRING.contains(&f.as_str())) {
        let users: BTreeSet<String> = files
            .keys()
            .filter(|f| !WIRING.contains(&f.as_str()) && room(f) != room(file))
            .filter(|f| imports(&files, f).contains(file))
            .map(|f| room(f))
            .collect();
        let reaches: BTreeSet<String> = imports(&files, file)
            .iter()
            .map(|f| room(f))
            .filter(|r| *r != room(file))
            .collect();
        if !users.is_empty() && reaches.len() > 2 {
            hubs.push(format!(
                "{file} (imports {reaches:?}; imported by {users:?})"
            ));
        }
    }
    assert!(hubs.is_empty(), "hubs: {hubs:?}");
}
