//! The status changes of parked executions, for crates built on the journal (the runtime):
//! narrow functions on the connection of the caller's journal transaction
//! ([`crate::Journal::write`], [`crate::Journal::claim_executions`]), so the runtime never writes
//! SQL on the journal's tables and its own rows commit with each change.
//!
//! Each status change is a compare-and-swap on the status it expects, and returns whether it
//! applied: a row another process moved first is left alone. None of them moves a `running`
//! execution (its lock holder owns it; [`request_cancel`] only asks it to stop), and none
//! writes an audit event but the two cancel functions, whose events the crash checker reads:
//! the caller records the one it means with [`record_execution_event`], in the same
//! transaction.

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, params};
use durably_lock::format_timestamp;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::payload::Payload;
use crate::records;
use crate::states::Status;

/// A new execution for [`insert_execution`]: it starts `queued`, never opened.
#[derive(Debug, Clone, Copy)]
pub struct NewExecution<'a> {
    /// Its id.
    pub id: Uuid,
    /// Its kind.
    pub kind: &'a str,
    /// A name for people.
    pub name: &'a str,
    /// Its input, encoded under the journal's payload cap ([`crate::Journal::encode_payload`]).
    pub input: &'a Payload,
    /// Its queue, if any.
    pub queue: Option<&'a str>,
    /// Its priority in the queue: larger runs first.
    pub priority: i64,
    /// Not claimable before this time.
    pub due_at: Option<DateTime<Utc>>,
    /// Why it is queued, for people (names and reasons, never payloads).
    pub detail: Option<&'a serde_json::Value>,
}

/// What [`insert_execution`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted {
    /// The execution was created, `queued`.
    New,
    /// An execution with this id exists already; nothing was written.
    Exists {
        /// Its kind.
        kind: String,
        /// Its status.
        status: Status,
    },
}

/// What woke a waiting execution ([`wake`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake<'a> {
    /// Its `due_at` has passed.
    Due,
    /// A message arrived on the topic it waits for.
    Topic(&'a str),
}

/// Creates execution `new.id`, `queued` and never opened (`opens` 0), unless it exists.
///
/// # Errors
/// A storage error.
pub fn insert_execution(
    conn: &Connection,
    new: &NewExecution<'_>,
    now: DateTime<Utc>,
) -> Result<Inserted> {
    let resource = new.id.to_string();
    let inserted = conn
        .prepare_cached(
            "INSERT INTO executions (execution_id, kind, name, status, input, opens, created_at,
                                     updated_at, queue, priority, due_at, status_detail)
             VALUES (?1, ?2, ?3, 'queued', ?4, 0, ?5, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (execution_id) DO NOTHING",
        )?
        .execute(params![
            resource,
            new.kind,
            new.name,
            new.input.as_json(),
            format_timestamp(now),
            new.queue,
            new.priority,
            new.due_at.map(format_timestamp),
            new.detail.map(serde_json::Value::to_string),
        ])?;
    if inserted == 1 {
        return Ok(Inserted::New);
    }
    let (kind, status) = conn
        .prepare_cached("SELECT kind, status FROM executions WHERE execution_id = ?1")?
        .query_row(params![resource], |row| {
            Ok((row.get(0)?, records::word(row, 1)?))
        })?;
    Ok(Inserted::Exists { kind, status })
}

/// The SQL of [`claimable`] for executions of no queue or of one (`?1`), of `kinds` kinds:
/// the claimable index in claim order, each entry's row read for its kind.
///
/// The limit is `LIMIT +?2`, never `LIMIT ?2`, here and in every statement run at each claim,
/// pass or open: SQLite plans with the value of a bare parameter in `LIMIT`, so it recompiles
/// the statement at every run with a new binding (and a cached statement is bound anew at
/// every run), which costs more than the read itself. The unary `+` makes the limit an
/// expression, planned without its value. For the same reason the kinds are a list of
/// parameters (`?3`, `?4`, ...), not a table-valued function of one.
fn claimable_sql(in_queue: bool, kinds: usize) -> String {
    let queue = if in_queue {
        "queue = ?1"
    } else {
        "queue IS NULL AND CAST(?1 AS TEXT) IS NULL"
    };
    let kinds: Vec<String> = (0..kinds).map(|at| format!("?{}", at + 3)).collect();
    format!(
        "SELECT execution_id, kind FROM executions
         WHERE status = 'queued' AND due_at IS NULL AND {queue} AND kind IN ({})
         ORDER BY priority DESC, id LIMIT +?2",
        kinds.join(", ")
    )
}

/// Claim candidates of `queue` (`None`: executions with no queue) whose kind is one of
/// `kinds`: `queued`, not waiting for a time, highest priority first and first come, first
/// served within a priority. At most `max`, as (id, kind).
///
/// Executions of other kinds are passed over in the query, so however many of them wait
/// ahead, the candidates of `kinds` are found, in their order among themselves. Each one
/// passed over costs the read of its row.
///
/// # Errors
/// A storage error.
pub fn claimable(
    conn: &Connection,
    queue: Option<&str>,
    kinds: &[&str],
    max: u32,
) -> Result<Vec<(Uuid, String)>> {
    let mut statement = conn.prepare_cached(&claimable_sql(queue.is_some(), kinds.len()))?;
    let mut parameters: Vec<&dyn durably_db::ToSql> = vec![&queue, &max];
    parameters.extend(kinds.iter().map(|kind| kind as &dyn durably_db::ToSql));
    let rows = statement.query_map(parameters.as_slice(), |row| {
        Ok((records::uuid(row, 0)?, row.get(1)?))
    })?;
    Ok(rows.collect::<durably_db::Result<_>>()?)
}

/// How many executions of `queue` are `running`: the slots taken.
///
/// # Errors
/// A storage error.
pub fn running_in_queue(conn: &Connection, queue: &str) -> Result<u32> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM executions WHERE status = 'running' AND queue = ?1")?
        .query_row(params![queue], |row| row.get(0))?)
}

/// How many executions are in `status` now, over the whole file (one range of the status
/// index: the cost grows with that count, so it suits the statuses of unfinished work).
///
/// # Errors
/// A storage error.
pub fn count_in_status(conn: &Connection, status: Status) -> Result<u64> {
    let count: i64 = conn
        .prepare_cached("SELECT count(*) FROM executions WHERE status = ?1")?
        .query_row(params![status.as_str()], |row| row.get(0))?;
    Ok(count.unsigned_abs())
}

/// How many executions of `queue` (`None`: no queue) are `queued`, due or not.
///
/// # Errors
/// A storage error.
pub fn queued_in_queue(conn: &Connection, queue: Option<&str>) -> Result<u64> {
    let count: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM executions
             WHERE status = 'queued' AND queue IS NOT DISTINCT FROM ?1",
        )?
        .query_row(params![queue], |row| row.get(0))?;
    Ok(count.unsigned_abs())
}

/// Executions whose `due_at` has passed at `now`, earliest first, at most `max`: waiting ones
/// to [`wake`], queued ones to [`clear_not_before`].
///
/// # Errors
/// A storage error, or [`Error::Inconsistent`] for a damaged row.
pub fn due(conn: &Connection, now: DateTime<Utc>, max: u32) -> Result<Vec<(Uuid, Status)>> {
    let mut statement = conn.prepare_cached(
        // `+?2`: a bare parameter would be recompiled at every run (see `claimable_sql`).
        "SELECT execution_id, status FROM executions
         WHERE due_at IS NOT NULL AND due_at <= ?1 ORDER BY due_at LIMIT +?2",
    )?;
    let rows = statement.query_map(params![format_timestamp(now), max], |row| {
        Ok((records::uuid(row, 0)?, records::word(row, 1)?))
    })?;
    Ok(rows.collect::<durably_db::Result<_>>()?)
}

/// The earliest `due_at` of any execution, if one waits for a time.
///
/// # Errors
/// A storage error, or [`Error::Inconsistent`] for a damaged time.
pub fn next_due(conn: &Connection) -> Result<Option<DateTime<Utc>>> {
    let text: Option<String> = conn
        .prepare_cached("SELECT min(due_at) FROM executions WHERE due_at IS NOT NULL")?
        .query_row([], |row| row.get(0))?;
    text.map(|text| {
        durably_lock::parse_timestamp(&text)
            .ok_or_else(|| Error::Inconsistent(format!("due_at {text:?} is not a timestamp")))
    })
    .transpose()
}

/// How many steps execution `id` has recorded: one more than its highest seq (one seek).
///
/// # Errors
/// A storage error.
pub fn recorded_steps(conn: &Connection, id: Uuid) -> Result<u32> {
    Ok(conn
        .prepare_cached("SELECT coalesce(max(seq) + 1, 0) FROM steps WHERE execution_id = ?1")?
        .query_row(params![id.to_string()], |row| row.get(0))?)
}

/// `waiting` → `queued`: its time came ([`Wake::Due`], `due_at` at or before `now`), or a
/// message arrived on the topic it waits for ([`Wake::Topic`]). Clears `due_at` and
/// `wait_topic`.
///
/// # Errors
/// A storage error.
pub fn wake(conn: &Connection, id: Uuid, now: DateTime<Utc>, by: Wake<'_>) -> Result<bool> {
    let now = format_timestamp(now);
    let (due_by, topic) = match by {
        Wake::Due => (Some(now.as_str()), None),
        Wake::Topic(topic) => (None, Some(topic)),
    };
    let changed = conn
        .prepare_cached(
            "UPDATE executions SET status = 'queued', due_at = NULL, wait_topic = NULL,
                                   updated_at = ?2
             WHERE execution_id = ?1 AND status = 'waiting'
               AND (due_at <= ?3 OR ?3 IS NULL) AND (wait_topic = ?4 OR ?4 IS NULL)",
        )?
        .execute(params![id.to_string(), now, due_by, topic])?;
    Ok(changed == 1)
}

/// A queued execution's `not_before` has passed: clears its `due_at`, so it is claimable.
///
/// # Errors
/// A storage error.
pub fn clear_not_before(conn: &Connection, id: Uuid) -> Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE executions SET due_at = NULL
             WHERE execution_id = ?1 AND status = 'queued' AND due_at IS NOT NULL",
        )?
        .execute(params![id.to_string()])?;
    Ok(changed == 1)
}

/// An interrupted execution, as [`interrupted_after`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptedRow {
    /// Its place in the listing: pass the last row's to [`interrupted_after`] for the next
    /// page.
    pub position: i64,
    /// The execution.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
}

/// One page of the `interrupted` executions, in the order they were created, starting after
/// `after` (a [`InterruptedRow::position`]; `None`: from the first), at most `max`. A keyset
/// page: each is one seek on `executions_by_status`, however many pages came before, so a
/// pass over any number of interrupted executions holds one page at a time.
///
/// # Errors
/// A storage error.
pub fn interrupted_after(
    conn: &Connection,
    after: Option<i64>,
    max: u32,
) -> Result<Vec<InterruptedRow>> {
    // `finalized_at IS NULL` always holds for an unfinished status (a CHECK says so); naming
    // it lets the seek use the index's second column and range over its trailing rowid.
    // `+?2`: a bare parameter would be recompiled at every page (see `claimable_sql`).
    let mut statement = conn.prepare_cached(
        "SELECT id, execution_id, kind FROM executions
         WHERE status = 'interrupted' AND finalized_at IS NULL AND id > ?1
         ORDER BY id LIMIT +?2",
    )?;
    let rows = statement.query_map(params![after.unwrap_or(i64::MIN), max], |row| {
        Ok(InterruptedRow {
            position: row.get(0)?,
            id: records::uuid(row, 1)?,
            kind: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<durably_db::Result<_>>()?)
}

/// `interrupted` → `queued` (the runtime's recovery), with `detail` saying why.
///
/// # Errors
/// A storage error.
pub fn requeue_interrupted(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    detail: Option<&serde_json::Value>,
) -> Result<bool> {
    move_from(conn, id, now, Status::Interrupted, Status::Queued, detail)
}

/// `interrupted` → `stuck`: it failed to resume too many times in a row; `detail` says why.
/// Only an operator's [`reopen`] moves it on.
///
/// # Errors
/// A storage error.
pub fn park_stuck(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    detail: &serde_json::Value,
) -> Result<bool> {
    move_from(
        conn,
        id,
        now,
        Status::Interrupted,
        Status::Stuck,
        Some(detail),
    )
}

fn move_from(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    from: Status,
    to: Status,
    detail: Option<&serde_json::Value>,
) -> Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE executions SET status = ?3, status_detail = ?4, updated_at = ?5
             WHERE execution_id = ?1 AND status = ?2",
        )?
        .execute(params![
            id.to_string(),
            from.as_str(),
            to.as_str(),
            detail.map(serde_json::Value::to_string),
            format_timestamp(now),
        ])?;
    Ok(changed == 1)
}

/// Puts a finished or stuck execution back in its queue to continue from its last recorded
/// step (an operator's resume): when its status is one of `from`, it becomes `queued` with
/// its end (output, error, `finalized_at`), cancel request and detail cleared. A `running`
/// execution is never moved, whatever `from` says. Returns the status it had, if it moved.
///
/// # Errors
/// A storage error, or [`Error::Inconsistent`] for a damaged row.
pub fn reopen(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    from: &[Status],
) -> Result<Option<Status>> {
    let resource = id.to_string();
    let status = crate::extension::execution_status(conn, id)?;
    let Some(status) = status.filter(|status| *status != Status::Running && from.contains(status))
    else {
        return Ok(None);
    };
    conn.prepare_cached(
        "UPDATE executions SET status = 'queued', output = NULL, error = NULL,
                               finalized_at = NULL, due_at = NULL, wait_topic = NULL,
                               cancel_requested_at = NULL, cancel_reason = NULL,
                               status_detail = NULL, updated_at = ?3
         WHERE execution_id = ?1 AND status = ?2",
    )?
    .execute(params![resource, status.as_str(), format_timestamp(now)])?;
    Ok(Some(status))
}

/// Appends an audit event about execution `id` (and step `seq`) in the caller's transaction.
/// `detail` is built from ids, names and reasons, never from payloads.
///
/// # Errors
/// A storage error.
pub fn record_execution_event(
    conn: &Connection,
    at: DateTime<Utc>,
    id: Uuid,
    seq: Option<u32>,
    kind: &str,
    detail: &serde_json::Value,
) -> Result<()> {
    let resource = id.to_string();
    events::record(
        conn,
        &format_timestamp(at),
        Some(&resource),
        seq,
        kind,
        detail,
    )
}

/// The place in its queue of each claimable execution among `ids` (1: claimed next), counted
/// among the claimable executions of its queue in claim order. Executions that are not
/// claimable are left out.
///
/// # Errors
/// A storage error.
pub fn queue_positions(conn: &Connection, ids: &[Uuid]) -> Result<Vec<(Uuid, u64)>> {
    let mut statement = conn.prepare_cached(
        "SELECT 1 + (SELECT count(*) FROM executions AS ahead
                     WHERE ahead.status = 'queued' AND ahead.due_at IS NULL
                       AND ahead.queue IS NOT DISTINCT FROM e.queue
                       AND (ahead.priority > e.priority
                            OR (ahead.priority = e.priority AND ahead.id < e.id)))
         FROM executions AS e
         WHERE e.execution_id = ?1 AND e.status = 'queued' AND e.due_at IS NULL",
    )?;
    let mut positions = Vec::with_capacity(ids.len());
    for id in ids {
        let position: Option<i64> = statement
            .query_row(params![id.to_string()], |row| row.get(0))
            .optional()?;
        if let Some(position) = position {
            positions.push((*id, u64::try_from(position).unwrap_or(0)));
        }
    }
    Ok(positions)
}

/// The longest cancel reason, in bytes (`executions.cancel_reason` holds at most this).
pub const CANCEL_REASON_BYTES_MAX: usize = 1024;

/// The reason of execution `id`'s pending cancel request, if one is pending: a holder must
/// stop, and a claim or a recovery must cancel instead of running it. One primary-key seek.
///
/// # Errors
/// A storage error.
pub fn pending_cancel(conn: &Connection, id: Uuid) -> Result<Option<String>> {
    cancel_reason(conn, &id.to_string())
}

/// The reason of a cancel pending for `resource` (`""` when none was given), read without a
/// lock.
fn cancel_reason(conn: &Connection, resource: &str) -> Result<Option<String>> {
    let reason: Option<Option<String>> = conn
        .prepare_cached(
            "SELECT cancel_reason FROM executions
             WHERE execution_id = ?1 AND cancel_requested_at IS NOT NULL",
        )?
        .query_row(params![resource], |row| row.get(0))
        .optional()?;
    Ok(reason.map(Option::unwrap_or_default))
}

/// The SQL of [`cancel_requests`]: it reads only the `executions_cancel_requested` index,
/// named because the planner, without statistics, would scan every running execution through
/// `executions_by_status` instead.
/// `+?1`: a bare parameter would be recompiled at every check (see `claimable_sql`).
const CANCEL_REQUESTS: &str =
    "SELECT execution_id, cancel_reason FROM executions INDEXED BY executions_cancel_requested
     WHERE cancel_requested_at IS NOT NULL AND status = 'running' LIMIT +?1";

/// Running executions with a pending cancel request, at most `max`, as (id, reason): what a
/// process driving executions checks after another process committed, to stop the ones it
/// holds. Reads only the partial index of pending requests, which holds a row only until its
/// holder ends the execution.
///
/// # Errors
/// A storage error, or [`Error::Inconsistent`] for a damaged id.
pub fn cancel_requests(conn: &Connection, max: u32) -> Result<Vec<(Uuid, String)>> {
    let mut statement = conn.prepare_cached(CANCEL_REQUESTS)?;
    let rows = statement.query_map(params![max], |row| {
        Ok((
            records::uuid(row, 0)?,
            row.get::<_, Option<String>>(1)?.unwrap_or_default(),
        ))
    })?;
    Ok(rows.collect::<durably_db::Result<_>>()?)
}

/// Asks the live holder of `running` execution `id` to stop: records the request (once: a
/// second request keeps the first's time and reason) and a `cancel_requested` event naming the
/// newest step row of the execution at this commit. From this commit on, the holder's writes
/// are refused but a guarded step's result, `fail` and `finish_cancelled` (R5), so no step row
/// gets a larger id. Returns whether a request was recorded; `false` when one was pending or
/// the execution is not running.
///
/// # Errors
/// [`Error::PayloadTooLarge`] for a reason over [`CANCEL_REASON_BYTES_MAX`], a storage error.
pub fn request_cancel(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    reason: &str,
) -> Result<bool> {
    request_cancel_at(conn, id, &format_timestamp(now), reason)
}

/// [`request_cancel`] at `now` in the journal's text form.
pub(crate) fn request_cancel_at(
    conn: &Connection,
    id: Uuid,
    now: &str,
    reason: &str,
) -> Result<bool> {
    check_reason(reason)?;
    let resource = id.to_string();
    let changed = conn
        .prepare_cached(
            "UPDATE executions SET cancel_requested_at = ?2, cancel_reason = ?3, updated_at = ?2
             WHERE execution_id = ?1 AND status = 'running' AND cancel_requested_at IS NULL",
        )?
        .execute(params![resource, now, reason])?;
    if changed == 0 {
        return Ok(false);
    }
    let detail =
        serde_json::json!({ "reason": reason, "last_step_id": newest_step_row(conn, id)? });
    events::record(
        conn,
        now,
        Some(&resource),
        None,
        crate::records::event_kind::CANCEL_REQUESTED,
        &detail,
    )?;
    Ok(true)
}

/// The id of execution `id`'s newest step row (`steps.id`: rows are inserted at a guarded
/// step's intent or another step's result, in commit order, and a guarded step's result
/// updates its intent's row). `None` before its first step. What a `cancel_requested` event
/// records as `last_step_id`: no row of the execution is newer after the request (R5).
///
/// # Errors
/// A storage error.
pub fn newest_step_row(conn: &Connection, id: Uuid) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT max(id) FROM steps WHERE execution_id = ?1")?
        .query_row(params![id.to_string()], |row| row.get(0))?)
}

/// Cancels execution `id` at once if it is parked (`queued`, `waiting`, `stuck`,
/// `awaiting_operator`) or `interrupted`: nobody holds it, so nothing of it runs. It becomes
/// `cancelled` with error `{"cancelled": reason}`, with a `cancelled` event. Its steps stay as
/// they are: an intent in the ambiguous window survives, for an operator to resolve if the
/// execution is resumed. Returns the status it had, if it moved.
///
/// On PostgreSQL the execution row is locked `FOR UPDATE` before its status is read: a claim
/// or an open on another connection (which lock the same row) then either committed before
/// the read, which sees its status, or waits for this transaction. Without the lock the status
/// could move between the read and the compare-and-swap, which would then find nothing to
/// move. SQLite's single writer makes the read and the update atomic already.
///
/// # Errors
/// [`Error::PayloadTooLarge`] for a reason over [`CANCEL_REASON_BYTES_MAX`], a storage error.
pub fn cancel_now(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    reason: &str,
) -> Result<Option<Status>> {
    crate::ownership::lock_execution_row(conn, &id.to_string())?;
    let status = crate::extension::execution_status(conn, id)?;
    match status {
        Some(status) if status.is_parked() || status == Status::Interrupted => {
            cancel_row(conn, id, status, &format_timestamp(now), reason)?;
            Ok(Some(status))
        }
        _ => Ok(None),
    }
}

/// Moves execution `id` from `was` to `cancelled` (compare-and-swap on `was`) with its
/// `cancelled` event. The caller made sure nobody drives it: it is parked, or the caller
/// holds its lock for the transaction.
pub(crate) fn cancel_row(
    conn: &Connection,
    id: Uuid,
    was: Status,
    now: &str,
    reason: &str,
) -> Result<()> {
    check_reason(reason)?;
    let resource = id.to_string();
    let error = serde_json::json!({ "cancelled": reason }).to_string();
    let changed = conn
        .prepare_cached(
            "UPDATE executions SET status = 'cancelled', error = ?3, updated_at = ?4,
                                   finalized_at = ?4, due_at = NULL, wait_topic = NULL
             WHERE execution_id = ?1 AND status = ?2",
        )?
        .execute(params![resource, was.as_str(), error, now])?;
    if changed != 1 {
        return Err(Error::Inconsistent(format!(
            "execution {id} was expected {was} when it was cancelled"
        )));
    }
    let detail = serde_json::json!({ "was": was.as_str(), "reason": reason });
    events::record(
        conn,
        now,
        Some(&resource),
        None,
        crate::records::event_kind::CANCELLED,
        &detail,
    )
}

fn check_reason(reason: &str) -> Result<()> {
    if reason.len() > CANCEL_REASON_BYTES_MAX {
        return Err(Error::PayloadTooLarge {
            what: "the cancel reason".to_owned(),
            bytes: reason.len(),
            max: CANCEL_REASON_BYTES_MAX,
        });
    }
    Ok(())
}

/// Execution `id`'s `status_detail`: why it is in its status, for people and for callers
/// deciding what an operator may do with it (a resume). `None` when it has none or does not
/// exist.
///
/// # Errors
/// A storage error, or [`Error::Inconsistent`] when the stored detail is not JSON.
pub fn status_detail(conn: &Connection, id: Uuid) -> Result<Option<serde_json::Value>> {
    let text: Option<Option<String>> = conn
        .prepare_cached("SELECT status_detail FROM executions WHERE execution_id = ?1")?
        .query_row(params![id.to_string()], |row| row.get(0))
        .optional()?;
    text.flatten()
        .map(|text| {
            serde_json::from_str(&text).map_err(|error| {
                Error::Inconsistent(format!(
                    "execution {id}: status_detail is not JSON: {error}"
                ))
            })
        })
        .transpose()
}

/// Sets execution `id`'s `status_detail` (names, seqs and reasons, never payloads), in the
/// transaction that gives it the status the detail explains (a finalize's hook).
///
/// # Errors
/// A storage error.
pub fn set_status_detail(conn: &Connection, id: Uuid, detail: &serde_json::Value) -> Result<()> {
    conn.prepare_cached("UPDATE executions SET status_detail = ?2 WHERE execution_id = ?1")?
        .execute(params![id.to_string(), detail.to_string()])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rusqlite::StatementStatus;

    use super::{CANCEL_REQUESTS, claimable, claimable_sql};
    use crate::inspect::query_plan;

    /// The holders' check reads only the partial index of pending requests.
    #[test]
    fn pending_requests_are_read_from_their_index() {
        assert_eq!(
            query_plan(CANCEL_REQUESTS, durably_db::params![64]),
            ["SCAN executions USING INDEX executions_cancel_requested"]
        );
    }

    /// Candidates are read from the claimable index in claim order, whatever kinds are asked
    /// for: the kind filter never makes the claim sort or scan the table.
    #[test]
    fn candidates_are_read_from_the_claimable_index_in_claim_order() {
        for (in_queue, queue) in [(true, Some("q")), (false, None)] {
            let sql = claimable_sql(in_queue, 2);
            let plan = query_plan(&sql, durably_db::params![queue, 64, "a", "b"]);
            assert_eq!(
                plan,
                ["SEARCH executions USING INDEX executions_claimable (queue=?)"]
            );
        }
    }

    /// The claim read runs at every run's end: its cached statement is never recompiled,
    /// whatever queue and limit it reads with.
    #[test]
    fn the_cached_candidates_statement_is_never_recompiled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let conn =
            crate::storage::open_writer(&path, crate::config::Durability::Full, 1_000).unwrap();
        crate::storage::migrate(&conn, &path).unwrap();
        let conn = durably_db::Connection::from(conn);
        for (in_queue, queue) in [(true, Some("q")), (false, None)] {
            for max in 1..4 {
                claimable(&conn, queue, &["a"], max).unwrap();
            }
            let statement = conn
                .as_sqlite()
                .unwrap()
                .prepare_cached(&claimable_sql(in_queue, 1))
                .unwrap();
            assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
        }
    }
}
