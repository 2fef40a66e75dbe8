//! Making text from the database safe to print. A payload or a name written by a program must
//! not be able to drive the terminal (move the cursor, change colours, set the window title,
//! reorder text with bidirectional overrides), so every string read from a journal goes through
//! [`escape`] before it is printed, in tables and in `--json` output alike.

use durably::Payload;

use std::fmt::Write as _;

/// The most characters of a payload that `show` prints; the rest is cut and marked.
pub const PREVIEW_CHARS_MAX: usize = 96;

/// Returns `text` with every control character (C0, DEL, C1) and every bidirectional formatting
/// character replaced by a visible escape: `\n`, `\r`, `\t`, `\e` for ESC, `\xNN` for the other
/// control characters below U+0100, and `\u{NNNN}` above. Everything else is kept as is.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            '\u{1b}' => escaped.push_str("\\e"),
            c if c.is_control() && u32::from(c) < 0x100 => {
                let _ = write!(escaped, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() || is_bidi_control(c) => {
                let _ = write!(escaped, "\\u{{{:04x}}}", u32::from(c));
            }
            c => escaped.push(c),
        }
    }
    escaped
}

/// Characters that reorder the text around them ("Trojan Source").
fn is_bidi_control(character: char) -> bool {
    matches!(
        character,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// A bounded, escaped preview of a stored payload: at most [`PREVIEW_CHARS_MAX`] characters
/// of the stored text (before escaping), with `…` and the full size when it was cut.
pub fn preview(text: &str) -> String {
    let total_chars = text.chars().count();
    if total_chars <= PREVIEW_CHARS_MAX {
        return escape(text);
    }
    let head: String = text.chars().take(PREVIEW_CHARS_MAX).collect();
    format!("{}… ({} bytes)", escape(&head), text.len())
}

/// [`preview`] of an optional payload.
pub fn preview_opt(payload: Option<&Payload>) -> Option<String> {
    payload.map(|payload| preview(payload.as_json()))
}

#[cfg(test)]
mod tests {
    //! What these prove: no character that a terminal interprets reaches the output, and
    //! previews stay bounded whatever the payload size.
    use super::*;

    #[test]
    fn ansi_sequences_are_made_visible() {
        assert_eq!(escape("\u{1b}[31mred"), "\\e[31mred");
        assert_eq!(escape("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(escape("bell\u{7}"), "bell\\x07");
        assert_eq!(escape("del\u{7f}"), "del\\x7f");
        // C1 CSI, which some terminals honour like ESC [.
        assert_eq!(escape("\u{9b}2J"), "\\x9b2J");
    }

    #[test]
    fn bidirectional_overrides_are_made_visible() {
        assert_eq!(escape("abc\u{202e}def"), "abc\\u{202e}def");
        assert_eq!(escape("\u{2066}x"), "\\u{2066}x");
    }

    #[test]
    fn ordinary_text_is_untouched() {
        let text = r#"{"order": 42, "name": "Zoë ✓", "path": "C:\\x"}"#;
        assert_eq!(escape(text), text);
    }

    #[test]
    fn previews_are_bounded_and_escaped() {
        let long = "\u{1b}".repeat(10_000);
        let shown = preview(&long);
        assert!(!shown.contains('\u{1b}'));
        assert!(shown.chars().count() < PREVIEW_CHARS_MAX * 2 + 20);
        assert!(shown.ends_with("(10000 bytes)"));
        assert_eq!(preview("\"short\""), "\"short\"");
    }
}
