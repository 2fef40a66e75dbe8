//! Reading a journal in PostgreSQL without writing to it: the session of an
//! [`Inspector`](crate::Inspector), the check that the schema is one this build reads, and the
//! read timeout's error.

use std::path::Path;

use durably_db::{Connection, OptionalExtension, PgErrorKind, PgUrl};

use super::open::Session;
use crate::config::JournalBuilder;
use crate::error::{Error, Result};
use crate::storage::SCHEMA_VERSION;

/// The inspector's session on `url`: read-only `REPEATABLE READ` transactions, and every
/// statement stopped after the read timeout (`statement_timeout`), so a view that never ends
/// cannot hold the reader. It creates and migrates nothing.
///
/// # Errors
/// [`Error::CannotOpen`] when the server cannot be reached or refuses the session.
pub(crate) fn inspector_session(
    url: &PgUrl,
    path: &Path,
    config: &JournalBuilder,
) -> Result<Connection> {
    let opened = Session::named(url, "inspect", config)
        .read_only("reader")
        .and_then(|conn| {
            conn.execute_batch(&format!(
                "SET statement_timeout = {}",
                config.read_timeout_ms.max(1)
            ))?;
            Ok(conn)
        });
    opened.map_err(|error| super::open::cannot_open(path, &error))
}

/// Refuses, before any query, a schema with no journal in it ([`Error::NotAJournal`]), one
/// older than `oldest` ([`Error::SchemaTooOld`]) and one a newer build migrated
/// ([`Error::SchemaTooNew`]). A reader never migrates.
///
/// # Errors
/// Those, or a storage error.
pub(crate) fn check_readable(conn: &Connection, path: &Path, oldest: i64) -> Result<()> {
    let has_versions: bool = conn.query_row(
        "SELECT to_regclass('schema_versions') IS NOT NULL",
        [],
        |row| row.get(0),
    )?;
    let version: Option<i64> = if has_versions {
        conn.query_row(
            "SELECT version FROM schema_versions WHERE owner = 'journal'",
            [],
            |row| row.get(0),
        )
        .optional()?
    } else {
        None
    };
    let Some(version) = version else {
        return Err(Error::NotAJournal {
            path: path.to_owned(),
            reason: "its schema holds no durably journal; a program that opens it with durably \
                     makes one"
                .to_owned(),
        });
    };
    if version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < oldest {
        return Err(Error::SchemaTooOld {
            path: path.to_owned(),
            found: version,
            oldest,
        });
    }
    Ok(())
}

/// Whether `error` is a statement the server stopped at its `statement_timeout`.
pub(crate) fn timed_out(error: &Error) -> bool {
    matches!(error, Error::Storage(durably_db::Error::Postgres(cause))
        if cause.kind() == PgErrorKind::QueryCanceled)
}
