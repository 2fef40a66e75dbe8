//! Payloads are JSON text, capped in size on write and on read. Over the cap is a typed error
//! and nothing is written.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Encodes `value` as JSON, refusing it when it exceeds `bytes_max`.
pub(crate) fn encode(
    value: &(impl Serialize + ?Sized),
    what: &str,
    bytes_max: usize,
) -> Result<String> {
    let text = serde_json::to_string(value).map_err(|source| Error::Json {
        what: what.to_owned(),
        source,
    })?;
    check(&text, what, bytes_max)?;
    Ok(text)
}

/// Decodes journaled JSON into the caller's type, refusing text over `bytes_max`.
pub(crate) fn decode<T: DeserializeOwned>(text: &str, what: &str, bytes_max: usize) -> Result<T> {
    check(text, what, bytes_max)?;
    serde_json::from_str(text).map_err(|source| Error::Json {
        what: what.to_owned(),
        source,
    })
}

fn check(text: &str, what: &str, bytes_max: usize) -> Result<()> {
    if text.len() > bytes_max {
        return Err(Error::PayloadTooLarge {
            what: what.to_owned(),
            bytes: text.len(),
            max: bytes_max,
        });
    }
    Ok(())
}
