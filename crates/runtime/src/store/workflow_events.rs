//! The `workflow_events` table: values an execution publishes with `set_event`.

use durably_db::{Connection, OptionalExtension, params};
use durably_journal::Result;
use uuid::Uuid;

/// The value execution `execution_id` last published under `key`, as stored JSON. One
/// primary-key seek.
pub(crate) fn workflow_event(
    conn: &Connection,
    execution_id: Uuid,
    key: &str,
) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT value FROM workflow_events WHERE execution_id = ?1 AND key = ?2")?
        .query_row(params![execution_id.to_string(), key], |row| row.get(0))
        .optional()?)
}

/// Publishes `value` (JSON) under `key` for execution `execution_id`, set by step `seq` at
/// `at`, replacing what the key held.
pub(crate) fn upsert_workflow_event(
    conn: &Connection,
    execution_id: Uuid,
    key: &str,
    value: &str,
    seq: u32,
    at: &str,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO workflow_events (execution_id, key, value, seq, set_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (execution_id, key)
         DO UPDATE SET value = excluded.value, seq = excluded.seq, set_at = excluded.set_at",
    )?
    .execute(params![execution_id.to_string(), key, value, seq, at])?;
    Ok(())
}
