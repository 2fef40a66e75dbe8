//! The rows a start writes beside the journal's execution row: `runtime_executions` (the
//! version and deadline) and `dedup_keys`.

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, Sql, params};
use durably_journal::Result;
use durably_lock::format_timestamp;
use uuid::Uuid;

/// What a start records for the runtime.
pub(crate) struct Started<'a> {
    pub(crate) execution_id: Uuid,
    pub(crate) version: u32,
    pub(crate) deadline_at: Option<DateTime<Utc>>,
    /// The deduplication key and its queue (`""` for none).
    pub(crate) dedup: Option<(&'a str, &'a str)>,
}

/// The insert of a deduplication key. On PostgreSQL a key another start holds inserts
/// nothing: a start on another host may commit the key between [`dedup_holder`] and the
/// insert, and a unique violation would abort the whole transaction. SQLite's single writer
/// makes the look and the insert atomic.
const INSERT_DEDUP: Sql = Sql {
    sqlite: "INSERT INTO dedup_keys (queue, key, execution_id) VALUES (?1, ?2, ?3)",
    postgres: "INSERT INTO dedup_keys (queue, key, execution_id) VALUES (?1, ?2, ?3)
               ON CONFLICT (queue, key) DO NOTHING",
};

/// Inserts the runtime's rows of a new execution. Returns whether it took the deduplication
/// key (always, with none): `false` when another execution holds it, and then the caller
/// rolls back what its start wrote.
pub(crate) fn insert_started(conn: &Connection, started: &Started<'_>) -> Result<bool> {
    let id = started.execution_id.to_string();
    conn.prepare_cached(
        "INSERT INTO runtime_executions (execution_id, version, deadline_at, dedup_key)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        id,
        started.version,
        started.deadline_at.map(format_timestamp),
        started.dedup.map(|(_, key)| key),
    ])?;
    let Some((queue, key)) = started.dedup else {
        return Ok(true);
    };
    let inserted = conn
        .prepare_cached(conn.pick(&INSERT_DEDUP))?
        .execute(params![queue, key, id])?;
    Ok(inserted == 1)
}

/// The execution holding deduplication key `key` of `queue`, if any. One primary-key seek.
pub(crate) fn dedup_holder(conn: &Connection, queue: &str, key: &str) -> Result<Option<Uuid>> {
    let holder: Option<String> = conn
        .prepare_cached("SELECT execution_id FROM dedup_keys WHERE queue = ?1 AND key = ?2")?
        .query_row(params![queue, key], |row| row.get(0))
        .optional()?;
    holder
        .map(|text| {
            Uuid::parse_str(&text).map_err(|error| {
                durably_journal::Error::Inconsistent(format!(
                    "dedup_keys holds {text:?} as an execution id: {error}"
                ))
            })
        })
        .transpose()
}

/// Frees deduplication key `key` of `queue` (its holder has finished).
pub(crate) fn delete_dedup(conn: &Connection, queue: &str, key: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM dedup_keys WHERE queue = ?1 AND key = ?2")?
        .execute(params![queue, key])?;
    Ok(())
}

/// The version execution `execution_id` was started with; `None` when the runtime did not
/// start it. One primary-key seek.
pub(crate) fn started_version(conn: &Connection, execution_id: Uuid) -> Result<Option<u32>> {
    Ok(conn
        .prepare_cached("SELECT version FROM runtime_executions WHERE execution_id = ?1")?
        .query_row(params![execution_id.to_string()], |row| row.get(0))
        .optional()?)
}

/// Records how many steps execution `execution_id` had when it was claimed: a run that ends
/// abnormally with no more made no progress.
pub(crate) fn set_steps_at_open(conn: &Connection, execution_id: Uuid, steps: u32) -> Result<()> {
    conn.prepare_cached(
        "UPDATE runtime_executions SET steps_at_open = ?2 WHERE execution_id = ?1",
    )?
    .execute(params![execution_id.to_string(), steps])?;
    Ok(())
}
