//! For crates built on the journal (the scheduler): their own tables in the journal's file, and
//! the few journal facts they need, read through narrow functions instead of SQL on the
//! journal's tables.
//!
//! Each crate owns its tables, their numbered migrations and their views
//! ([`ExtensionSchema`]); the journal only runs the migrations and keeps each owner's version
//! in its `schema_versions` table. The functions here run on a connection the journal handed
//! out ([`Journal::read`], [`Journal::write`], [`crate::Execution::complete_with`]), inside its
//! transaction, so what they read or write commits with the caller's own rows.

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, params};
use durably_lock::format_timestamp;
use uuid::Uuid;

use crate::backend;
use crate::error::Result;
use crate::events;
use crate::execution::first_open_intent;
use crate::journal::Journal;
use crate::states::Status;
use crate::storage::{self, Migration, Owner};

/// The tables and views a crate built on the journal keeps in the journal's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtensionSchema {
    /// The owner's name: its key in `schema_versions` and in error messages (`scheduler`).
    pub owner: &'static str,
    /// The owner's numbered migrations, in order; version *n* means the first *n* are applied.
    pub migrations: &'static [Migration],
    /// The owner's views: `DROP VIEW IF EXISTS` and `CREATE VIEW` statements, never in a
    /// numbered migration. Applied after the migrations whenever the file's views differ from
    /// them, so editing a view never changes what an old migration does. A view no longer
    /// wanted is dropped by a numbered migration.
    pub views: &'static str,
    /// The same schema on PostgreSQL.
    pub postgres: PgSchema,
}

/// An owner's schema on PostgreSQL (`schema/postgres/<owner>/`): a baseline that folds the
/// migrations up to `baseline_version` into one file, and the views. Later migrations carry
/// their PostgreSQL SQL in [`Migration::postgres`], so one version number names the same
/// schema on both backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgSchema {
    /// The tables of the first `baseline_version` migrations, applied to a schema that has no
    /// row for the owner in `schema_versions`. It ends by inserting that row.
    pub baseline: &'static str,
    /// The version the baseline equals.
    pub baseline_version: i64,
    /// The views: each dropped (`CASCADE`) and created, applied whenever their blake3 differs
    /// from the owner's `schema_versions.views_sha`.
    pub views: &'static str,
}

impl Journal {
    /// Brings `schema` up to date in this journal's file: applies the migrations it lacks,
    /// each as its own writer request (one transaction, with the version that counts it), then
    /// recreates its views if they differ from [`ExtensionSchema::views`]. Each pass re-reads
    /// the version under the write lock, so processes migrating the same file at once apply
    /// each migration once. On PostgreSQL it is one writer request: under the schema's
    /// migration lock, the owner's [`PgSchema`] baseline when the schema has no version row
    /// for it, then the later migrations' PostgreSQL SQL, then the views when their blake3
    /// differs from the stored one.
    ///
    /// # Errors
    /// [`crate::Error::ExtensionSchemaTooNew`] when the file counts more of `schema`'s
    /// migrations than it lists (a newer build migrated it; nothing is changed), or a storage
    /// error from a migration's SQL (that migration is rolled back).
    pub async fn migrate_extension(&self, schema: &'static ExtensionSchema) -> Result<()> {
        #[cfg(feature = "postgres")]
        if self.target().dialect() == durably_db::Dialect::Postgres {
            let path = self.path().to_owned();
            return self
                .write(move |conn| crate::pg::migrate::extension(conn, &path, schema))
                .await;
        }
        // One pass a migration, plus the pass that finds the schema current.
        for _ in 0..=schema.migrations.len() {
            let path = self.path().to_owned();
            let applied = self
                .write(move |conn| {
                    storage::migration_pass(backend::sqlite(conn)?, &path, Owner::Extension(schema))
                        .map_err(|error| error.at_path(&path))
                })
                .await?;
            if !applied {
                break;
            }
        }
        Ok(())
    }
}

/// Whether execution `execution_id` has a step in the ambiguous window: a guarded step whose
/// intent is recorded and whose result is not. One seek on the steps of that execution.
///
/// # Errors
/// A storage error.
pub fn ambiguous_step_exists(conn: &Connection, execution_id: Uuid) -> Result<bool> {
    Ok(first_open_intent(conn, &execution_id.to_string(), 0)?.is_some())
}

/// The sum of the `attempts` of execution `execution_id`'s steps: every start of a step's
/// closure, retries and re-runs after a crash included. 0 for an execution with no steps.
///
/// # Errors
/// A storage error.
pub fn step_attempts_total(conn: &Connection, execution_id: Uuid) -> Result<u32> {
    let total: i64 = conn
        .prepare_cached(
            "SELECT CAST(coalesce(sum(attempts), 0) AS BIGINT) FROM steps WHERE execution_id = ?1",
        )?
        .query_row(params![execution_id.to_string()], |row| row.get(0))?;
    Ok(u32::try_from(total).unwrap_or(u32::MAX))
}

/// Appends an audit event that concerns no single execution to the journal's `events` table,
/// in the caller's transaction. `detail` is built from ids, names and reasons, never from
/// payloads: `durably show` and the `recent_events` view print it.
///
/// # Errors
/// A storage error.
pub fn record_event(
    conn: &Connection,
    at: DateTime<Utc>,
    kind: &str,
    detail: &serde_json::Value,
) -> Result<()> {
    events::record(conn, &format_timestamp(at), None, None, kind, detail)
}

/// The status of execution `execution_id`, or `None` when no execution has that id. One seek
/// on the primary key; inside a write request, the status cannot change before its commit.
///
/// # Errors
/// A storage error, or [`crate::Error::Inconsistent`] when the stored status is not a word the
/// journal knows.
pub fn execution_status(conn: &Connection, execution_id: Uuid) -> Result<Option<Status>> {
    let word: Option<String> = conn
        .prepare_cached("SELECT status FROM executions WHERE execution_id = ?1")?
        .query_row(params![execution_id.to_string()], |row| row.get(0))
        .optional()?;
    word.map(|word| {
        word.parse::<Status>().map_err(|unknown| {
            crate::Error::Inconsistent(format!("execution {execution_id}: {unknown}"))
        })
    })
    .transpose()
}
