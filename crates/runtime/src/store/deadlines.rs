//! Execution deadlines in `runtime_executions.deadline_at`: when an unfinished execution is
//! cancelled with reason `timeout`. A deadline is cleared when its execution ends or when the
//! due pass acts on it, so the `runtime_deadlines` index holds only deadlines still to come.

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, params};
use durably_journal::Result;
use durably_lock::{format_timestamp, parse_timestamp};
use uuid::Uuid;

/// Execution `execution_id`'s deadline, if it has one. One primary-key seek.
pub(crate) fn deadline_at(conn: &Connection, execution_id: Uuid) -> Result<Option<DateTime<Utc>>> {
    let text: Option<Option<String>> = conn
        .prepare_cached("SELECT deadline_at FROM runtime_executions WHERE execution_id = ?1")?
        .query_row(params![execution_id.to_string()], |row| row.get(0))
        .optional()?;
    text.flatten().map(|text| parsed(&text)).transpose()
}

/// Sets (or, with `None`, clears) execution `execution_id`'s deadline. A hand-driven execution
/// has no runtime row, and nothing changes.
pub(crate) fn set_deadline(
    conn: &Connection,
    execution_id: Uuid,
    at: Option<DateTime<Utc>>,
) -> Result<()> {
    conn.prepare_cached("UPDATE runtime_executions SET deadline_at = ?2 WHERE execution_id = ?1")?
        .execute(params![execution_id.to_string(), at.map(format_timestamp)])?;
    Ok(())
}

/// Executions whose deadline is at or before `now`, earliest first, at most `max`. A range
/// read of `runtime_deadlines`.
pub(crate) fn due_deadlines(conn: &Connection, now: DateTime<Utc>, max: u32) -> Result<Vec<Uuid>> {
    let mut statement = conn.prepare_cached(
        "SELECT execution_id FROM runtime_executions
         WHERE deadline_at IS NOT NULL AND deadline_at <= ?1 ORDER BY deadline_at LIMIT ?2",
    )?;
    let rows = statement.query_map(params![format_timestamp(now), max], |row| {
        row.get::<_, String>(0)
    })?;
    rows.map(|text| {
        let text = text?;
        Uuid::parse_str(&text).map_err(|error| {
            durably_journal::Error::Inconsistent(format!(
                "runtime_executions holds {text:?} as an execution id: {error}"
            ))
        })
    })
    .collect()
}

/// The earliest deadline of any execution. The first entry of `runtime_deadlines`.
pub(crate) fn next_deadline(conn: &Connection) -> Result<Option<DateTime<Utc>>> {
    let text: Option<String> = conn
        .prepare_cached(
            "SELECT min(deadline_at) FROM runtime_executions WHERE deadline_at IS NOT NULL",
        )?
        .query_row([], |row| row.get(0))?;
    text.map(|text| parsed(&text)).transpose()
}

fn parsed(text: &str) -> Result<DateTime<Utc>> {
    parse_timestamp(text).ok_or_else(|| {
        durably_journal::Error::Inconsistent(format!("deadline_at {text:?} is not a timestamp"))
    })
}
