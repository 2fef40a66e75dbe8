//! Which backend a journal lives on. This build opens SQLite files only: a PostgreSQL target is
//! refused before anything is opened, and the code that only SQLite has (batching, pragmas,
//! migrations, file checks) reaches the SQLite connection under the facade here.

use std::path::Path;

use durably_db::{Connection, Target};

use crate::error::{Error, Result};

/// The SQLite file `target` names.
///
/// # Errors
/// [`Error::BackendNotCompiled`] for a PostgreSQL database.
pub(crate) fn sqlite_path(target: &Target) -> Result<&Path> {
    target.sqlite_path().ok_or_else(postgres_not_compiled)
}

/// The SQLite connection under `conn`, for what only SQLite has.
///
/// # Errors
/// [`Error::BackendNotCompiled`] for a PostgreSQL connection.
pub(crate) fn sqlite(conn: &Connection) -> Result<&rusqlite::Connection> {
    conn.as_sqlite().ok_or_else(postgres_not_compiled)
}

fn postgres_not_compiled() -> Error {
    Error::BackendNotCompiled {
        backend: "postgres",
        feature: "postgres",
    }
}
