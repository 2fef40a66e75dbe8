//! Validation of the names a caller hands the runtime: workflow kinds, queues, topics, keys
//! and step names. Each is checked before anything is written, so a bad name is a typed
//! [`Error::InvalidName`] and the journal is unchanged. The schema's CHECKs bound only the
//! length; the rules here are the real ones.

use crate::error::{Error, Result};

/// The longest workflow kind or queue name, in bytes of UTF-8.
pub const KIND_BYTES_MAX: usize = 128;

/// The longest topic, event key, idempotency key, deduplication key, execution name, timer
/// name or patch id, in bytes of UTF-8.
pub const KEY_BYTES_MAX: usize = 256;

/// The prefix of the runtime's own steps (`durably:sleep/<name>`, `durably:recv/<topic>`).
const RESERVED_STEP_PREFIX: &str = "durably:";

/// Refuses a workflow's step name in the runtime's reserved namespace, so replay can never
/// mistake a user step for a timer or a message.
pub(crate) fn check_step_name(name: &str) -> Result<()> {
    if name.starts_with(RESERVED_STEP_PREFIX) {
        return Err(Error::InvalidName {
            what: "step name",
            name: shown(name),
            reason: format!("names starting with {RESERVED_STEP_PREFIX:?} are the runtime's own"),
        });
    }
    Ok(())
}

/// What a validated name is, for the error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameKind {
    Kind,
    Queue,
    DedupKey,
    ExecutionName,
    Topic,
    EventKey,
    IdempotencyKey,
    TimerName,
    PatchId,
}

impl NameKind {
    fn describe(self) -> &'static str {
        match self {
            Self::Kind => "workflow kind",
            Self::Queue => "queue",
            Self::DedupKey => "deduplication key",
            Self::ExecutionName => "execution name",
            Self::Topic => "topic",
            Self::EventKey => "event key",
            Self::IdempotencyKey => "idempotency key",
            Self::TimerName => "timer name",
            Self::PatchId => "patch id",
        }
    }

    fn bytes_max(self) -> usize {
        match self {
            Self::Kind | Self::Queue => KIND_BYTES_MAX,
            Self::DedupKey
            | Self::ExecutionName
            | Self::Topic
            | Self::EventKey
            | Self::IdempotencyKey
            | Self::TimerName
            | Self::PatchId => KEY_BYTES_MAX,
        }
    }
}

/// Checks `name` against the rules for `what`: 1 to its maximum of bytes, and no control
/// character (C0, DEL or C1), which would break `durably ls` columns and terminal output.
pub(crate) fn check(what: NameKind, name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("it is empty".to_owned())
    } else if name.len() > what.bytes_max() {
        Some(format!(
            "it is {} bytes, over the {} byte maximum",
            name.len(),
            what.bytes_max()
        ))
    } else if name.chars().any(char::is_control) {
        Some("it holds a control character".to_owned())
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidName {
            what: what.describe(),
            name: shown(name),
            reason,
        }),
    }
}

/// The most characters of a rejected name an error message repeats.
const SHOWN_CHARS_MAX: usize = 64;

/// A rejected name as an error message shows it: at most [`SHOWN_CHARS_MAX`] characters, so a
/// megabyte-long name does not become a megabyte-long message. `Debug` formatting of the
/// message escapes its control characters.
fn shown(name: &str) -> String {
    name.chars().take(SHOWN_CHARS_MAX).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Lengths are counted in bytes, at both ends of the range.
    #[test]
    fn lengths_are_bounded_in_bytes() {
        assert!(check(NameKind::Kind, "k").is_ok());
        assert!(check(NameKind::Kind, &"k".repeat(KIND_BYTES_MAX)).is_ok());
        assert!(check(NameKind::Queue, &"q".repeat(KIND_BYTES_MAX + 1)).is_err());
        assert!(check(NameKind::Topic, &"t".repeat(KEY_BYTES_MAX + 1)).is_err());
        assert!(check(NameKind::Topic, &"t".repeat(KEY_BYTES_MAX)).is_ok());
        // 129 characters, 258 bytes: over for a topic, though the character count is not.
        assert!(check(NameKind::Topic, &"é".repeat(129)).is_err());
        assert!(check(NameKind::EventKey, "").is_err());
    }

    /// C0 controls, DEL and C1 controls are refused; other Unicode is a name like any other.
    #[test]
    fn control_characters_are_refused() {
        for name in ["a\nb", "tab\there", "del\u{7f}", "c1\u{85}", "\u{0}"] {
            let error = check(NameKind::IdempotencyKey, name).unwrap_err();
            assert!(
                matches!(
                    &error,
                    Error::InvalidName {
                        what: "idempotency key",
                        ..
                    }
                ),
                "{error}"
            );
        }
        assert!(check(NameKind::Topic, "approval ✓ für Ärger").is_ok());
    }

    /// Step names in the runtime's namespace are refused; others pass.
    #[test]
    fn reserved_step_names_are_refused() {
        assert!(check_step_name("durably:sleep/x").is_err());
        assert!(check_step_name("charge card").is_ok());
        assert!(check_step_name("Durably:sleep").is_ok());
    }

    /// The message repeats a bounded prefix of the name, with controls escaped.
    #[test]
    fn messages_show_a_bounded_escaped_name() {
        let long = format!("\n{}", "x".repeat(10_000));
        let message = check(NameKind::Topic, &long).unwrap_err().to_string();
        assert!(message.len() < 300, "{message}");
        assert!(message.contains("\\n"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }
}
