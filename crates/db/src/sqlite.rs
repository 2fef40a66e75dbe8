//! The SQLite side of the facade: parameters bound through rusqlite, and its column values read
//! as [`Value`]s.

use std::borrow::Cow;

use rusqlite::types::{ToSqlOutput, Value as SqliteValue, ValueRef};

use crate::error::{Error, Result};
use crate::params::Params;
use crate::row::Column;
use crate::value::{FromSqlError, ToSql, Value};

/// The parameters as rusqlite binds them, with its check that their count matches the SQL.
pub(crate) fn bind<P: Params>(
    params: &P,
) -> rusqlite::ParamsFromIter<impl Iterator<Item = Bind<'_>>> {
    rusqlite::params_from_iter(params.each().map(Bind))
}

/// One parameter, converted when rusqlite binds it; text and bytes are bound without a copy.
pub(crate) struct Bind<'a>(&'a dyn ToSql);

impl rusqlite::ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let value = self
            .0
            .to_sql()
            .map_err(|error| rusqlite::Error::ToSqlConversionFailure(Box::new(error)))?;
        Ok(match value {
            Value::Null => ToSqlOutput::Owned(SqliteValue::Null),
            Value::Integer(number) => ToSqlOutput::Owned(SqliteValue::Integer(number)),
            Value::Real(number) => ToSqlOutput::Owned(SqliteValue::Real(number)),
            Value::Text(Cow::Borrowed(text)) => {
                ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes()))
            }
            Value::Text(Cow::Owned(text)) => ToSqlOutput::Owned(SqliteValue::Text(text)),
            Value::Blob(Cow::Borrowed(bytes)) => ToSqlOutput::Borrowed(ValueRef::Blob(bytes)),
            Value::Blob(Cow::Owned(bytes)) => ToSqlOutput::Owned(SqliteValue::Blob(bytes)),
        })
    }
}

/// A column of a SQLite row: its position and its value, borrowing text and bytes.
pub(crate) fn column<'r>(
    row: &'r rusqlite::Row<'_>,
    column: Column<'_>,
) -> Result<(usize, Value<'r>)> {
    let position = match column {
        Column::Position(position) => position,
        Column::Name(name) => row
            .as_ref()
            .column_index(name)
            .map_err(|_| Error::NoSuchColumn(name.to_owned()))?,
    };
    let value = match row.get_ref(position)? {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(number) => Value::Integer(number),
        ValueRef::Real(number) => Value::Real(number),
        ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Value::Text(Cow::Borrowed(text)),
            Err(error) => {
                return Err(Error::Column {
                    index: position,
                    source: FromSqlError::Other(Box::new(error)),
                });
            }
        },
        ValueRef::Blob(bytes) => Value::Blob(Cow::Borrowed(bytes)),
    };
    Ok((position, value))
}
