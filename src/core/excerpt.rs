//! Text from outside the operator — a registry's answer, a connection error, the API server's
//! words about a tenant's object — made fit for a status, an Event or a log: control and
//! bidirectional-override characters become spaces, runs of white space one space, and the
//! whole is cut to a bound. Pure.

/// Most characters of outside text that reach a status, an Event or a log.
pub const EXCERPT_CHARS: usize = 256;

/// `text`, printable and at most [`EXCERPT_CHARS`] characters long (`…` marks a cut).
#[must_use]
pub fn excerpt(text: &str) -> String {
    excerpt_to(text, EXCERPT_CHARS)
}

/// `text`, printable and at most `max` characters long (`…` marks a cut).
#[must_use]
pub fn excerpt_to(text: &str, max: usize) -> String {
    // Words (runs of printable characters), each once, until one more than fits is known.
    let mut kept: Vec<char> = Vec::with_capacity(max.min(text.len()) + 1);
    let mut space = false;
    for c in text.chars().map(printable) {
        if c == ' ' {
            space = !kept.is_empty();
            continue;
        }
        if std::mem::take(&mut space) {
            kept.push(' ');
        }
        kept.push(c);
        if kept.len() > max {
            break;
        }
    }
    if kept.len() > max {
        kept.truncate(max.saturating_sub(1));
        while kept.last() == Some(&' ') {
            kept.pop();
        }
        if max > 0 {
            kept.push('…');
        }
    }
    kept.into_iter().collect()
}

/// `text` cut to at most `max_bytes` bytes on a character boundary, `…` marking a cut: our
/// own messages, bounded for a schema's `maxLength` (which counts characters, so bytes bound
/// it too).
#[must_use]
pub fn cut_bytes(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let ellipsis = '…'.len_utf8();
    let room = if max_bytes >= ellipsis {
        max_bytes - ellipsis
    } else {
        max_bytes
    };
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if max_bytes >= ellipsis {
        format!("{}…", &text[..end])
    } else {
        text[..end].to_string()
    }
}

/// White space for every character a terminal or a UI would act on rather than show.
fn printable(c: char) -> char {
    let invisible = c.is_control()
        || c.is_whitespace()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}');
    if invisible { ' ' } else { c }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_runs_of_space_become_one_space() {
        assert_eq!(
            excerpt("  line one\r\n\tline\u{1b}[31m two\u{202e} "),
            "line one line [31m two"
        );
        assert_eq!(excerpt("\n\n"), "");
        assert_eq!(excerpt("plain"), "plain");
    }

    #[test]
    fn long_text_is_cut_with_an_ellipsis_within_the_bound() {
        let long = "é".repeat(1000);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt_to("abcdef", 6), "abcdef");
        assert_eq!(excerpt_to("abcdefg", 6), "abcde…");
        assert_eq!(excerpt_to("abc def", 4), "abc…");
        assert_eq!(excerpt_to("abc", 0), "");
        assert_eq!(
            excerpt_to("abcd ", 4),
            "abcd",
            "trailing space is no more text"
        );
        assert_eq!(excerpt_to("abcd  \n", 4), "abcd");
        for n in 0..40 {
            let text = "word ".repeat(n);
            for max in 1..12 {
                assert!(excerpt_to(&text, max).chars().count() <= max, "{n} {max}");
            }
        }
    }

    #[test]
    fn bytes_are_cut_on_a_character_boundary() {
        assert_eq!(cut_bytes("short", 10), "short");
        let cut = cut_bytes(&"é".repeat(100), 11);
        assert!(cut.len() <= 11 && cut.ends_with('…'), "{cut}");
        assert_eq!(cut_bytes("abcdefghij", 6), "abc…");
        for max in 0..4 {
            assert!(cut_bytes("abcdefghij", max).len() <= max, "{max}");
        }
    }
}
