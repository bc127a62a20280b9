//! Text read from a store, shown to a person.
//!
//! Workflow ids, names, error messages, stream and schedule names are chosen by programs and may
//! hold any character. Printed raw, an escape sequence in one could rewrite the terminal (move
//! the cursor, recolor or hide lines, set the window title) and a newline could forge a line of
//! output. Every human-readable print goes through [`escaped`]; JSON output is left exact, since
//! JSON escapes control characters itself.

use std::fmt;

/// `text` for a terminal: control characters (C0, DEL, C1) and the invisible bidirectional
/// controls are written as escapes (`\n`, `\t`, `\r`, `\u{1b}`); everything else as it is.
pub(crate) fn escaped(text: &str) -> Escaped<'_> {
    Escaped {
        text,
        keep_newlines: false,
    }
}

/// Like [`escaped`], but newlines stay: for multi-line messages such as errors.
pub(crate) fn escaped_lines(text: &str) -> Escaped<'_> {
    Escaped {
        text,
        keep_newlines: true,
    }
}

/// Text shown with its control characters escaped; see [`escaped`].
pub(crate) struct Escaped<'a> {
    text: &'a str,
    keep_newlines: bool,
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.text;
        while let Some(at) = rest.find(|c| needs_escape(c, self.keep_newlines)) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c => write!(f, "\\u{{{:x}}}", c as u32)?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

fn needs_escape(c: char, keep_newlines: bool) -> bool {
    if c == '\n' {
        return !keep_newlines;
    }
    // Bidirectional overrides and isolates reorder what follows them on screen.
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_everything_else_is_kept() {
        assert_eq!(escaped("plain é 日").to_string(), "plain é 日");
        assert_eq!(
            escaped("a\u{1b}[31mb\nc\td\re\u{7f}f\u{9b}g\u{202e}h").to_string(),
            "a\\u{1b}[31mb\\nc\\td\\re\\u{7f}f\\u{9b}g\\u{202e}h"
        );
        assert_eq!(escaped("").to_string(), "");
    }

    #[test]
    fn multi_line_text_keeps_its_newlines_only() {
        assert_eq!(
            escaped_lines("one\ntwo\u{1b}]0;x\u{7}").to_string(),
            "one\ntwo\\u{1b}]0;x\\u{7}"
        );
    }
}
