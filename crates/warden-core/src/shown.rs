//! Text that others chose (a model's tool names and arguments, a tool's description, a policy's
//! values, the call log's records) made safe to print for people. A terminal acts on control
//! characters rather than showing them: an escape sequence in a tool name can erase rows, move
//! the cursor to forge a row, or set the window title, and a line break splits a table. Every
//! printer writes such text through this one rule, which shows each of those characters as a
//! visible escape instead.

use std::borrow::Cow;
use std::fmt::{self, Display, Write as _};

/// Whether a terminal could act on `c` rather than show it: the C0 controls and DEL, the C1
/// controls (U+009B opens a control sequence as `ESC [` does), the line and paragraph
/// separators, and the bidirectional controls that reorder what follows them.
fn acts(c: char) -> bool {
    matches!(c,
        '\0'..='\x1f' | '\x7f'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `text` with every character a terminal could act on written as a visible escape: `\n`,
/// `\r`, `\t`, `\x1b` for the C0 controls and DEL, `\u{9b}` for the rest. Borrowed when there
/// is nothing to escape.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_where(text, acts)
}

/// As [`escape`], but line breaks stay: for prose of several lines (a model's answer), where
/// splitting lines is what the text means to do.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && acts(c))
}

/// JSON text with every character a terminal could act on written as JSON's `\uXXXX`: the
/// same document to a parser, inert on a terminal. JSON writers already escape the C0
/// controls inside strings (outside them, a C0 is the document's own line break or
/// indentation, which stays); DEL, the C1 and the bidirectional controls they write as they
/// are.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    let escaped = |c: char| c > '\x1f' && acts(c);
    // What it escapes is DEL or beyond ASCII: most documents are told clean by the fast
    // scans of bytes (a batch's answers are megabytes), not a look at each character.
    if (json.is_ascii() && !json.contains('\x7f')) || !json.chars().any(escaped) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if escaped(c) {
            // Every such character is in the Basic Multilingual Plane: one `\uXXXX` each.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn escape_where(text: &str, escaped: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !escaped(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0'..='\x7f' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// Displays a value through [`escape`], honouring width and alignment (`{:<24}`), so a table
/// cell holds what it shows.
pub struct Escaped<T>(pub T);

impl<T: Display> Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        f.pad(&escape(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        assert_eq!(escape("read-file"), "read-file");
        assert!(matches!(escape("héllo wörld ✓"), Cow::Borrowed(_)));
        assert_eq!(escape("a\x1b[2Kb"), "a\\x1b[2Kb");
        assert_eq!(escape("x\ny\r\tz"), "x\\ny\\r\\tz");
        assert_eq!(escape("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
        assert_eq!(escape("del\x7f"), "del\\x7f");
        assert_eq!(escape("csi\u{9b}2J"), "csi\\u{9b}2J");
        assert_eq!(escape("nel\u{85}"), "nel\\u{85}");
        assert_eq!(escape("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(escape("\u{2066}a\u{2069}"), "\\u{2066}a\\u{2069}");
        assert_eq!(escape("ls\u{2028}"), "ls\\u{2028}");
    }

    #[test]
    fn lines_can_stay() {
        assert_eq!(escape_lines("one\ntwo\x1b[A"), "one\ntwo\\x1b[A");
        assert_eq!(escape_lines("a\r\nb"), "a\\r\nb");
    }

    #[test]
    fn json_stays_the_same_document() {
        let value = serde_json::json!({"name": "a\u{9b}2J\x7f\u{202e}\x1b\n"});
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        let safe = escape_json(&text);
        assert!(!safe.chars().any(|c| c != '\n' && acts(c)), "{safe}");
        assert_eq!(safe.lines().count(), text.lines().count(), "{safe}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).ok(),
            Some(value)
        );
    }

    #[test]
    fn cells_keep_their_width() {
        assert_eq!(format!("[{:<8}]", Escaped("a\nb")), "[a\\nb    ]");
        assert_eq!(format!("[{:>3}]", Escaped(7)), "[  7]");
    }
}
