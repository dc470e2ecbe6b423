//! The book (`docs/`) and README.md, offline: the generated reference pages are current; every
//! flag, figure and table row of the README the book replaced is in the book; the book says
//! which version it documents; every link, anchor and repository path named resolves; every
//! chapter is in the summary. (`scripts/book` builds it with mdBook; `scripts/test` does too.)

#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use imagemap::book::{api_page::api_page, cli_page::cli_page, metrics_page::metrics_page};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn src() -> PathBuf {
    Path::new(ROOT).join("docs/src")
}

/// Every markdown file under `dir`, by path.
fn pages(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(pages(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            found.insert(path.clone(), std::fs::read_to_string(&path).unwrap());
        }
    }
    found
}

#[test]
fn the_generated_reference_pages_are_current() {
    let crds = std::fs::read_to_string(Path::new(ROOT).join("crds/imagemap.dev.yaml")).unwrap();
    let generated = [
        ("reference/cli.md", cli_page(&imagemap::cli::Cli::command())),
        ("reference/api.md", api_page(&crds).unwrap()),
        (
            "reference/metrics.md",
            metrics_page(
                &imagemap::operator::metrics::exposition(),
                imagemap::operator::metrics::LABELS,
            )
            .unwrap(),
        ),
    ];
    let mut stale = Vec::new();
    for (page, text) in generated {
        let path = src().join(page);
        if std::env::var_os("UPDATE_BOOK").is_some() {
            std::fs::create_dir_all(src().join("reference")).unwrap();
            std::fs::write(&path, text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(format!("docs/src/{page}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} stale (what it documents changed): run `UPDATE_BOOK=1 cargo test --test book` to \
         generate it again",
        stale.join(", ")
    );
}

/// Text with every run of whitespace made one space.
fn normalized(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_flag_figure_and_table_row_of_the_old_readme_is_in_the_book() {
    let book = normalized(&pages(&src()).into_values().collect::<Vec<_>>().join("\n"));
    let facts =
        std::fs::read_to_string(Path::new(ROOT).join("tests/book/readme-facts.tsv")).unwrap();
    let missing: Vec<&str> = facts
        .lines()
        .filter(|line| {
            let (_, fact) = line.split_once('\t').unwrap();
            !book.contains(&normalized(fact))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} facts of the README the book replaced are not in docs/src/:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_book_says_which_version_it_documents() {
    let introduction = std::fs::read_to_string(src().join("introduction.md")).unwrap();
    let says = format!(
        "This book documents imagemap {}.",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        introduction.contains(&says),
        "docs/src/introduction.md should say {says:?}"
    );
}

/// The anchor mdBook (and the code host) gives a heading: lowercased, spaces to `-`, other
/// characters but letters, digits, `_` and `-` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown page's headings (outside code blocks), a repeated one numbered
/// as mdBook does (`name`, `name-1`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = anchor(heading);
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The targets of the markdown links and images of `text` (outside code).
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            found.push(tail[..end].trim().to_string());
            rest = &tail[end..];
        }
    }
    found
}

fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join("")
}

/// The code spans of `text` (outside code blocks).
fn code_spans(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .flat_map(|line| {
            line.split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 1)
                .map(|(_, span)| span.to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Where a link from `page` leads, and to which anchor; `None` for another site.
fn resolve_link(page: &Path, target: &str) -> Option<(PathBuf, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
        return None;
    }
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment.to_string())),
        None => (target, None),
    };
    let path = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(file)
    };
    Some((path, fragment))
}

/// What is wrong with the links of `page` (`text`): a file or an anchor that does not exist.
fn broken_links(page: &Path, text: &str, within: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    for target in links(text) {
        let Some((path, fragment)) = resolve_link(page, &target) else {
            continue;
        };
        let shown = page
            .strip_prefix(ROOT)
            .unwrap_or(page)
            .display()
            .to_string();
        let Ok(path) = path.canonicalize() else {
            broken.push(format!("{shown}: {target}: no such file"));
            continue;
        };
        if !path.starts_with(within) {
            broken.push(format!("{shown}: {target}: outside {}", within.display()));
            continue;
        }
        if let Some(fragment) = fragment
            && path.extension().is_some_and(|e| e == "md")
            && !anchors(&std::fs::read_to_string(&path).unwrap()).contains(&fragment)
        {
            broken.push(format!(
                "{shown}: {target}: no heading has the anchor #{fragment}"
            ));
        }
    }
    broken
}

/// The repository paths a code span names (those that begin with a folder of the
/// repository), and whether each exists.
fn missing_paths(page: &Path, text: &str) -> Vec<String> {
    const FOLDERS: [&str; 10] = [
        "scripts/",
        "src/",
        "tests/",
        "charts/",
        "deploy/",
        "examples/",
        "crds/",
        "benches/",
        "docs/",
        ".ci/",
    ];
    let shown = page
        .strip_prefix(ROOT)
        .unwrap_or(page)
        .display()
        .to_string();
    code_spans(text)
        .into_iter()
        .filter_map(|span| {
            let first = span.split_whitespace().next()?.to_string();
            let path = first.trim_end_matches([',', '.', ':', ';', ')']);
            if !FOLDERS.iter().any(|f| path.starts_with(f))
                || path.contains(['*', '<', '{', '$'])
                || path.contains("NAME")
            {
                return None;
            }
            // A test's name after the file (`tests/admission.rs::a_test`).
            let path = path.split("::").next().unwrap_or(path);
            (!Path::new(ROOT).join(path).exists()).then(|| format!("{shown}: `{path}`"))
        })
        .collect()
}

#[test]
fn every_link_anchor_and_repository_path_resolves() {
    let root = Path::new(ROOT).canonicalize().unwrap();
    let book = src().canonicalize().unwrap();
    let mut broken = Vec::new();
    for (page, text) in pages(&src()) {
        broken.extend(broken_links(&page, &text, &book));
        broken.extend(missing_paths(&page, &text));
    }
    let readme = root.join("README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    broken.extend(broken_links(&readme, &text, &root));
    broken.extend(missing_paths(&readme, &text));
    assert!(broken.is_empty(), "broken:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_summary_and_every_entry_exists() {
    let summary = std::fs::read_to_string(src().join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary)
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(|l| src().join(l))
        .collect();
    let present: BTreeSet<PathBuf> = pages(&src())
        .into_keys()
        .filter(|p| !p.ends_with("SUMMARY.md"))
        .collect();
    assert_eq!(
        listed.difference(&present).collect::<Vec<_>>(),
        Vec::<&PathBuf>::new(),
        "listed in docs/src/SUMMARY.md, but missing"
    );
    assert_eq!(
        present.difference(&listed).collect::<Vec<_>>(),
        Vec::<&PathBuf>::new(),
        "in docs/src/, but not in SUMMARY.md"
    );
}

#[test]
fn the_readme_stays_a_first_read() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines; at most 150");
}

#[test]
fn the_link_checker_finds_what_is_broken() {
    let page = src().join("rules.md");
    let broken = broken_links(
        &page,
        "[a](nowhere.md) [b](rules.md#no-such-heading) [c](https://example.com) `[d](x.md)`",
        &src().canonicalize().unwrap(),
    );
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert_eq!(
        missing_paths(&page, "`scripts/no-such-script` `scripts/test`").len(),
        1
    );
    assert_eq!(
        anchors("# A `b` (c)\n```\n# not\n```\n## A b c\n"),
        ["a-b-c", "a-b-c-1"].map(String::from).into()
    );
}
