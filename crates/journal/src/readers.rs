//! [`Readers`]: the read pool's connection manager. It opens read-only SQLite connections with
//! `r2d2_sqlite`, or read-only PostgreSQL sessions, and hands them out as
//! [`durably_db::Connection`]s, so a read runs the same code whichever backend the journal is on.

use std::path::Path;

use durably_db::Connection;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::OpenFlags;

use crate::storage;

/// Opens the read connections of the journal: read-only, each configured as
/// `storage::configure_reader` (SQLite) or `pg::open::Session::reader` (PostgreSQL) says.
#[derive(Debug)]
pub(crate) enum Readers {
    /// Read-only connections to a SQLite file.
    Sqlite(SqliteConnectionManager),
    /// Read-only sessions whose transactions are `REPEATABLE READ READ ONLY`.
    #[cfg(feature = "postgres")]
    Postgres(crate::pg::open::Session),
}

impl Readers {
    /// The manager of read connections to the SQLite file at `path`.
    pub(crate) fn sqlite(path: &Path, busy_timeout_ms: u64) -> Self {
        Self::Sqlite(
            SqliteConnectionManager::file(path)
                .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .with_init(move |conn| storage::configure_reader(conn, busy_timeout_ms)),
        )
    }
}

impl r2d2::ManageConnection for Readers {
    type Connection = Connection;
    type Error = durably_db::Error;

    fn connect(&self) -> Result<Connection, durably_db::Error> {
        match self {
            Self::Sqlite(sqlite) => Ok(Connection::from(sqlite.connect()?)),
            #[cfg(feature = "postgres")]
            Self::Postgres(session) => session.reader(),
        }
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), durably_db::Error> {
        match (self, conn.as_sqlite_mut()) {
            (Self::Sqlite(manager), Some(sqlite)) => Ok(manager.is_valid(sqlite)?),
            // A lost session fails the empty statement, and the pool drops it.
            _ => conn.execute_batch(""),
        }
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        match (self, conn.as_sqlite_mut()) {
            (Self::Sqlite(manager), Some(sqlite)) => manager.has_broken(sqlite),
            _ => false,
        }
    }
}
