//! Plain-text tables, as kubectl prints them: columns padded to their widest cell, three
//! spaces apart, no trailing blanks.

use std::fmt::Write as _;

/// `rows` (the first is the header) as lines.
pub fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}   ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let rows = [
            ["A".to_string(), "B".into(), "C".into()],
            ["long".into(), String::new(), "x".into()],
        ];
        assert_eq!(super::render(&rows), "A      B   C\nlong       x\n");
    }
}
