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

/// A journaled payload (an input, output, step result or error): JSON text as stored.
///
/// It is kept as text so that listing records costs no parsing; decode it into your type with
/// [`Payload::decode`], or into a [`serde_json::Value`] with [`Payload::to_value`]. It
/// serializes as that text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Payload(String);

impl Payload {
    /// Wraps JSON text read from the journal.
    pub(crate) fn from_stored(text: String) -> Self {
        Self(text)
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// Decodes the payload into `T`.
    ///
    /// # Errors
    /// [`Error::Json`] when the text does not decode as `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.0).map_err(|source| Error::Json {
            what: "a journaled payload".to_owned(),
            source,
        })
    }

    /// Decodes the payload into a JSON value.
    ///
    /// # Errors
    /// [`Error::Json`] when the text is not JSON (a damaged row).
    pub fn to_value(&self) -> Result<serde_json::Value> {
        self.decode()
    }
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
