//! Opening the database: connection pragmas, the schema migrations and the file checks that
//! come before them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::config::Durability;
use crate::error::{Error, Result};

/// The numbered migrations of `schema/`, in order. `PRAGMA user_version` is the number applied.
const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_locks", include_str!("../../../schema/0001_locks.sql")),
    (
        "0002_journal",
        include_str!("../../../schema/0002_journal.sql"),
    ),
    (
        "0003_scheduler",
        include_str!("../../../schema/0003_scheduler.sql"),
    ),
];

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// `PRAGMA application_id` of a durably journal: the bytes "dura".
pub const APPLICATION_ID: i64 = 0x6475_7261;

/// Settings of every connection. Each is read back after it is set, because SQLite silently
/// ignores values it does not know.
///
/// | pragma          | value                  | why                                                 |
/// |-----------------|------------------------|-----------------------------------------------------|
/// | `journal_mode`  | `wal`                  | readers never block the writer; one fsync a commit  |
/// | `synchronous`   | `FULL` (2) / `NORMAL` (1) | FULL: a commit survives power loss; NORMAL: only process crashes |
/// | `foreign_keys`  | `ON`                   | steps and events die with their execution           |
/// | `busy_timeout`  | configured             | wait for other processes' writers, then `Busy`      |
/// | `query_only`    | `ON` on read connections | a read connection can never write by mistake      |
pub(crate) fn configure_writer(
    conn: &Connection,
    durability: Durability,
    busy_timeout_ms: u64,
) -> Result<()> {
    conn.busy_timeout(std::time::Duration::from_millis(busy_timeout_ms))?;
    set_and_verify(conn, "journal_mode", "WAL", "wal")?;
    let synchronous = match durability {
        Durability::Full => "2",
        Durability::ProcessCrash => "1",
    };
    set_and_verify(conn, "synchronous", synchronous, synchronous)?;
    set_and_verify(conn, "foreign_keys", "ON", "1")?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Settings of a read-only pool connection.
pub(crate) fn configure_reader(conn: &Connection, busy_timeout_ms: u64) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_millis(busy_timeout_ms))?;
    conn.execute_batch("PRAGMA query_only = ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

fn set_and_verify(
    conn: &Connection,
    pragma: &'static str,
    value: &str,
    expected: &str,
) -> Result<()> {
    // Pragma names and values are fixed strings of this module, never user input.
    let actual: String = conn
        .query_row(&format!("PRAGMA {pragma} = {value}"), [], |row| {
            row.get::<_, rusqlite::types::Value>(0).map(value_text)
        })
        .or_else(|error| match error {
            rusqlite::Error::QueryReturnedNoRows => {
                conn.query_row(&format!("PRAGMA {pragma}"), [], |row| {
                    row.get::<_, rusqlite::types::Value>(0).map(value_text)
                })
            }
            other => Err(other),
        })?;
    if actual.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(Error::Pragma {
            pragma,
            wanted: expected.to_owned(),
            actual,
        })
    }
}

fn value_text(value: rusqlite::types::Value) -> String {
    match value {
        rusqlite::types::Value::Integer(number) => number.to_string(),
        rusqlite::types::Value::Text(text) => text,
        other => format!("{other:?}"),
    }
}

/// Opens the write connection, creating the file (mode 0600) when it does not exist.
pub(crate) fn open_writer(
    path: &Path,
    durability: Durability,
    busy_timeout_ms: u64,
) -> Result<Connection> {
    let existed = path.exists();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|error| at_path(error, path))?;
    if !existed {
        // SQLite creates the file 0644; tighten it before the WAL and SHM files exist, since
        // SQLite gives those the database file's mode. chmod goes by path and never opens the
        // file, so SQLite's POSIX locks are untouched.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| Error::Io {
                action: "set mode 0600 on",
                path: path.to_owned(),
                source,
            },
        )?;
    }
    check_header(&conn, path)?;
    configure_writer(&conn, durability, busy_timeout_ms).map_err(|error| with_path(error, path))?;
    Ok(conn)
}

/// Refuses files that are not SQLite, or belong to another application, before anything is
/// written to them.
fn check_header(conn: &Connection, path: &Path) -> Result<()> {
    let application_id: i64 = conn
        .query_row("PRAGMA application_id", [], |row| row.get(0))
        .map_err(|error| at_path(error, path))?;
    if application_id != 0 && application_id != APPLICATION_ID {
        return Err(Error::ForeignDatabase {
            path: path.to_owned(),
            reason: format!("its application_id is {application_id:#x}"),
        });
    }
    Ok(())
}

/// Applies the migrations this file lacks, each in its own transaction. Safe to run from two
/// processes at once: the version is re-read under the write lock.
pub(crate) fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    // One pass a migration, plus the pass that finds the schema current.
    for _ in 0..=MIGRATIONS.len() {
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|error| with_path(error.into(), path))?;
        let applied = match next_migration(conn, path) {
            Ok(applied) => applied,
            Err(error) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(error);
            }
        };
        conn.execute_batch("COMMIT")
            .map_err(|error| with_path(error.into(), path))?;
        if !applied {
            return Ok(());
        }
    }
    Ok(())
}

/// Applies one migration inside the open transaction; `false` when the schema is current.
fn next_migration(conn: &Connection, path: &Path) -> Result<bool> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version == SCHEMA_VERSION {
        return Ok(false);
    }
    if version == 0 {
        refuse_foreign(conn, path)?;
        conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
    }
    let Some((_, sql)) = usize::try_from(version)
        .ok()
        .and_then(|index| MIGRATIONS.get(index))
    else {
        return Ok(false);
    };
    conn.execute_batch(sql)?;
    conn.execute_batch(&format!("PRAGMA user_version = {}", version + 1))?;
    Ok(true)
}

fn refuse_foreign(conn: &Connection, path: &Path) -> Result<()> {
    let objects: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
        [],
        |row| row.get(0),
    )?;
    if objects > 0 {
        return Err(Error::ForeignDatabase {
            path: path.to_owned(),
            reason: format!("it already holds {objects} tables or indexes but no durably schema"),
        });
    }
    Ok(())
}

fn at_path(error: rusqlite::Error, path: &Path) -> Error {
    with_path(error.into(), path)
}

fn with_path(error: Error, path: &Path) -> Error {
    match error {
        Error::Corrupt { reason, .. } => Error::Corrupt {
            path: path.to_owned(),
            reason,
        },
        other => other,
    }
}
