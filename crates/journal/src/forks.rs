//! Copies for forks, for crates built on the journal (the runtime's `Client::fork`): a new
//! `queued` execution with the original's kind, name, input, queue and priority, and the
//! original's recorded steps before a seq, as recorded. Narrow functions on the connection of
//! the caller's journal transaction, like [`crate::lifecycle`]'s, so the runtime never writes
//! SQL on the journal's tables and its own rows commit with the copy.

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, params};
use durably_lock::format_timestamp;
use uuid::Uuid;

use crate::error::{Error, Result};

/// Creates execution `fork`, `queued` and never opened, as a copy of execution `original`'s
/// kind, name, input, queue and priority, with `detail` as its status detail (names and
/// reasons, never payloads). Returns `false` when `original` does not exist (nothing is
/// written).
///
/// # Errors
/// [`Error::Refused`] when `fork` exists already; a storage error.
pub fn insert_fork(
    conn: &Connection,
    original: Uuid,
    fork: Uuid,
    detail: &serde_json::Value,
    now: DateTime<Utc>,
) -> Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO executions (execution_id, kind, name, status, input, opens, created_at,
                                     updated_at, queue, priority, status_detail)
             SELECT ?2, kind, name, 'queued', input, 0, ?3, ?3, queue, priority, ?4
             FROM executions WHERE execution_id = ?1
             ON CONFLICT (execution_id) DO NOTHING",
        )?
        .execute(params![
            original.to_string(),
            fork.to_string(),
            format_timestamp(now),
            detail.to_string()
        ])?;
    if inserted == 1 {
        return Ok(true);
    }
    let fork_exists = crate::extension::execution_status(conn, fork)?.is_some();
    if fork_exists {
        return Err(Error::Refused(format!(
            "execution {fork} exists already; a fork of {original} needs a new id"
        )));
    }
    Ok(false)
}

/// Copies execution `original`'s recorded steps with a seq below `before_seq` to execution
/// `fork` (which has none), as recorded: name, effect, policy, state, idempotency key, result,
/// error, attempts and times. Returns how many were copied.
///
/// # Errors
/// A storage error (the fork already having one of those steps among them).
pub fn copy_steps(conn: &Connection, original: Uuid, fork: Uuid, before_seq: u32) -> Result<u32> {
    let copied = conn
        .prepare_cached(
            "INSERT INTO steps (execution_id, seq, name, effect, policy, state, idempotency_key,
                                result, error, attempts, intent_at, result_at)
             SELECT ?2, seq, name, effect, policy, state, idempotency_key, result, error,
                    attempts, intent_at, result_at
             FROM steps WHERE execution_id = ?1 AND seq < ?3 ORDER BY seq",
        )?
        .execute(params![original.to_string(), fork.to_string(), before_seq])?;
    Ok(u32::try_from(copied).unwrap_or(u32::MAX))
}

/// The first step of execution `id` below `before_seq` in the ambiguous window (a guarded
/// step's intent with no result), as (seq, name). One range read of its steps.
///
/// # Errors
/// A storage error.
pub fn open_intent_before(
    conn: &Connection,
    id: Uuid,
    before_seq: u32,
) -> Result<Option<(u32, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT seq, name FROM steps
             WHERE execution_id = ?1 AND seq < ?2 AND state = 'intent' ORDER BY seq LIMIT 1",
        )?
        .query_row(params![id.to_string(), before_seq], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?)
}

/// The kind of execution `id`, if it exists. One primary-key seek.
///
/// # Errors
/// A storage error.
pub fn execution_kind(conn: &Connection, id: Uuid) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT kind FROM executions WHERE execution_id = ?1")?
        .query_row(params![id.to_string()], |row| row.get(0))
        .optional()?)
}
