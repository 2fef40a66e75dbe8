//! Making text from the database safe to print. A payload or a name written by a program must
//! not be able to drive the terminal (move the cursor, change colours, set the window title,
//! reorder text with bidirectional overrides), so every string read from a journal goes through
//! [`escape`] before it is printed, in tables and in `--json` output alike.

use durably::PayloadPreview;

use std::fmt::Write as _;

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

/// `value` with every string in it, object keys included, passed through [`escape`]: JSON read
/// from the database (a status detail, a failure) printed whole, but never raw.
pub fn escape_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => Value::String(escape(text)),
        Value::Array(items) => Value::Array(items.iter().map(escape_json).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| (escape(key), escape_json(value)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

/// Characters that reorder the text around them ("Trojan Source").
fn is_bidi_control(character: char) -> bool {
    matches!(
        character,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// A bounded, escaped preview of a stored payload, as the journal read it: its head (at most
/// [`durably::PREVIEW_CHARS_MAX`] characters), with `…` and the full size when that is not all
/// of it. A payload over the journal's cap was not read, and says so.
pub fn preview(payload: &PayloadPreview) -> String {
    match &payload.head {
        Some(head) if payload.is_whole() => escape(head),
        Some(head) => format!("{}… ({} bytes)", escape(head), payload.bytes),
        None => format!(
            "… ({} bytes, over the journal's payload cap: not read)",
            payload.bytes
        ),
    }
}

/// [`preview`] of an optional payload.
pub fn preview_opt(payload: Option<&PayloadPreview>) -> Option<String> {
    payload.map(preview)
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
    fn json_read_from_the_database_is_escaped_in_keys_and_values() {
        let stored = serde_json::json!({ "\u{1b}key": ["\u{202e}x", 1, null], "n": 2 });
        assert_eq!(
            escape_json(&stored),
            serde_json::json!({ "\\ekey": ["\\u{202e}x", 1, null], "n": 2 })
        );
    }

    #[test]
    fn ordinary_text_is_untouched() {
        let text = r#"{"order": 42, "name": "Zoë ✓", "path": "C:\\x"}"#;
        assert_eq!(escape(text), text);
    }

    fn head(text: &str, bytes: u64) -> PayloadPreview {
        PayloadPreview {
            head: Some(text.to_owned()),
            bytes,
        }
    }

    #[test]
    fn previews_are_escaped_and_say_when_they_are_cut() {
        let shown = preview(&head(&"\u{1b}".repeat(96), 10_000));
        assert!(!shown.contains('\u{1b}'));
        assert!(shown.ends_with("… (10000 bytes)"));
        assert_eq!(preview(&head("\"short\"", 7)), "\"short\"");
        let unread = PayloadPreview {
            head: None,
            bytes: 104_857_602,
        };
        assert_eq!(
            preview(&unread),
            "… (104857602 bytes, over the journal's payload cap: not read)"
        );
    }
}
