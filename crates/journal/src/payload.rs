//! Payloads are JSON text, capped in size on write and on read. Over the cap is a typed error
//! and nothing is written.
//!
//! Invariant: a query that reads payloads decides in SQL, from `octet_length`, whether a payload
//! is under the cap before it reads it. SQLite answers `octet_length` of a stored text from the
//! record's header, without reading the value (its `OPFLAG_BYTELENARG`), so a payload over the
//! cap is never loaded, by SQLite or by this crate, whatever its size: reading one costs what
//! refusing it costs. PostgreSQL stores payloads as `json`, which `octet_length` measures as
//! text (`column::text`): the value is read to be measured there, but never sent over the cap.

use std::borrow::Cow;

use durably_db::{Dialect, Row};
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
    /// The JSON text.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// `value` encoded as a payload, refused over `bytes_max` ([`encode`]).
    pub(crate) fn encoded(value: &impl Serialize, what: &str, bytes_max: usize) -> Result<Self> {
        encode(value, what, bytes_max).map(Self)
    }

    /// The JSON text, moved out.
    pub(crate) fn into_json(self) -> String {
        self.0
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

/// How many characters of a payload a preview holds at most ([`PayloadPreview::head`]).
pub const PREVIEW_CHARS_MAX: u32 = 96;

/// A journaled payload as a listing shows it: its first characters and its size, read in SQL
/// with `substr` and `octet_length`, so that listing a payload of any size costs at most the
/// journal's payload cap, and a payload over the cap costs nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PayloadPreview {
    /// The first [`PREVIEW_CHARS_MAX`] characters of the JSON text; `None` when the payload is
    /// over the journal's payload cap, and so was not read at all.
    pub head: Option<String>,
    /// The size of the whole payload, in bytes.
    pub bytes: u64,
}

/// Payload `column` as an operand of `octet_length` and `substr`: the column itself on SQLite,
/// whose `octet_length` of a column skips reading the value; as text on PostgreSQL, whose
/// `json` has neither function.
fn as_text(column: &str, dialect: Dialect) -> Cow<'_, str> {
    match dialect {
        Dialect::Sqlite => Cow::Borrowed(column),
        Dialect::Postgres => Cow::Owned(format!("{column}::text")),
    }
}

impl PayloadPreview {
    /// SQL selecting payload `column` as a preview's two result columns, for `dialect`: its
    /// first [`PREVIEW_CHARS_MAX`] characters when it is at most `bytes_max` bytes (SQL: an
    /// integer literal or a parameter), NULL otherwise, and its size in bytes. `substr` reads
    /// the whole value before it cuts it, so it runs only on a payload under the cap.
    pub fn select_sql(column: &str, bytes_max: &str, dialect: Dialect) -> String {
        let text = as_text(column, dialect);
        format!(
            "CASE WHEN octet_length({text}) <= {bytes_max} \
                  THEN substr({text}, 1, {PREVIEW_CHARS_MAX}) END, \
             octet_length({text})"
        )
    }

    /// Whether [`PayloadPreview::head`] is the whole payload.
    pub fn is_whole(&self) -> bool {
        self.head
            .as_ref()
            .is_some_and(|head| head.len() as u64 == self.bytes)
    }
}

/// How a reading query reads a payload column: whole ([`Payload`]) or as a preview
/// ([`PayloadPreview`]). Either way the payload's size is read first, and a payload over
/// `bytes_max` is not read at all.
pub(crate) trait PayloadColumn: Sized {
    /// SQL selecting payload `column` as two result columns, for `dialect`: what is read of it
    /// (NULL when nothing is) and its size in bytes. `bytes_max` is the journal's own cap, an
    /// integer, so it is written into the statement, which is cached per text.
    fn select(column: &str, bytes_max: usize, dialect: Dialect) -> String;

    /// The payload read by [`PayloadColumn::select`] at `index` and `index + 1`, or `None` for
    /// a NULL column. `what` names the payload in an error.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] for a whole payload over `bytes_max`; a storage error.
    fn read(
        row: &Row<'_>,
        index: usize,
        bytes_max: usize,
        what: impl FnOnce() -> String,
    ) -> Result<Option<Self>>;
}

impl PayloadColumn for Payload {
    fn select(column: &str, bytes_max: usize, dialect: Dialect) -> String {
        let text = as_text(column, dialect);
        format!(
            "CASE WHEN octet_length({text}) <= {bytes_max} THEN {column} END, \
             octet_length({text})"
        )
    }

    fn read(
        row: &Row<'_>,
        index: usize,
        bytes_max: usize,
        what: impl FnOnce() -> String,
    ) -> Result<Option<Self>> {
        let Some(bytes) = row.get::<_, Option<i64>>(index + 1)? else {
            return Ok(None);
        };
        match row.get::<_, Option<String>>(index)? {
            Some(text) => Ok(Some(Self(text))),
            None => Err(Error::PayloadTooLarge {
                what: what(),
                bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
                max: bytes_max,
            }),
        }
    }
}

impl PayloadColumn for PayloadPreview {
    fn select(column: &str, bytes_max: usize, dialect: Dialect) -> String {
        Self::select_sql(column, &bytes_max.to_string(), dialect)
    }

    fn read(
        row: &Row<'_>,
        index: usize,
        _bytes_max: usize,
        _what: impl FnOnce() -> String,
    ) -> Result<Option<Self>> {
        let Some(bytes) = row.get::<_, Option<i64>>(index + 1)? else {
            return Ok(None);
        };
        Ok(Some(Self {
            head: row.get(index)?,
            bytes: u64::try_from(bytes).unwrap_or(0),
        }))
    }
}
