//! Markdown pieces the generated pages share: a table cell, and a table.

/// `text` as one table cell: pipes escaped, lines joined (a blank line between paragraphs
/// becomes `<br>`).
#[must_use]
pub fn cell(text: &str) -> String {
    let paragraphs: Vec<String> = text
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect();
    paragraphs.join("<br>").replace('|', "\\|")
}

/// A table of `header` and `rows` (cells already escaped with [`cell`]).
#[must_use]
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut lines = vec![
        format!("| {} |", header.join(" | ")),
        format!("|{}", "---|".repeat(header.len())),
    ];
    lines.extend(rows.iter().map(|row| format!("| {} |", row.join(" | "))));
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_line_with_its_pipes_escaped() {
        assert_eq!(cell("a |b|\n c\n\nd"), "a \\|b\\| c<br>d");
        assert_eq!(
            table(&["x", "y"], &[vec!["1".into(), "2".into()]]),
            "| x | y |\n|---|---|\n| 1 | 2 |\n"
        );
    }
}
