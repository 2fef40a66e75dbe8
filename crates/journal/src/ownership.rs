//! Taking an execution's lock inside a write transaction: by an open, or by an operator
//! action that holds it for the length of its transaction.

use durably_lock::{Acquire, Locker};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::records::event_kind;
use crate::states::Status;

/// What to do with a lock that this journal's own instance holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnLocks {
    /// A live handle of this journal may hold it: refuse like any other holder.
    Respect,
    /// No live handle of this journal holds it, so it is a leak: take it back.
    Reclaim,
}

/// Takes the lock of execution `id` or reports its live holder. A takeover from a dead holder,
/// or of a lock this instance leaked, is audited in the same transaction.
pub(crate) fn acquire_or_locked(
    conn: &Connection,
    locker: &Locker,
    ours: OwnLocks,
    id: Uuid,
    now: &str,
) -> Result<u64> {
    let resource = id.to_string();
    let locked = |pid, since| Error::Locked {
        execution_id: id,
        pid,
        since,
    };
    let (epoch, from_pid, from_epoch, reason) = match locker.try_acquire(conn, &resource)? {
        Acquire::Acquired {
            epoch,
            took_over: None,
        } => return Ok(epoch),
        Acquire::Acquired {
            epoch,
            took_over: Some(takeover),
        } => (
            epoch,
            takeover.from.pid,
            takeover.from_epoch,
            takeover.reason.to_string(),
        ),
        Acquire::Held { holder, epoch, .. }
            if ours == OwnLocks::Reclaim
                && holder.instance_id == locker.instance_id().to_string() =>
        {
            let Some(new_epoch) = locker.take_over(conn, &resource, epoch)? else {
                return Err(locked(holder.pid, holder.acquired_at));
            };
            let reason = "this process leaked it: its handle went away before the release \
                          committed";
            (new_epoch, holder.pid, epoch, reason.to_owned())
        }
        Acquire::Held { holder, .. } => return Err(locked(holder.pid, holder.acquired_at)),
    };
    let is_execution = conn
        .prepare_cached("SELECT 1 FROM executions WHERE execution_id = ?1")?
        .exists(params![resource])?;
    let detail = json!({
        "resource": resource,
        "from_pid": from_pid,
        "from_epoch": from_epoch,
        "reason": reason,
    });
    events::record(
        conn,
        now,
        is_execution.then_some(resource.as_str()),
        None,
        event_kind::TAKEOVER,
        &detail,
    )?;
    Ok(epoch)
}

/// The status of execution `id`.
///
/// # Errors
/// [`Error::NotFound`] when it does not exist.
pub(crate) fn status_of(conn: &Connection, id: Uuid) -> Result<Status> {
    let word: Option<String> = conn
        .prepare_cached("SELECT status FROM executions WHERE execution_id = ?1")?
        .query_row(params![id.to_string()], |row| row.get(0))
        .optional()?;
    let word = word.ok_or(Error::NotFound(id))?;
    word.parse()
        .map_err(|error| Error::Inconsistent(format!("execution {id}: {error}")))
}
