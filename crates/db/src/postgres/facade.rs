//! The PostgreSQL arms of the facade: a statement holds its prepared form (from the
//! [`PgConnection`]'s cache), and rows are read whole, then handed out one at a time.

use std::sync::Arc;

use super::connection::{PgConnection, PgRows, Prepared};
use super::error::PgError;
use crate::error::{Error, Result};
use crate::params::Params;
use crate::row::Column;
use crate::value::{ToSql, Value};

impl From<PgError> for Error {
    fn from(error: PgError) -> Self {
        Error::Postgres(Box::new(error))
    }
}

/// A statement of the facade on PostgreSQL: prepared (and cached) when it is made, and held,
/// so running it looks nothing up.
pub(crate) struct PgStatement<'c> {
    connection: &'c PgConnection,
    prepared: Arc<Prepared>,
}

impl<'c> PgStatement<'c> {
    /// Prepares `sql` through the connection's cache, so a bad statement fails here, as on SQLite.
    pub(crate) fn new(connection: &'c PgConnection, sql: &str) -> Result<Self> {
        let prepared = connection.prepared(sql)?;
        Ok(Self {
            connection,
            prepared,
        })
    }

    pub(crate) fn column_count(&self) -> usize {
        self.prepared.column_count()
    }

    pub(crate) fn execute<P: Params>(&self, params: &P) -> Result<usize> {
        let changed = self
            .connection
            .execute_prepared(&self.prepared, &values(params)?)?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    pub(crate) fn query<P: Params>(&self, params: &P) -> Result<PgCursor> {
        let rows = self
            .connection
            .query_prepared(&self.prepared, &values(params)?)?;
        Ok(PgCursor { rows, next: 0 })
    }
}

/// The parameters as values, borrowing their text and bytes.
fn values<P: Params>(params: &P) -> Result<Vec<Value<'_>>> {
    params
        .each()
        .map(|param| param.to_sql().map_err(Error::Parameter))
        .collect()
}

/// A result read whole, and the position of the next row to hand out.
pub(crate) struct PgCursor {
    rows: PgRows,
    next: usize,
}

impl PgCursor {
    /// The next row's column names and values, or `None` after the last.
    pub(crate) fn next(&mut self) -> Option<(&[String], &[Value<'static>])> {
        let row = self.rows.rows.get(self.next)?;
        self.next += 1;
        Some((&self.rows.columns, row))
    }
}

/// A column of a PostgreSQL row: its position and its value, borrowing text and bytes.
pub(crate) fn column<'r>(
    columns: &[String],
    values: &'r [Value<'static>],
    column: Column<'_>,
) -> Result<(usize, Value<'r>)> {
    let position = match column {
        Column::Position(position) => position,
        Column::Name(name) => columns
            .iter()
            .position(|candidate| candidate == name)
            .ok_or_else(|| Error::NoSuchColumn(name.to_owned()))?,
    };
    let value = values
        .get(position)
        .ok_or_else(|| Error::NoSuchColumn(position.to_string()))?;
    // A value's `to_sql` borrows its text and bytes, and cannot fail.
    let borrowed = value.to_sql().map_err(Error::Parameter)?;
    Ok((position, borrowed))
}
