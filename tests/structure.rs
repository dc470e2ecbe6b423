//! The source tree keeps the shape the architecture chapter describes, across the whole
//! crate:
//!
//! - files stay small enough to read;
//! - no import circle anywhere: between files, and between the modules of one folder;
//! - the pure core (`src/core/`) imports no module of the edges and does no I/O;
//! - the operator's rooms never import its wiring, nor a hub that gathers many rooms;
//! - a leader room imports the replica side, the watch toolkit and the writes, never another
//!   leader room, unless the edge is named in [`LEADER_EDGES`] with its reason;
//! - a name says one thing: no two files, folders or public types share a name.
//!
//! Each check is a function of the source text, and each is shown failing on an edge or a
//! name planted in a copy of the tree.

#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const LIMIT: usize = 500;

/// The crate's source: each file by its path below `src/` (`core/rules/index.rs`), as code
/// without comments (doc links are not imports) and without unit tests.
#[derive(Clone)]
struct Tree {
    files: BTreeMap<String, String>,
}

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

/// `text` without line comments, and without what follows its first `#[cfg(test)]`.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Tree {
    fn read() -> Tree {
        let root = src();
        // Unit tests are not the product's structure: `tests.rs` files are left out.
        let files = rust_files(&root)
            .into_iter()
            .filter(|path| path.file_name().is_some_and(|n| n != "tests.rs"))
            .map(|path| {
                let name = path.strip_prefix(&root).unwrap().display().to_string();
                (name, code_of(&std::fs::read_to_string(&path).unwrap()))
            })
            .collect();
        Tree { files }
    }

    /// This tree with `line` added to `file`: an edge or a name planted.
    fn planted(&self, file: &str, line: &str) -> Tree {
        let mut tree = self.clone();
        let code = tree.files.entry(file.to_string()).or_default();
        code.push('\n');
        code.push_str(line);
        tree
    }

    /// The file of module `path` (`["core", "rules"]` → `core/rules/mod.rs`).
    fn module_file(&self, path: &[&str]) -> Option<String> {
        if path.is_empty() {
            return Some("lib.rs".into());
        }
        let joined = path.join("/");
        [format!("{joined}.rs"), format!("{joined}/mod.rs")]
            .into_iter()
            .find(|f| self.files.contains_key(f))
    }

    /// The module files `file` names (by `crate::`, `super::`, `self::`, or a child module
    /// it declares), each path cut after its last segment that is a module of the tree.
    fn imports(&self, file: &str) -> BTreeSet<String> {
        let text = &self.files[file];
        let module = module_of(file);
        let own = |s: &str| s.to_string();
        let mut paths: Vec<Vec<String>> = Vec::new();
        for path in paths_in(text) {
            let segments: Vec<&str> = path.split("::").collect();
            let full: Option<Vec<String>> = match segments[0] {
                "crate" => Some(segments[1..].iter().map(|s| own(s)).collect()),
                // The binary names the library by its name.
                "imagemap" if file == "main.rs" => {
                    Some(segments[1..].iter().map(|s| own(s)).collect())
                }
                "self" => Some(
                    module
                        .iter()
                        .map(|s| own(s))
                        .chain(segments[1..].iter().map(|s| own(s)))
                        .collect(),
                ),
                "super" => {
                    let ups = segments.iter().take_while(|s| **s == "super").count();
                    (ups <= module.len()).then(|| {
                        module[..module.len() - ups]
                            .iter()
                            .map(|s| own(s))
                            .chain(segments[ups..].iter().map(|s| own(s)))
                            .collect()
                    })
                }
                first => {
                    // `use child::…` names a module of this one.
                    let mut child: Vec<&str> = module.clone();
                    child.push(first);
                    (segments.len() > 1 && self.module_file(&child).is_some()).then(|| {
                        module
                            .iter()
                            .map(|s| own(s))
                            .chain(segments.iter().map(|s| own(s)))
                            .collect()
                    })
                }
            };
            paths.extend(full);
        }
        let mut out = BTreeSet::new();
        for path in paths {
            let segments: Vec<&str> = path
                .iter()
                .map(String::as_str)
                .filter(|s| !s.is_empty())
                .collect();
            let found = (1..=segments.len())
                .rev()
                .find_map(|n| self.module_file(&segments[..n]));
            if let Some(found) = found.filter(|f| f != file && f != "lib.rs") {
                out.insert(found);
            }
        }
        out
    }

    fn graph(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.files
            .keys()
            .map(|f| (f.clone(), self.imports(f)))
            .collect()
    }
}

/// The module path of `file` (`core/rules/index.rs` → `["core", "rules", "index"]`).
fn module_of(file: &str) -> Vec<&str> {
    let mut path: Vec<&str> = file.trim_end_matches(".rs").split('/').collect();
    if matches!(path.last(), Some(&"mod" | &"lib" | &"main")) {
        path.pop();
    }
    path
}

/// Every `::`-joined path in `text` (`use` trees expanded: `a::{b, c::d}` is `a::b` and
/// `a::c::d`), whatever its first segment.
fn paths_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let (paths, end) = path_tree(text, i);
        out.extend(paths.into_iter().filter(|p| p.contains("::")));
        i = end.max(i + 1);
    }
    out
}

/// The paths of the path or `use` tree starting at `start`, and where it ends.
fn path_tree(text: &str, start: usize) -> (Vec<String>, usize) {
    let bytes = text.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = start;
    let mut prefix = String::new();
    loop {
        let from = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        prefix.push_str(&text[from..i]);
        if !text[i..].starts_with("::") {
            return (vec![prefix], i);
        }
        i += 2;
        if text[i..].starts_with('{') {
            i += 1;
            let mut paths = Vec::new();
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return (paths, i + 1);
                }
                if is_ident(bytes[i]) {
                    let (inner, end) = path_tree(text, i);
                    paths.extend(inner.into_iter().map(|p| {
                        if p == "self" {
                            prefix.clone()
                        } else {
                            format!("{prefix}::{p}")
                        }
                    }));
                    i = end;
                } else {
                    // `*`, `as` renames and the like: skipped to the next item.
                    while i < bytes.len() && bytes[i] != b',' && bytes[i] != b'}' {
                        i += 1;
                    }
                }
            }
        }
        if i >= bytes.len() || !is_ident(bytes[i]) {
            return (vec![prefix], i);
        }
        prefix.push_str("::");
    }
}

/// Depth-first from `node`: a node met again while it is on the path closes a circle.
fn visit<'a>(
    node: &'a str,
    graph: &'a BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
    circles: &mut Vec<String>,
) {
    if let Some(i) = path.iter().position(|f| *f == node) {
        circles.push(format!("{} → {node}", path[i..].join(" → ")));
        return;
    }
    if !done.insert(node) {
        return;
    }
    path.push(node);
    for next in graph.get(node).into_iter().flatten() {
        visit(next, graph, path, done, circles);
    }
    path.pop();
}

fn circles_of(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let (mut done, mut circles) = (BTreeSet::new(), Vec::new());
    for node in graph.keys() {
        visit(node, graph, &mut Vec::new(), &mut done, &mut circles);
    }
    circles
}

/// The circles among files, and among the modules of each folder: an import from
/// `core/admission/pod_mutation.rs` of `core/neonvm.rs` is an edge from `core::admission`
/// to `core::neonvm`, the two modules below their common parent.
fn circles(tree: &Tree) -> Vec<String> {
    let files = tree.graph();
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, imported) in &files {
        for other in imported {
            let (a, b) = (module_of(file), module_of(other));
            let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            if common < a.len() && common < b.len() {
                modules
                    .entry(a[..=common].join("::"))
                    .or_default()
                    .insert(b[..=common].join("::"));
            }
        }
    }
    let mut out = circles_of(&files);
    out.extend(circles_of(&modules));
    out
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

#[test]
fn no_import_circle_anywhere() {
    let tree = Tree::read();
    let graph = tree.graph();
    // The parser sees the edges it must.
    assert!(
        graph["operator/mod.rs"].contains("operator/election/mod.rs"),
        "{:?}",
        graph["operator/mod.rs"]
    );
    assert!(
        graph["main.rs"].contains("cli/mod.rs"),
        "{:?}",
        graph["main.rs"]
    );
    let found = circles(&tree);
    assert!(found.is_empty(), "imports in a circle: {found:#?}");
}

#[test]
fn a_planted_circle_is_found() {
    let tree = Tree::read();
    // Between modules of one folder: the rules importing the admission of pods.
    let planted = tree.planted(
        "core/rules/mod.rs",
        "use crate::core::admission::pod_mutation::decide;",
    );
    let found = circles(&planted);
    assert!(
        found.iter().any(|c| c.contains("core::rules")),
        "{found:#?}"
    );
    // Between two files of one folder.
    let planted = tree.planted("core/reference/mod.rs", "use crate::core::rules::RuleSet;");
    let found = circles(&planted);
    assert!(
        found.iter().any(|c| c.contains("core::reference")),
        "{found:#?}"
    );
}

/// The edges of the crate: the modules the pure core may never name, and the library
/// paths that do I/O.
const EDGES: [&str; 4] = ["operator", "cli", "registry", "api_requests"];
const IO: [&str; 14] = [
    "std::fs",
    "std::env",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::net::UdpSocket",
    "std::process",
    "tokio",
    "reqwest",
    "hyper",
    "kube::Api",
    "kube::Client",
    "kube::api::Api",
    "kube::runtime::watcher",
    "kube::runtime::controller",
];

/// What the core imports from the edges, and the I/O it names.
fn core_reaches_out(tree: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (file, code) in tree.files.iter().filter(|(f, _)| f.starts_with("core/")) {
        for imported in tree.imports(file) {
            if EDGES
                .iter()
                .any(|e| module_of(&imported).first() == Some(e))
            {
                out.push(format!("{file} → {imported}"));
            }
        }
        for path in paths_in(code) {
            let io = IO.iter().find(|io| {
                path.strip_prefix(**io)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
            });
            if let Some(io) = io {
                out.push(format!("{file} names {io}"));
            }
        }
    }
    out
}

#[test]
fn the_core_imports_no_edge_and_does_no_io() {
    let tree = Tree::read();
    assert!(tree.files.keys().filter(|f| f.starts_with("core/")).count() > 50);
    let found = core_reaches_out(&tree);
    assert!(found.is_empty(), "the core reaches out: {found:#?}");
}

#[test]
fn a_planted_edge_out_of_the_core_is_found() {
    let tree = Tree::read();
    let planted = tree.planted("core/rules/mod.rs", "use crate::registry::RegistryError;");
    assert_eq!(
        core_reaches_out(&planted),
        ["core/rules/mod.rs → registry/mod.rs"]
    );
    let planted = tree.planted("core/excerpt.rs", "fn f() { std::fs::read(\"x\"); }");
    assert_eq!(
        core_reaches_out(&planted),
        ["core/excerpt.rs names std::fs"]
    );
}

/// The files that wire the operator's rooms together: the operator's, and each floor's.
const WIRING: [&str; 3] = [
    "operator/mod.rs",
    "operator/replica/mod.rs",
    "operator/leader/mod.rs",
];

/// What the operator's rooms import of its wiring.
fn through_wiring(tree: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for file in tree.files.keys().filter(|f| f.starts_with("operator/")) {
        for imported in tree.imports(file) {
            // A wiring file's items are for the wiring above it alone.
            let above = WIRING.contains(&file.as_str())
                && (file == "operator/mod.rs" || imported != "operator/mod.rs");
            if WIRING.contains(&imported.as_str()) && !above {
                out.push(format!("{file} → {imported}"));
            }
        }
    }
    out
}

#[test]
fn the_operators_rooms_never_import_its_wiring() {
    let tree = Tree::read();
    let found = through_wiring(&tree);
    assert!(
        found.is_empty(),
        "items of the wiring imported by its rooms: {found:?}"
    );
    let planted = tree.planted(
        "operator/leader/vms/trigger.rs",
        "use crate::operator::leader::LeaderSide;",
    );
    assert_eq!(
        through_wiring(&planted),
        ["operator/leader/vms/trigger.rs → operator/leader/mod.rs"]
    );
}

/// The room of an operator file: its folder below `operator/` (one level deeper on a floor),
/// or the file itself.
fn room(file: &str) -> String {
    let parts: Vec<&str> = file.trim_start_matches("operator/").split('/').collect();
    let depth = if matches!(parts[0], "replica" | "leader") && parts.len() >= 2 {
        2
    } else {
        1
    };
    parts[..depth.min(parts.len())]
        .join("/")
        .trim_end_matches(".rs")
        .to_string()
}

/// The files that gather the parts of several rooms for others by design, and why.
const HUBS: [(&str, &str); 1] = [(
    "operator/replica/admission_sources.rs",
    "the one view of what admission makes of a pod answers from the rules in force, the \
     namespaces, the digests held and NeonVM's runner pods: every judge of a pod takes it whole",
)];

/// The hubs among the operator's files: a file other rooms import that itself imports from
/// more than two other rooms. Gathering the parts of many rooms is the wiring's job.
fn hubs(tree: &Tree) -> Vec<String> {
    let operator: Vec<&String> = tree
        .files
        .keys()
        .filter(|f| f.starts_with("operator/") && !WIRING.contains(&f.as_str()))
        .collect();
    let mut out = Vec::new();
    for file in operator
        .iter()
        .filter(|f| !HUBS.iter().any(|(h, _)| *h == f.as_str()))
    {
        let users: BTreeSet<String> = operator
            .iter()
            .filter(|f| room(f) != room(file) && tree.imports(f).contains(*file))
            .map(|f| room(f))
            .collect();
        let reaches: BTreeSet<String> = tree
            .imports(file)
            .iter()
            .filter(|f| f.starts_with("operator/"))
            .map(|f| room(f))
            .filter(|r| *r != room(file))
            .collect();
        if !users.is_empty() && reaches.len() > 2 {
            out.push(format!(
                "{file} (imports {reaches:?}; imported by {users:?})"
            ));
        }
    }
    out
}

#[test]
fn no_room_imports_a_hub() {
    let tree = Tree::read();
    let found = hubs(&tree);
    assert!(found.is_empty(), "hubs: {found:#?}");
    let planted = tree.planted(
        "operator/writes/event_recorder.rs",
        "use crate::operator::leader::vms::trigger::Trigger; \
         use crate::operator::leader::tags::tag_follower::TagFollower; \
         use crate::operator::replica::webhook::handler::Admitter;",
    );
    assert!(
        hubs(&planted)
            .iter()
            .any(|h| h.starts_with("operator/writes/event_recorder.rs")),
        "{:?}",
        hubs(&planted)
    );
}

/// The edges between leader rooms that are allowed, and why.
const LEADER_EDGES: [(&str, &str, &str); 4] = [
    (
        "*",
        "leader/mapping_statuses",
        "what changes a mapping's counts (a reconcile, a rule change, NeonVM's VMs, the \
         pods rolled or followed) names it to the status writer",
    ),
    (
        "*",
        "leader/recreation_budget",
        "one budget for every pod recreated on purpose: VMs, NeonVM's VMs, workloads",
    ),
    (
        "leader/tags",
        "leader/vms",
        "a moved tag queues the VMs that follow it",
    ),
    (
        "*",
        "leader/followed_tags",
        "the tags followed for VMs, NeonVM's VMs and pods, which the tag follower checks",
    ),
];

/// What a leader room imports of another leader room, outside [`LEADER_EDGES`].
fn leader_edges(tree: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for file in tree
        .files
        .keys()
        .filter(|f| f.starts_with("operator/leader/"))
    {
        if WIRING.contains(&file.as_str()) {
            continue;
        }
        for imported in tree.imports(file) {
            if !imported.starts_with("operator/leader/") || WIRING.contains(&imported.as_str()) {
                continue;
            }
            let (from, to) = (room(file), room(&imported));
            let allowed = LEADER_EDGES
                .iter()
                .any(|(f, t, _)| (*f == "*" || *f == from) && *t == to);
            if from != to && !allowed {
                out.push(format!("{file} → {imported}"));
            }
        }
    }
    out
}

#[test]
fn a_leader_room_imports_no_other_leader_room_but_the_named_edges() {
    let tree = Tree::read();
    assert!(
        tree.files
            .keys()
            .any(|f| f.starts_with("operator/leader/vms/")),
        "{:?}",
        tree.files.keys().collect::<Vec<_>>()
    );
    let found = leader_edges(&tree);
    assert!(
        found.is_empty(),
        "leader rooms importing each other: {found:#?}"
    );
    let planted = tree.planted(
        "operator/leader/workloads/workload_roller.rs",
        "use crate::operator::leader::vms::trigger::Trigger;",
    );
    assert_eq!(
        leader_edges(&planted),
        ["operator/leader/workloads/workload_roller.rs → operator/leader/vms/trigger.rs"]
    );
}

/// The names said twice: file names (a module's `mod.rs` and a folder's `tests.rs` aside),
/// folder names, and the names of public types.
fn names_said_twice(tree: &Tree) -> Vec<String> {
    let mut files: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut folders: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut types: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (path, code) in &tree.files {
        let parts: Vec<&str> = path.split('/').collect();
        let (name, dirs) = parts.split_last().unwrap();
        let stem = name.trim_end_matches(".rs");
        // `x.rs` beside its folder `x/` is one module.
        if !matches!(stem, "mod" | "tests" | "lib" | "main") {
            files.entry(stem).or_default().push(path);
        }
        for (i, dir) in dirs.iter().enumerate() {
            folders.entry(dir).or_default().insert(dirs[..=i].join("/"));
        }
        for line in code.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() >= 3
                && words[0] == "pub"
                && matches!(words[1], "struct" | "enum" | "type" | "trait")
            {
                let name: String = words[2]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                types.entry(name).or_default().push(path);
            }
        }
    }
    let mut out = Vec::new();
    for (stem, paths) in files {
        let modules: BTreeSet<String> = paths
            .iter()
            .map(|p| p.trim_end_matches(".rs").to_string())
            .collect();
        if modules.len() > 1 {
            out.push(format!("file {stem}.rs: {modules:?}"));
        }
    }
    for (dir, paths) in folders {
        if paths.len() > 1 {
            out.push(format!("folder {dir}/: {paths:?}"));
        }
    }
    for (name, paths) in types {
        if paths.len() > 1 {
            out.push(format!("type {name}: {paths:?}"));
        }
    }
    out
}

#[test]
fn a_name_says_one_thing() {
    let tree = Tree::read();
    let found = names_said_twice(&tree);
    assert!(found.is_empty(), "names said twice: {found:#?}");
    let planted = tree.planted("operator/tasks.rs", "pub struct RuleSet;");
    assert_eq!(
        names_said_twice(&planted),
        ["type RuleSet: [\"core/rules/rule_set.rs\", \"operator/tasks.rs\"]"]
    );
}

/// Each module file below `src/` (unit tests aside) and the first sentence of its doc.
fn module_docs() -> Vec<(String, Option<String>)> {
    let root = src();
    rust_files(&root)
        .into_iter()
        .filter(|path| path.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|path| {
            let name = path.strip_prefix(&root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let paragraph: Vec<&str> = text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").trim())
                .take_while(|l| !l.is_empty())
                .collect();
            let joined = paragraph.join(" ");
            let sentence = match joined.find(". ") {
                Some(end) => joined[..=end].to_string(),
                None => joined,
            };
            (name, (!sentence.is_empty()).then_some(sentence))
        })
        .collect()
}

/// Where the architecture page's generated list of modules starts and ends.
const MODULES_BEGIN: &str = "<!-- modules: generated from each module's doc by tests/structure.rs \
                             (UPDATE_ARCHITECTURE=1 cargo test --test structure rewrites it) -->";
const MODULES_END: &str = "<!-- end of modules -->";

/// The list of modules as the architecture page shows it: one row per file, with what its doc says first.
fn modules_table(docs: &[(String, Option<String>)]) -> String {
    let mut out = String::from("| module | what it owns (its doc's first sentence) |\n|---|---|\n");
    for (file, sentence) in docs {
        let sentence = sentence.as_deref().unwrap_or_default().replace('|', "\\|");
        let _ = writeln!(out, "| `{file}` | {sentence} |");
    }
    out
}

#[test]
fn every_module_says_what_it_owns_and_the_architecture_lists_it() {
    let docs = module_docs();
    let undocumented: Vec<&String> = docs
        .iter()
        .filter(|(_, sentence)| sentence.is_none())
        .map(|(file, _)| file)
        .collect();
    assert!(
        undocumented.is_empty(),
        "modules without a doc: {undocumented:?}"
    );
    let page_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/architecture.md");
    let page = std::fs::read_to_string(&page_path).unwrap();
    let (before, rest) = page
        .split_once(MODULES_BEGIN)
        .expect("docs/src/architecture.md has no generated list of modules");
    let (_, after) = rest.split_once(MODULES_END).unwrap();
    let expected = format!(
        "{before}{MODULES_BEGIN}\n\n{}\n{MODULES_END}{after}",
        modules_table(&docs)
    );
    if std::env::var_os("UPDATE_ARCHITECTURE").is_some() {
        std::fs::write(&page_path, &expected).unwrap();
        return;
    }
    assert!(
        page == expected,
        "docs/src/architecture.md's list of modules is stale (a module was added, moved, or its doc \
         changed): run `UPDATE_ARCHITECTURE=1 cargo test --test structure`"
    );
}
