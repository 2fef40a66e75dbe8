//! [`Connection`]: one connection to either backend, with rusqlite's calling shape, and the
//! [`Transaction`] guard.

use std::ops::Deref;

use crate::error::Result;
use crate::params::Params;
use crate::row::Row;
use crate::statement::Statement;

/// Which SQL a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite (the bundled build).
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// One statement in the two dialects, for the few that cannot be written once for both
/// (`FOR UPDATE SKIP LOCKED`, `PRAGMA`, catalog lookups). [`Connection::pick`] chooses.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    /// The SQLite form.
    pub sqlite: &'static str,
    /// The PostgreSQL form (with `?N` placeholders, like every statement here).
    pub postgres: &'static str,
}

/// A connection to the journal's database. Statements use `?N` placeholders on both backends.
/// `Send`, not `Sync`: one thread uses it at a time.
pub struct Connection {
    inner: ConnectionInner,
}

enum ConnectionInner {
    Sqlite(rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(crate::PgConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("dialect", &self.dialect())
            .finish_non_exhaustive()
    }
}

impl From<rusqlite::Connection> for Connection {
    fn from(connection: rusqlite::Connection) -> Self {
        Self {
            inner: ConnectionInner::Sqlite(connection),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<crate::PgConnection> for Connection {
    fn from(connection: crate::PgConnection) -> Self {
        Self {
            inner: ConnectionInner::Postgres(connection),
        }
    }
}

impl Connection {
    /// The SQLite connection underneath, for what only SQLite has (pragmas, file checks,
    /// `data_version`); `None` on PostgreSQL.
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.inner {
            ConnectionInner::Sqlite(connection) => Some(connection),
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(_) => None,
        }
    }

    /// As [`Connection::as_sqlite`], mutably.
    pub fn as_sqlite_mut(&mut self) -> Option<&mut rusqlite::Connection> {
        match &mut self.inner {
            ConnectionInner::Sqlite(connection) => Some(connection),
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(_) => None,
        }
    }

    /// The dialect this connection speaks.
    pub fn dialect(&self) -> Dialect {
        match &self.inner {
            ConnectionInner::Sqlite(_) => Dialect::Sqlite,
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The form of `sql` for this connection's dialect.
    pub fn pick(&self, sql: &Sql) -> &'static str {
        match self.dialect() {
            Dialect::Sqlite => sql.sqlite,
            Dialect::Postgres => sql.postgres,
        }
    }

    /// Runs one statement; returns how many rows it changed.
    ///
    /// # Errors
    /// The backend refused it, or a parameter could not be bound.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// Runs statements separated by `;`, without parameters.
    ///
    /// # Errors
    /// The backend refused one; the ones before it have run.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.inner {
            ConnectionInner::Sqlite(connection) => Ok(connection.execute_batch(sql)?),
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(connection) => Ok(connection.batch_execute(sql)?),
        }
    }

    /// Runs a statement and maps its first row.
    ///
    /// # Errors
    /// [`Error::QueryReturnedNoRows`](crate::Error::QueryReturnedNoRows) when there is none; the backend's or `map`'s error.
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, map: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, map)
    }

    /// Prepares a statement for this call only.
    ///
    /// # Errors
    /// The backend refused the SQL.
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        match &self.inner {
            ConnectionInner::Sqlite(connection) => Ok(Statement::sqlite(connection.prepare(sql)?)),
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(connection) => Statement::postgres(connection, sql),
        }
    }

    /// Prepares a statement through the connection's cache, so repeating it skips parsing.
    ///
    /// # Errors
    /// The backend refused the SQL.
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        match &self.inner {
            ConnectionInner::Sqlite(connection) => {
                Ok(Statement::sqlite_cached(connection.prepare_cached(sql)?))
            }
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(connection) => Statement::postgres(connection, sql),
        }
    }

    /// Begins a transaction for a caller that ends it with `execute_batch("COMMIT")` or
    /// `"ROLLBACK"`. On PostgreSQL `BEGIN` costs no round trip of its own: it is sent with the
    /// transaction's first statement, and a transaction that runs none sends nothing (see
    /// [`PgConnection::begin_pipelined`](crate::PgConnection::begin_pipelined)). On SQLite it
    /// is `BEGIN`.
    ///
    /// # Errors
    /// The session is known to be lost, or a transaction is already open.
    pub fn begin_pipelined(&self) -> Result<()> {
        match &self.inner {
            ConnectionInner::Sqlite(connection) => Ok(connection.execute_batch("BEGIN")?),
            #[cfg(feature = "postgres")]
            ConnectionInner::Postgres(connection) => Ok(connection.begin_pipelined()?),
        }
    }

    /// Begins a transaction that rolls back unless [`Transaction::commit`] is called. On
    /// SQLite it is deferred: it takes the write lock at its first write.
    ///
    /// # Errors
    /// The backend refused `BEGIN` (a transaction is already open).
    pub fn transaction(&self) -> Result<Transaction<'_>> {
        self.execute_batch("BEGIN")?;
        Ok(Transaction {
            connection: self,
            open: true,
        })
    }
}

/// An open transaction; dropping it without [`Transaction::commit`] rolls it back.
pub struct Transaction<'c> {
    connection: &'c Connection,
    open: bool,
}

impl Transaction<'_> {
    /// Commits the transaction.
    ///
    /// # Errors
    /// The commit failed; the transaction has been rolled back.
    pub fn commit(mut self) -> Result<()> {
        self.open = false;
        self.connection.execute_batch("COMMIT").inspect_err(|_| {
            // A failed COMMIT may leave the transaction open (SQLite when busy).
            let _ = self.connection.execute_batch("ROLLBACK");
        })
    }
}

impl Deref for Transaction<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.connection
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // Nothing to report to: the caller is already leaving with its own error.
            let _ = self.connection.execute_batch("ROLLBACK");
        }
    }
}
