//! Payloads the runtime writes and reads (inputs, messages, event values): JSON under the
//! journal's payload cap, refused over it before anything is written.

use durably_journal::{Error as JournalError, Journal, Payload};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Encodes `value` as JSON under the journal's payload cap, as the journal encodes its own
/// payloads.
pub(crate) fn encode(value: &impl Serialize, what: &str, journal: &Journal) -> Result<Payload> {
    journal
        .encode_payload(value, what)
        .map_err(|error| match error {
            JournalError::PayloadTooLarge { what, bytes, max } => {
                Error::PayloadTooLarge { what, bytes, max }
            }
            JournalError::Json { what, source } => Error::Json { what, source },
            other => Error::Journal(other),
        })
}

/// Decodes stored JSON into the caller's type, refusing text over the journal's payload cap.
pub(crate) fn decode<T: DeserializeOwned>(text: &str, what: &str, journal: &Journal) -> Result<T> {
    check_size(text, what, journal)?;
    serde_json::from_str(text).map_err(|source| Error::Json {
        what: what.to_owned(),
        source,
    })
}

fn check_size(text: &str, what: &str, journal: &Journal) -> Result<()> {
    let max = journal.payload_bytes_max();
    if text.len() > max {
        return Err(Error::PayloadTooLarge {
            what: what.to_owned(),
            bytes: text.len(),
            max,
        });
    }
    Ok(())
}

/// Whether two JSON texts hold the same value: the same text, or the same value in another
/// spelling (keys of a map serialized in another order).
pub(crate) fn same_json(stored: &str, sent: &str) -> bool {
    stored == sent
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(stored),
                serde_json::from_str::<serde_json::Value>(sent),
            ),
            (Ok(a), Ok(b)) if a == b
        )
}
