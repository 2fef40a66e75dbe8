//! [`Error`]: what a statement on either backend can fail with.

use crate::value::{FromSqlError, ToSqlError};

/// A failed statement, connection or conversion.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// SQLite refused the statement or the connection (busy, full, corrupt, a constraint, …);
    /// the callers classify it by its code.
    #[error(transparent)]
    Sqlite(rusqlite::Error),
    /// A statement expected to return a row returned none.
    #[error("the query returned no rows")]
    QueryReturnedNoRows,
    /// A column's value could not become the type asked for.
    #[error("column {index}: {source}")]
    Column {
        /// The column's 0-based index in the result.
        index: usize,
        /// Why the conversion failed.
        #[source]
        source: FromSqlError,
    },
    /// A column asked for by a name the result does not have.
    #[error("the result has no column {0:?}")]
    NoSuchColumn(String),
    /// A parameter with no SQL form.
    #[error("a parameter cannot be bound: {0}")]
    Parameter(#[source] ToSqlError),
}

impl Error {
    /// Whether this is the error of a statement that found no row (see
    /// [`OptionalExtension::optional`]).
    pub fn is_no_rows(&self) -> bool {
        matches!(self, Error::QueryReturnedNoRows)
    }
}

impl From<rusqlite::Error> for Error {
    fn from(error: rusqlite::Error) -> Self {
        match error {
            rusqlite::Error::QueryReturnedNoRows => Error::QueryReturnedNoRows,
            rusqlite::Error::ToSqlConversionFailure(cause) => {
                match cause.downcast::<ToSqlError>() {
                    Ok(cause) => Error::Parameter(*cause),
                    Err(cause) => Error::Sqlite(rusqlite::Error::ToSqlConversionFailure(cause)),
                }
            }
            other => Error::Sqlite(other),
        }
    }
}

/// A statement's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns "no rows" into `None`, as rusqlite's trait of the same name does.
pub trait OptionalExtension<T> {
    /// `Ok(None)` for [`Error::QueryReturnedNoRows`], every other result unchanged.
    ///
    /// # Errors
    /// Every error but "no rows".
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(Error::QueryReturnedNoRows) => Ok(None),
            Err(error) => Err(error),
        }
    }
}
