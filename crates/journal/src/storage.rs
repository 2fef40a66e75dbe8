//! Opening the database: connection pragmas, the schema migrations (the journal's own and those
//! of crates built on it) with the views they own, and the file checks that come before them.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::config::Durability;
use crate::error::{Error, Result};
use crate::extension::ExtensionSchema;
use crate::files::{self, Siblings};
use crate::writer::WalSync;

/// One numbered schema migration. A released migration never changes: a file that applied it
/// is never shown it again, so a change would make old and new files differ. Views are not
/// migrations (see [`ExtensionSchema::views`](crate::ExtensionSchema::views)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its name, as its file is named, for the log line that reports it applied.
    pub name: &'static str,
    /// Its SQL: statements with no transaction control, run in one transaction with the
    /// version that counts it.
    pub sql: &'static str,
    /// Its PostgreSQL twin, under the same number (`schema/postgres/`). `None` for a
    /// migration the owner's PostgreSQL baseline already contains; a schema on PostgreSQL
    /// that needs a migration without it is refused.
    pub postgres: Option<&'static str>,
}

/// How the journal applies one of its own migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Apply {
    /// In one transaction with the version that counts it.
    InTransaction,
    /// As a table rebuild ([`apply_rebuild`]): with `foreign_keys` off, so dropping a parent
    /// table deletes no child rows, and with every view and trigger saved and recreated around
    /// it. Only the journal's own migrations can rebuild: an extension's migration runs inside
    /// a writer transaction, where `foreign_keys` cannot change.
    Rebuild,
}

/// The journal's numbered migrations (`schema/`), in order. `PRAGMA user_version` is the
/// number applied. The lock crate owns the `locks` table and its SQL; the journal, the layer
/// that runs migrations, applies it first.
const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "0001_locks",
        sql: durably_lock::MIGRATION_SQL,
        postgres: None,
    },
    Migration {
        name: "0002_journal",
        sql: include_str!("../../../schema/0002_journal.sql"),
        postgres: None,
    },
    Migration {
        name: "0003_scheduler",
        sql: include_str!("../../../schema/0003_scheduler.sql"),
        postgres: None,
    },
    Migration {
        name: "0004_views",
        sql: include_str!("../../../schema/0004_views.sql"),
        postgres: None,
    },
    Migration {
        name: "0005_steps_in_commit_order",
        sql: include_str!("../../../schema/0005_steps_in_commit_order.sql"),
        postgres: None,
    },
    Migration {
        name: "0006_schema_versions",
        sql: include_str!("../../../schema/0006_schema_versions.sql"),
        postgres: None,
    },
    Migration {
        name: "0007_runtime_statuses",
        sql: include_str!("../../../schema/0007_runtime_statuses.sql"),
        postgres: None,
    },
];

/// How each of [`MIGRATIONS`] is applied, by its index.
fn journal_apply(index: usize) -> Apply {
    match MIGRATIONS.get(index).map(|migration| migration.name) {
        Some("0007_runtime_statuses") => Apply::Rebuild,
        _ => Apply::InTransaction,
    }
}

/// The journal's views, recreated by every writer open after the migrations.
const VIEWS: &str = include_str!("../../../schema/views.sql");

/// The journal's schema version (`PRAGMA user_version`) this build writes and understands. The
/// tables of crates built on the journal count their own versions (see
/// [`ExtensionSchema`](crate::ExtensionSchema)).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// `PRAGMA application_id` of a durably journal: the bytes "dura".
pub const APPLICATION_ID: i64 = 0x6475_7261;

/// Settings of every connection. Each is read back after it is set, because SQLite silently
/// ignores values it does not know.
///
/// | pragma          | value                  | why                                                 |
/// |-----------------|------------------------|-----------------------------------------------------|
/// | `journal_mode`  | `wal`                  | readers never block the writer; one fsync a commit  |
/// | `synchronous`   | `FULL` (2) / `NORMAL` (1) | FULL: a commit survives power loss; NORMAL: only process crashes. With `Full`, [`writer_wal_sync`] switches the writer to NORMAL and has it fsync the WAL itself |
/// | `foreign_keys`  | `ON`                   | steps and events die with their execution           |
/// | `busy_timeout`  | configured             | wait for other processes' writers, then `Busy`      |
/// | `query_only`    | `ON` on read connections | a read connection can never write by mistake      |
/// | `trusted_schema` | `OFF`                 | a view, trigger or CHECK in a file someone else wrote may call only the functions and virtual tables SQLite marks harmless |
pub(crate) fn configure_writer(
    conn: &Connection,
    durability: Durability,
    busy_timeout_ms: u64,
) -> Result<()> {
    conn.busy_timeout(std::time::Duration::from_millis(busy_timeout_ms))?;
    set_wal(conn, busy_timeout_ms)?;
    let synchronous = match durability {
        Durability::Full => "2",
        Durability::ProcessCrash => "1",
    };
    set_and_verify(conn, "synchronous", synchronous, synchronous)?;
    set_and_verify(conn, "foreign_keys", "ON", "1")?;
    set_and_verify(conn, "trusted_schema", "OFF", "0")?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Hands the fsync of [`Durability::Full`] from SQLite's COMMIT to the writer (see
/// `writer::wal_sync`): opens the WAL file for the writer to sync, then lets the connection
/// commit with `synchronous=NORMAL`. Called once the open's own writes (migrations, the orphan
/// sweep) have committed with SQLite's fsync. `None` for [`Durability::ProcessCrash`], whose
/// commits are never synced.
///
/// The WAL file exists: the connection has read the database in WAL mode, and SQLite deletes
/// the file only when the last connection to the database closes, which this one is not while
/// the writer runs. SQLite takes no POSIX lock on the WAL file (only on the database and its
/// `-shm`), so another descriptor on it cannot release one.
pub(crate) fn writer_wal_sync(
    conn: &Connection,
    path: &Path,
    durability: Durability,
) -> Result<Option<Box<dyn WalSync>>> {
    if durability == Durability::ProcessCrash {
        return Ok(None);
    }
    let wal_path = files::sibling(path, "-wal");
    // Write access is only for fsync, which some systems refuse on a read-only descriptor;
    // nothing is ever written through it. No link is followed, as SQLite follows none.
    let wal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&wal_path)
        .map_err(|source| Error::Io {
            action: "open the WAL file to sync",
            path: wal_path,
            source,
        })?;
    set_and_verify(conn, "synchronous", "1", "1").map_err(|error| error.at_path(path))?;
    Ok(Some(Box::new(wal)))
}

/// How long to wait between two tries of switching a new file to WAL.
const WAL_SWITCH_RETRY_MS: u64 = 5;

/// Switches the file to WAL, waiting up to the busy timeout for other processes doing the same.
///
/// On a new file, the switch upgrades the statement's read lock to a write lock. When another
/// process is switching the same new file at that moment, SQLite answers BUSY at once, without
/// calling the busy handler (waiting there could deadlock), so two processes opening a new file
/// together would see a spurious `Busy`. Each retry starts from no lock, so it cannot deadlock;
/// the retries stop at the busy timeout.
fn set_wal(conn: &Connection, busy_timeout_ms: u64) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(busy_timeout_ms);
    loop {
        match set_and_verify(conn, "journal_mode", "WAL", "wal") {
            Err(Error::Busy { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(WAL_SWITCH_RETRY_MS));
            }
            Err(Error::Busy { .. }) => return Err(Error::Busy { busy_timeout_ms }),
            other => return other,
        }
    }
}

/// Settings of a read-only pool connection.
pub(crate) fn configure_reader(conn: &Connection, busy_timeout_ms: u64) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_millis(busy_timeout_ms))?;
    conn.execute_batch("PRAGMA query_only = ON; PRAGMA trusted_schema = OFF")?;
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
///
/// The file is created, or the one found checked, before SQLite opens it, and the files SQLite
/// keeps beside it are checked before and again once SQLite holds them (see `files`): a WAL
/// another user plants between the two is found by the second look, before the migrations or
/// any other write.
pub(crate) fn open_writer(
    path: &Path,
    durability: Durability,
    busy_timeout_ms: u64,
) -> Result<Connection> {
    let main = files::create_or_adopt(path)?;
    files::check_siblings(path, main, Siblings::MayBeMissing)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|error| Error::from(error).at_path(path))?;
    // The header check reads the file, and another process may be creating it right now: wait
    // for its lock as every later statement does. Setting the timeout does not touch the file.
    conn.busy_timeout(std::time::Duration::from_millis(busy_timeout_ms))?;
    check_header(&conn, path)?;
    check_before_wal_switch(&conn, path)?;
    configure_writer(&conn, durability, busy_timeout_ms).map_err(|error| error.at_path(path))?;
    // A read in WAL mode opens the WAL and its index, and SQLite keeps both open from here on.
    conn.query_row("PRAGMA user_version", [], |_| Ok(()))
        .map_err(|error| Error::from(error).at_path(path))?;
    files::check_siblings(path, main, Siblings::Open)?;
    Ok(conn)
}

/// Switching a file to WAL rewrites its header, and a damaged page may only show up later
/// (in the migrations or the orphan sweep), when the file is already changed. So a file not
/// yet in WAL mode (a new one, or one switched back by hand) is read through once by
/// `PRAGMA quick_check` first, and a damaged one is refused as `Corrupt` while still untouched.
/// A file already in WAL mode needs no switch, and no check here.
fn check_before_wal_switch(conn: &Connection, path: &Path) -> Result<()> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .map_err(|error| Error::from(error).at_path(path))?;
    if mode.eq_ignore_ascii_case("wal") {
        return Ok(());
    }
    let verdict: String = conn
        .query_row("PRAGMA quick_check(1)", [], |row| row.get(0))
        .map_err(|error| Error::from(error).at_path(path))?;
    if verdict == "ok" {
        Ok(())
    } else {
        Err(Error::Corrupt {
            path: path.to_owned(),
            reason: verdict,
        })
    }
}

/// Refuses files that are not SQLite, belong to another application, or were written by a
/// newer durably, before anything is written to them: the pragmas set next
/// (`journal_mode=WAL`) would already change the file. A reader checks files with it too.
///
/// A file is ours when it carries our application id; with no application id it must be new:
/// schema version 0 and no tables. All three are read by one statement, so in one snapshot: a
/// process migrating the same new file at this moment is seen either before its first
/// migration committed or after, never half way.
pub(crate) fn check_header(conn: &Connection, path: &Path) -> Result<()> {
    let (application_id, version, objects): (i64, i64, i64) = conn
        .query_row(
            "SELECT (SELECT application_id FROM pragma_application_id()),
                    (SELECT user_version FROM pragma_user_version()),
                    (SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%')",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map_err(|error| Error::from(error).at_path(path))?;
    let reason = if application_id == APPLICATION_ID {
        if version > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        return Ok(());
    } else if application_id != 0 {
        format!("its application_id is {application_id:#x}")
    } else if version != 0 {
        format!("it has schema version {version} but no durably application_id")
    } else if objects > 0 {
        format!("it already holds {objects} tables or indexes but no durably schema")
    } else {
        return Ok(());
    };
    Err(Error::ForeignDatabase {
        path: path.to_owned(),
        reason,
    })
}

/// Whose schema a migration pass brings up to date, and where its version is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Owner {
    /// The journal itself: `PRAGMA user_version`.
    Journal,
    /// A crate built on the journal: its row of `schema_versions`.
    Extension(&'static ExtensionSchema),
}

impl Owner {
    pub(crate) fn migrations(self) -> &'static [Migration] {
        match self {
            Self::Journal => MIGRATIONS,
            Self::Extension(schema) => schema.migrations,
        }
    }

    /// How migration `index` of this owner is applied: only the journal rebuilds.
    fn apply(self, index: usize) -> Apply {
        match self {
            Self::Journal => journal_apply(index),
            Self::Extension(_) => Apply::InTransaction,
        }
    }

    fn views(self) -> &'static str {
        match self {
            Self::Journal => VIEWS,
            Self::Extension(schema) => schema.views,
        }
    }

    fn version(self, conn: &Connection) -> Result<i64> {
        Ok(match self {
            Self::Journal => conn.query_row("PRAGMA user_version", [], |row| row.get(0))?,
            Self::Extension(schema) => conn
                .prepare_cached("SELECT version FROM schema_versions WHERE owner = ?1")?
                .query_row(params![schema.owner], |row| row.get(0))
                .optional()?
                .unwrap_or(0),
        })
    }

    fn set_version(self, conn: &Connection, version: i64) -> Result<()> {
        match self {
            // A pragma takes no parameters; `version` is a number this module computed.
            Self::Journal => conn.execute_batch(&format!("PRAGMA user_version = {version}"))?,
            Self::Extension(schema) => {
                conn.prepare_cached(
                    "INSERT INTO schema_versions (owner, version) VALUES (?1, ?2)
                     ON CONFLICT (owner) DO UPDATE SET version = excluded.version",
                )?
                .execute(params![schema.owner, version])?;
            }
        }
        Ok(())
    }

    pub(crate) fn too_new(self, path: &Path, found: i64, supported: i64) -> Error {
        match self {
            Self::Journal => Error::SchemaTooNew {
                path: path.to_owned(),
                found,
                supported,
            },
            Self::Extension(schema) => Error::ExtensionSchemaTooNew {
                path: path.to_owned(),
                owner: schema.owner,
                found,
                supported,
            },
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Journal => "journal",
            Self::Extension(schema) => schema.owner,
        }
    }
}

/// Applies the journal's migrations this file lacks, each in its own transaction, then brings
/// its views up to date in the transaction that finds the schema current. Safe to run from two
/// processes at once: the version is re-read under the write lock.
///
/// While any migration is missing, the passes run with `foreign_keys` off: a rebuild needs it
/// off before its transaction begins (SQLite ignores the pragma inside one), and which
/// migration comes next is only known for sure under the write lock. It is switched back on,
/// and verified, before this returns, whatever happened.
pub(crate) fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    let behind = Owner::Journal.version(conn)? < SCHEMA_VERSION;
    if behind {
        set_and_verify(conn, "foreign_keys", "OFF", "0").map_err(|error| error.at_path(path))?;
    }
    let migrated = migrate_passes(conn, path);
    let restored = if behind {
        set_and_verify(conn, "foreign_keys", "ON", "1").map_err(|error| error.at_path(path))
    } else {
        Ok(())
    };
    migrated.and(restored)
}

fn migrate_passes(conn: &Connection, path: &Path) -> Result<()> {
    // One pass a migration, plus the pass that finds the schema current.
    for _ in 0..=MIGRATIONS.len() {
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|error| Error::from(error).at_path(path))?;
        let applied = match journal_pass(conn, path) {
            Ok(applied) => applied,
            Err(error) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(error.at_path(path));
            }
        };
        conn.execute_batch("COMMIT")
            .map_err(|error| Error::from(error).at_path(path))?;
        if !applied {
            return Ok(());
        }
    }
    Ok(())
}

/// One pass of [`migrate`] inside its transaction. A new file is checked to be empty and
/// stamped with the journal's application id before its first migration.
fn journal_pass(conn: &Connection, path: &Path) -> Result<bool> {
    if Owner::Journal.version(conn)? == 0 {
        refuse_foreign(conn, path)?;
        conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
    }
    migration_pass(conn, path, Owner::Journal)
}

/// Applies `owner`'s next missing migration inside the caller's transaction and returns
/// `true`; when none is missing, brings `owner`'s views up to date instead and returns `false`.
///
/// # Errors
/// [`Error::SchemaTooNew`] or [`Error::ExtensionSchemaTooNew`] when the file counts more
/// migrations than this build knows; nothing is changed then. [`Error::Inconsistent`] when a
/// rebuild would leave a row whose parent is missing (the transaction is rolled back).
pub(crate) fn migration_pass(conn: &Connection, path: &Path, owner: Owner) -> Result<bool> {
    let migrations = owner.migrations();
    let supported = migrations.len() as i64;
    let version = owner.version(conn)?;
    if version > supported {
        return Err(owner.too_new(path, version, supported));
    }
    let next = usize::try_from(version).map_err(|_| {
        Error::Inconsistent(format!(
            "the {} schema of {} has version {version}",
            owner.name(),
            path.display()
        ))
    })?;
    let Some(migration) = migrations.get(next) else {
        refresh_views(conn, owner.views())?;
        return Ok(false);
    };
    match owner.apply(next) {
        Apply::InTransaction => conn.execute_batch(migration.sql)?,
        Apply::Rebuild => apply_rebuild(conn, path, migration)?,
    }
    owner.set_version(conn, version + 1)?;
    tracing::info!(
        owner = owner.name(),
        migration = migration.name,
        path = %path.display(),
        "applied a schema migration"
    );
    Ok(true)
}

/// Runs a rebuild migration inside the caller's transaction (see [`Apply::Rebuild`]). Every
/// view and trigger is dropped before `migration`'s SQL and recreated from its saved text
/// after, so the views of crates built on the journal are all there again when it commits;
/// then no row may have lost its parent.
fn apply_rebuild(conn: &Connection, path: &Path, migration: &Migration) -> Result<()> {
    let foreign_keys: i64 = conn.query_row("PRAGMA foreign_keys", [], |row| row.get(0))?;
    if foreign_keys != 0 {
        return Err(Error::Inconsistent(format!(
            "migration {} of {} rebuilds a table and must run with foreign keys off",
            migration.name,
            path.display()
        )));
    }
    let saved: Vec<(String, String, String)> = conn
        .prepare(
            "SELECT type, name, sql FROM sqlite_schema
             WHERE type IN ('view', 'trigger') AND sql IS NOT NULL ORDER BY rowid",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (kind, name, _) in &saved {
        let kind = if kind == "view" { "VIEW" } else { "TRIGGER" };
        conn.execute_batch(&format!("DROP {kind} \"{}\"", name.replace('"', "\"\"")))?;
    }
    conn.execute_batch(migration.sql)?;
    for (_, _, sql) in &saved {
        conn.execute_batch(sql)?;
    }
    let orphans: i64 =
        conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| {
            row.get(0)
        })?;
    if orphans > 0 {
        return Err(Error::Inconsistent(format!(
            "migration {} of {} would leave {orphans} rows whose parent row is missing; \
             nothing was changed",
            migration.name,
            path.display()
        )));
    }
    fail::fail_point!("journal::migration-before-commit", |_| std::process::abort(
    ));
    Ok(())
}

/// Recreates the views `views` defines (`DROP VIEW IF EXISTS` and `CREATE VIEW` statements)
/// unless the file already stores every one of them with the same SQL. Leaving current views
/// alone keeps the schema unchanged, so an open does not make every other connection to the
/// file prepare its statements again.
fn refresh_views(conn: &Connection, views: &str) -> Result<()> {
    let mut stored =
        conn.prepare_cached("SELECT sql FROM sqlite_schema WHERE type = 'view' AND name = ?1")?;
    for (name, sql) in defined_views(views)? {
        let current: Option<String> = stored
            .query_row(params![name], |row| row.get(0))
            .optional()?;
        if current.as_deref() != Some(sql.as_str()) {
            conn.execute_batch(views)?;
            return Ok(());
        }
    }
    Ok(())
}

/// The views `views` creates, by name, with their SQL as SQLite stores it: read back from an
/// empty in-memory database it was applied to (SQLite resolves a view's tables only when the
/// view is read).
fn defined_views(views: &str) -> Result<Vec<(String, String)>> {
    let scratch = Connection::open_in_memory()?;
    scratch.execute_batch(views)?;
    let mut statement =
        scratch.prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'view'")?;
    let defined = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(defined)
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
