//! [`Row`]: one row of a result, read by column position or name.

use crate::error::{Error, Result};
use crate::sqlite;
use crate::value::{FromSql, Value};

/// One row of a result. It borrows the statement that produced it.
pub struct Row<'r> {
    inner: RowInner<'r>,
}

enum RowInner<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
}

/// Where a column is: its 0-based position, or its name.
pub trait RowIndex {
    /// The column's position or name.
    fn column(&self) -> Column<'_>;
}

/// A column by position or by name.
#[derive(Debug, Clone, Copy)]
pub enum Column<'a> {
    /// The 0-based position in the result.
    Position(usize),
    /// The result column's name.
    Name(&'a str),
}

impl RowIndex for usize {
    fn column(&self) -> Column<'_> {
        Column::Position(*self)
    }
}

impl RowIndex for &str {
    fn column(&self) -> Column<'_> {
        Column::Name(self)
    }
}

impl<'r> Row<'r> {
    pub(crate) fn sqlite(row: &'r rusqlite::Row<'r>) -> Self {
        Self {
            inner: RowInner::Sqlite(row),
        }
    }

    /// The column's value converted to `T`.
    ///
    /// # Errors
    /// No such column, or a value `T` does not read ([`Error::Column`]).
    #[allow(clippy::needless_pass_by_value)] // rusqlite's calling shape: callers pass by value.
    pub fn get<I: RowIndex, T: FromSql>(&self, index: I) -> Result<T> {
        let (position, value) = self.value(index.column())?;
        T::from_sql(value).map_err(|source| Error::Column {
            index: position,
            source,
        })
    }

    /// The column's value as it is stored, borrowing text and bytes from the row.
    ///
    /// # Errors
    /// No such column, or text that is not UTF-8.
    #[allow(clippy::needless_pass_by_value)] // rusqlite's calling shape: callers pass by value.
    pub fn get_ref<I: RowIndex>(&self, index: I) -> Result<Value<'_>> {
        self.value(index.column()).map(|(_, value)| value)
    }

    fn value(&self, column: Column<'_>) -> Result<(usize, Value<'_>)> {
        match &self.inner {
            RowInner::Sqlite(row) => sqlite::column(row, column),
        }
    }
}
