//! [`Statement`]: a prepared statement, and the [`Rows`] and [`MappedRows`] it yields.

use crate::error::{Error, Result};
use crate::params::Params;
use crate::row::Row;
use crate::sqlite;

/// A prepared statement. From [`Connection::prepare_cached`](crate::Connection::prepare_cached)
/// it goes back to the connection's cache when dropped.
pub struct Statement<'c> {
    inner: StatementInner<'c>,
}

enum StatementInner<'c> {
    SqliteCached(rusqlite::CachedStatement<'c>),
    Sqlite(rusqlite::Statement<'c>),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgStatement<'c>),
}

impl<'c> Statement<'c> {
    pub(crate) fn sqlite_cached(statement: rusqlite::CachedStatement<'c>) -> Self {
        Self {
            inner: StatementInner::SqliteCached(statement),
        }
    }

    pub(crate) fn sqlite(statement: rusqlite::Statement<'c>) -> Self {
        Self {
            inner: StatementInner::Sqlite(statement),
        }
    }

    /// A statement on PostgreSQL (prepared through the connection's cache).
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(connection: &'c crate::PgConnection, sql: &str) -> Result<Self> {
        Ok(Self {
            inner: StatementInner::Postgres(crate::postgres::PgStatement::new(connection, sql)?),
        })
    }

    /// How many columns each of its rows has.
    pub fn column_count(&self) -> usize {
        match &self.inner {
            StatementInner::SqliteCached(statement) => statement.column_count(),
            StatementInner::Sqlite(statement) => statement.column_count(),
            #[cfg(feature = "postgres")]
            StatementInner::Postgres(statement) => statement.column_count(),
        }
    }

    /// Runs the statement; returns how many rows it changed.
    ///
    /// # Errors
    /// The backend refused it, or a parameter could not be bound.
    #[allow(clippy::needless_pass_by_value)] // rusqlite's calling shape: callers pass by value.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        match &mut self.inner {
            StatementInner::SqliteCached(statement) => {
                Ok(statement.execute(sqlite::bind(&params))?)
            }
            StatementInner::Sqlite(statement) => Ok(statement.execute(sqlite::bind(&params))?),
            #[cfg(feature = "postgres")]
            StatementInner::Postgres(statement) => statement.execute(&params),
        }
    }

    /// Runs the statement and steps through its rows.
    ///
    /// # Errors
    /// The backend refused it, or a parameter could not be bound.
    #[allow(clippy::needless_pass_by_value)] // rusqlite's calling shape: callers pass by value.
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        let inner = match &mut self.inner {
            StatementInner::SqliteCached(statement) => {
                RowsInner::Sqlite(statement.query(sqlite::bind(&params))?)
            }
            StatementInner::Sqlite(statement) => {
                RowsInner::Sqlite(statement.query(sqlite::bind(&params))?)
            }
            #[cfg(feature = "postgres")]
            StatementInner::Postgres(statement) => RowsInner::Postgres(statement.query(&params)?),
        };
        Ok(Rows { inner })
    }

    /// Runs the statement and maps its first row.
    ///
    /// # Errors
    /// [`Error::QueryReturnedNoRows`] when there is none; the backend's or `map`'s error.
    pub fn query_row<T, P, F>(&mut self, params: P, map: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut rows = self.query(params)?;
        match rows.next()? {
            Some(row) => map(&row),
            None => Err(Error::QueryReturnedNoRows),
        }
    }

    /// Runs the statement and maps each row as it is read.
    ///
    /// # Errors
    /// The backend refused the statement; each row's own error comes out of the iterator.
    pub fn query_map<T, P, F>(&mut self, params: P, map: F) -> Result<MappedRows<'_, F>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        Ok(MappedRows {
            rows: self.query(params)?,
            map,
        })
    }

    /// Whether the statement returns at least one row.
    ///
    /// # Errors
    /// The backend refused it.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        Ok(self.query(params)?.next()?.is_some())
    }
}

/// The rows of a running statement.
pub struct Rows<'s> {
    inner: RowsInner<'s>,
}

enum RowsInner<'s> {
    Sqlite(rusqlite::Rows<'s>),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgCursor),
}

impl Rows<'_> {
    /// The next row, or `None` after the last.
    ///
    /// # Errors
    /// The backend failed while stepping.
    #[allow(clippy::should_implement_trait)] // A lending iterator: each row borrows the cursor.
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        match &mut self.inner {
            RowsInner::Sqlite(rows) => Ok(rows.next()?.map(Row::sqlite)),
            #[cfg(feature = "postgres")]
            RowsInner::Postgres(cursor) => Ok(cursor
                .next()
                .map(|(columns, values)| Row::postgres(columns, values))),
        }
    }
}

/// The rows of a running statement, each mapped by a closure.
pub struct MappedRows<'s, F> {
    rows: Rows<'s>,
    map: F,
}

impl<T, F> Iterator for MappedRows<'_, F>
where
    F: FnMut(&Row<'_>) -> Result<T>,
{
    type Item = Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.rows.next() {
            Ok(Some(row)) => Some((self.map)(&row)),
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        }
    }
}
