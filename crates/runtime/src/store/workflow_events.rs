//! The `workflow_events` table: values an execution publishes with `set_event`.

use durably_journal::Result;
use rusqlite::{Connection, OptionalExtension, params};
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
