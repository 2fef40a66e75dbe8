//! Schema migrations on PostgreSQL: an owner's baseline, its later migrations and its views, in
//! one transaction under an advisory lock.
//!
//! Invariant: every open migrates in one transaction holding the transaction-level advisory
//! lock of its schema (keyed by `current_schema()`), and reads the version only under it. So
//! journals opening one schema at once apply each baseline and migration once: the second waits
//! for the first's commit, then finds its version row. PostgreSQL's DDL is transactional, so a
//! failed migration leaves nothing behind.

use std::path::Path;

use durably_db::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::extension::ExtensionSchema;
use crate::storage::{Owner, SCHEMA_VERSION};

/// The journal's baseline (schema/postgres/README.md): its tables, the functions its portable
/// payload SQL needs, then the wake-up function and triggers, which the crates' migrations
/// build on.
const JOURNAL_BASELINE: &[&str] = &[
    include_str!("../../../../schema/postgres/0001_journal.sql"),
    include_str!("../../../../schema/postgres/functions.sql"),
    include_str!("../../../../schema/postgres/notify.sql"),
];

/// The journal version its baseline equals.
const JOURNAL_BASELINE_VERSION: i64 = 7;

// The baseline folds no more migrations than this build knows.
const _: () = assert!(JOURNAL_BASELINE_VERSION <= SCHEMA_VERSION);

/// The journal's views on PostgreSQL.
const JOURNAL_VIEWS: &str = include_str!("../../../../schema/postgres/views.sql");

/// The statement that serializes migrations of one schema, held until the transaction ends.
const MIGRATION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('durably migrate ' || current_schema(), 0))";

/// Brings the journal's own schema up to date, in a transaction of its own on `conn`.
///
/// # Errors
/// As [`migrate`].
pub(crate) fn journal(conn: &Connection, path: &Path) -> Result<()> {
    require_schema(conn, path)?;
    let transaction = conn.transaction()?;
    migrate(&transaction, path, Owner::Journal)?;
    transaction.commit()?;
    Ok(())
}

/// Fails unless the session's `search_path` names a schema that exists: the tables would have
/// nowhere to go, and the server's own error ("no schema has been selected to create in")
/// names neither the path nor the fix.
///
/// # Errors
/// [`Error::CannotOpen`] naming the `search_path`; a storage error from the query.
fn require_schema(conn: &Connection, path: &Path) -> Result<()> {
    let (schema, search_path): (Option<String>, String) = conn.query_row(
        "SELECT current_schema(), current_setting('search_path')",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    match schema {
        Some(_) => Ok(()),
        None => Err(Error::CannotOpen {
            path: path.to_owned(),
            reason: format!(
                "no schema of its search_path ({search_path}) exists: create it first \
                 (CREATE SCHEMA name), or set another with options=-csearch_path%3Dname in the URL"
            ),
        }),
    }
}

/// Brings `schema`, a crate's tables and views, up to date, inside the caller's transaction
/// (a writer request's), which holds the migration lock until it ends.
///
/// # Errors
/// As [`migrate`].
pub(crate) fn extension(
    conn: &Connection,
    path: &Path,
    schema: &'static ExtensionSchema,
) -> Result<()> {
    migrate(conn, path, Owner::Extension(schema))
}

/// Applies `owner`'s baseline when the schema has no version row for it, then the migrations
/// after the version it finds, then its views when their blake3 differs from the stored one:
/// all inside the caller's transaction, under the schema's migration lock, which it takes.
/// Reopening a current schema changes nothing.
///
/// # Errors
/// [`Error::SchemaTooNew`] or [`Error::ExtensionSchemaTooNew`] when the schema counts more
/// migrations than this build knows (nothing is changed); [`Error::Inconsistent`] for a
/// migration this build has without PostgreSQL SQL; a storage error from the SQL (the caller
/// rolls its transaction back).
fn migrate(transaction: &Connection, path: &Path, owner: Owner) -> Result<()> {
    transaction.execute_batch(MIGRATION_LOCK)?;
    let migrations = owner.migrations();
    let supported = migrations.len() as i64;
    let mut version = version(transaction, owner)?;
    if version > supported {
        return Err(owner.too_new(path, version, supported));
    }
    if version == 0 {
        let (baseline, baseline_version) = baseline(owner);
        for sql in baseline {
            transaction.execute_batch(sql)?;
        }
        version = baseline_version;
        tracing::info!(owner = owner.name(), version, path = %path.display(), "applied a PostgreSQL baseline");
    }
    let first = usize::try_from(version).unwrap_or(usize::MAX);
    for (index, migration) in migrations.iter().enumerate().skip(first) {
        let sql = migration.postgres.ok_or_else(|| {
            Error::Inconsistent(format!(
                "migration {} of {} has no PostgreSQL SQL, so {} cannot be brought up to date",
                migration.name,
                owner.name(),
                path.display()
            ))
        })?;
        transaction.execute_batch(sql)?;
        transaction
            .prepare_cached("UPDATE schema_versions SET version = ?2 WHERE owner = ?1")?
            .execute(params![owner.name(), index as i64 + 1])?;
        tracing::info!(owner = owner.name(), migration = migration.name, path = %path.display(), "applied a schema migration");
    }
    refresh_views(transaction, owner)
}

/// How many of `owner`'s migrations the schema counts: 0 when it has no row, or no
/// `schema_versions` table at all (a new schema).
fn version(conn: &Connection, owner: Owner) -> Result<i64> {
    let exists: bool = conn.query_row(
        "SELECT to_regclass('schema_versions') IS NOT NULL",
        [],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(0);
    }
    Ok(conn
        .prepare_cached("SELECT version FROM schema_versions WHERE owner = ?1")?
        .query_row(params![owner.name()], |row| row.get(0))
        .optional()?
        .unwrap_or(0))
}

/// `owner`'s PostgreSQL baseline, file by file, and the version it equals.
fn baseline(owner: Owner) -> (&'static [&'static str], i64) {
    match owner {
        Owner::Journal => (JOURNAL_BASELINE, JOURNAL_BASELINE_VERSION),
        Owner::Extension(schema) => (
            std::slice::from_ref(&schema.postgres.baseline),
            schema.postgres.baseline_version,
        ),
    }
}

/// Recreates `owner`'s views unless the schema records the blake3 of this very file. The
/// journal's views are dropped with `CASCADE`, which takes any view built on them along, so
/// recreating them makes every other owner recreate its own at its next migration.
fn refresh_views(conn: &Connection, owner: Owner) -> Result<()> {
    let views = match owner {
        Owner::Journal => JOURNAL_VIEWS,
        Owner::Extension(schema) => schema.postgres.views,
    };
    let sha = blake3::hash(views.as_bytes()).to_hex().to_string();
    let stored: Option<String> = conn
        .prepare_cached("SELECT views_sha FROM schema_versions WHERE owner = ?1")?
        .query_row(params![owner.name()], |row| row.get(0))
        .optional()?
        .flatten();
    if stored.as_deref() == Some(sha.as_str()) {
        return Ok(());
    }
    conn.execute_batch(views)?;
    conn.prepare_cached("UPDATE schema_versions SET views_sha = ?2 WHERE owner = ?1")?
        .execute(params![owner.name(), sha])?;
    if matches!(owner, Owner::Journal) {
        conn.prepare_cached("UPDATE schema_versions SET views_sha = NULL WHERE owner <> ?1")?
            .execute(params![owner.name()])?;
    }
    Ok(())
}
