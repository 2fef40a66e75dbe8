//! Where a run's journal lives: the SQLite file [`DATABASE_FILE`] in the run directory, or,
//! for a run with `--backend postgres`, a scratch schema of the PostgreSQL database
//! [`POSTGRES_URL_VAR`] names. The run directory records which: a PostgreSQL run writes the
//! schema's name into [`SCHEMA_FILE`], so every process of the run (and `--check-only` on a
//! kept run) finds the same journal from the directory alone, and no URL (which may hold a
//! password) travels on a command line.

use std::path::Path;

use durably_db::{Connection, Target};

use super::BoxError;
use super::workload::DATABASE_FILE;

/// The file of the run directory that names the run's PostgreSQL schema.
pub const SCHEMA_FILE: &str = "postgres-schema";
/// The environment variable that names the PostgreSQL database (as the PostgreSQL tests use).
pub const POSTGRES_URL_VAR: &str = "DURABLY_POSTGRES_URL";
/// The `application_name` prefix of the harness's own sessions (the checker's, the driver's).
#[cfg(feature = "postgres")]
const APPLICATION: &str = "torture";

/// The backend of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in the run directory.
    Sqlite,
    /// A scratch schema in the PostgreSQL database [`POSTGRES_URL_VAR`] names.
    Postgres,
}

impl Backend {
    /// The backend of the run in `dir`.
    pub fn of(dir: &Path) -> Self {
        if dir.join(SCHEMA_FILE).exists() {
            Self::Postgres
        } else {
            Self::Sqlite
        }
    }
}

/// The journal of the run in `dir`.
///
/// # Errors
/// The schema file cannot be read, or [`POSTGRES_URL_VAR`] is not a PostgreSQL URL.
pub fn target(dir: &Path) -> Result<Target, BoxError> {
    match Backend::of(dir) {
        Backend::Sqlite => Ok(Target::Sqlite(dir.join(DATABASE_FILE))),
        Backend::Postgres => {
            let schema = std::fs::read_to_string(dir.join(SCHEMA_FILE))?;
            Ok(Target::Postgres(server()?.with_search_path(schema.trim())))
        }
    }
}

/// The server [`POSTGRES_URL_VAR`] names, without a schema.
///
/// # Errors
/// The variable is unset or not a `postgresql://` URL.
pub fn server() -> Result<durably_db::PgUrl, BoxError> {
    let value = std::env::var(POSTGRES_URL_VAR).unwrap_or_default();
    match Target::from(value.as_str()) {
        Target::Postgres(url) => Ok(url),
        // Not shown: a connection string may hold a password.
        Target::Sqlite(_) => Err(format!(
            "--backend postgres needs a postgresql:// URL in {POSTGRES_URL_VAR} (start a \
             private server with `eval \"$(.ci/pg start)\"`)"
        )
        .into()),
    }
}

/// A connection to the run's journal for the checker, which runs after every process of the
/// run has exited.
///
/// # Errors
/// The journal cannot be opened or reached.
pub fn connect(dir: &Path) -> Result<Connection, BoxError> {
    match target(dir)? {
        Target::Sqlite(path) => {
            let conn = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            Ok(Connection::from(conn))
        }
        Target::Postgres(url) => connect_postgres(&url, "checker"),
    }
}

#[cfg(feature = "postgres")]
fn connect_postgres(url: &durably_db::PgUrl, role: &str) -> Result<Connection, BoxError> {
    Ok(Connection::from(durably_db::PgConnection::connect(
        url.expose(),
        &format!("{APPLICATION}:{role}"),
    )?))
}

#[cfg(not(feature = "postgres"))]
fn connect_postgres(_url: &durably_db::PgUrl, _role: &str) -> Result<Connection, BoxError> {
    Err("this build has no PostgreSQL backend: build with `--features postgres`".into())
}

/// Makes a fresh scratch schema for the run in `dir` and records it in [`SCHEMA_FILE`].
///
/// # Errors
/// The server cannot be reached or refuses, or the file cannot be written.
pub fn create_schema(dir: &Path) -> Result<String, BoxError> {
    let schema = format!("torture_{}", uuid::Uuid::new_v4().simple());
    admin()?.execute_batch(&format!("CREATE SCHEMA {schema}"))?;
    std::fs::write(dir.join(SCHEMA_FILE), &schema)?;
    Ok(schema)
}

/// Drops the run's schema, with everything in it.
///
/// # Errors
/// The server cannot be reached or refuses.
pub fn drop_schema(dir: &Path) -> Result<(), BoxError> {
    let schema = std::fs::read_to_string(dir.join(SCHEMA_FILE))?;
    admin()?.execute_batch(&format!(
        "SET lock_timeout = 10000; DROP SCHEMA IF EXISTS {} CASCADE",
        schema.trim()
    ))?;
    Ok(())
}

/// A session on the server, in no schema: to make and drop schemas and end other sessions.
///
/// # Errors
/// The server cannot be reached or refuses.
pub fn admin() -> Result<Connection, BoxError> {
    connect_postgres(&server()?, "driver")
}

/// The lease of every journal of a PostgreSQL run: a worker the driver stops for longer is
/// taken over by a peer while it still exists. Long enough that a loaded machine's late
/// heartbeats do not lose a running worker its executions.
pub const LEASE_MS: u64 = 2_000;
