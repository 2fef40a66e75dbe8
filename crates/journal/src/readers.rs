//! [`Readers`]: the read pool's connection manager. It opens read-only SQLite connections with
//! `r2d2_sqlite` and hands them out as [`durably_db::Connection`]s, so a read runs the same
//! code whichever backend the journal is on.

use std::path::Path;

use durably_db::Connection;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::OpenFlags;

use crate::storage;

/// Opens the read connections of the journal file: read-only, each configured as
/// `storage::configure_reader` says.
#[derive(Debug)]
pub(crate) struct Readers {
    sqlite: SqliteConnectionManager,
}

impl Readers {
    /// The manager of read connections to the SQLite file at `path`.
    pub(crate) fn sqlite(path: &Path, busy_timeout_ms: u64) -> Self {
        let sqlite = SqliteConnectionManager::file(path)
            .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .with_init(move |conn| storage::configure_reader(conn, busy_timeout_ms));
        Self { sqlite }
    }
}

impl r2d2::ManageConnection for Readers {
    type Connection = Connection;
    type Error = durably_db::Error;

    fn connect(&self) -> Result<Connection, durably_db::Error> {
        Ok(Connection::from(self.sqlite.connect()?))
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), durably_db::Error> {
        match conn.as_sqlite_mut() {
            Some(sqlite) => Ok(self.sqlite.is_valid(sqlite)?),
            None => Ok(()),
        }
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.as_sqlite_mut()
            .is_some_and(|sqlite| self.sqlite.has_broken(sqlite))
    }
}
