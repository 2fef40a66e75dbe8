//! Taking an execution's lock inside a write transaction: by an open, or by an operator
//! action that holds it for the length of its transaction.

use durably_db::{Connection, Sql, params};
use durably_lock::{Acquire, DeathReason, HolderRecord, Locker};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::records::event_kind;
use crate::states::Status;
use crate::telemetry::{self, TakenBecause, TakenBy};

/// What to do with a lock that this journal's own instance holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnLocks {
    /// A live handle of this journal may hold it: refuse like any other holder.
    Respect,
    /// No live handle of this journal holds it, so it is a leak: take it back.
    Reclaim,
}

/// Locks the row of execution `resource` for an ownership change (serialization point 8) and
/// says whether it exists. On PostgreSQL the row is locked `FOR UPDATE` before the lock row is
/// touched, so an open or a sweep takeover waits for the step writes in flight (they hold the
/// row `FOR SHARE`, see `execution::fence`), and the lock order is the execution row, then
/// its lock row, everywhere. SQLite's single writer serializes them.
pub(crate) fn lock_execution_row(conn: &Connection, resource: &str) -> Result<bool> {
    const LOCK_EXECUTION_ROW: Sql = Sql {
        sqlite: "SELECT 1 FROM executions WHERE execution_id = ?1",
        postgres: "SELECT 1 FROM executions WHERE execution_id = ?1 FOR UPDATE",
    };
    Ok(conn
        .prepare_cached(conn.pick(&LOCK_EXECUTION_ROW))?
        .exists(params![resource])?)
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
    let locked = |holder: HolderRecord| Error::Locked {
        execution_id: id,
        pid: holder.pid,
        in_this_process: holder.is_process(locker.identity()),
        since: holder.acquired_at,
    };
    let is_execution = lock_execution_row(conn, &resource)?;
    let (epoch, from_pid, from_epoch, reason, takeover) =
        match locker.try_acquire(conn, &resource)? {
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
                Some(takeover),
            ),
            Acquire::Held { holder, epoch, .. }
                if ours == OwnLocks::Reclaim
                    && holder.instance_id == locker.instance_id().to_string() =>
            {
                let Some(new_epoch) = locker.take_over(conn, &resource, epoch)? else {
                    return Err(locked(holder));
                };
                let reason = "this process leaked it: its handle went away before the release \
                              committed";
                (new_epoch, holder.pid, epoch, reason.to_owned(), None)
            }
            Acquire::Held { holder, .. } => return Err(locked(holder)),
        };
    let mut detail = json!({
        "resource": resource,
        "from_pid": from_pid,
        "from_epoch": from_epoch,
        "reason": reason,
    });
    let because = match &takeover {
        Some(takeover) => {
            note_lease_expired_holder(&mut detail, &takeover.from, &takeover.reason);
            TakenBecause::of(&takeover.reason)
        }
        None => TakenBecause::Leaked,
    };
    telemetry::taken_over(TakenBy::Acquire, because);
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
    crate::extension::execution_status(conn, id)?.ok_or(Error::NotFound(id))
}

/// The key, in the detail of a `takeover` or `orphan_reclaimed` event, of the holder whose lock
/// was taken only because its lease expired. That process may still be running, and so may
/// still perform the effect of a step it was inside; the event keeps its identity so that
/// `seen_intent` ([`crate::Operator::seen_intent`], [`crate::Inspector::seen_intent`]) can ask,
/// later, whether it has stopped.
const LEASE_EXPIRED_HOLDER: &str = "lease_expired_holder";

/// How many such holders of one execution `seen_intent` judges, newest first. Each still
/// running after this many later lease expiries of the same execution would be a process frozen
/// through all of them.
const LEASE_EXPIRED_HOLDERS_JUDGED_MAX: u32 = 64;

/// Adds `holder` to an event's `detail` under [`LEASE_EXPIRED_HOLDER`] when `reason` is an
/// expired lease. Any other death was proved by the evidence, and needs no second look.
pub(crate) fn note_lease_expired_holder(
    detail: &mut Value,
    holder: &HolderRecord,
    reason: &DeathReason,
) {
    if !matches!(reason, DeathReason::LeaseExpired { .. }) {
        return;
    }
    if let Some(fields) = detail.as_object_mut() {
        let recorded = json!({
            "instance_id": holder.instance_id,
            "pid": holder.pid,
            "start_time": holder.start_time,
            "boot_id": holder.boot_id,
            "pid_ns": holder.pid_ns,
            "hostname": holder.hostname,
            "acquired_at": holder.acquired_at,
            "heartbeat_at": holder.heartbeat_at,
            "lease_ms": holder.lease_ms,
        });
        fields.insert(LEASE_EXPIRED_HOLDER.to_owned(), recorded);
    }
}

/// The holders of execution `resource` whose locks were taken because their leases expired,
/// newest first, at most [`LEASE_EXPIRED_HOLDERS_JUDGED_MAX`]. A recorded holder that does not
/// read back (a damaged or foreign event) is an error, never skipped: it may name a process
/// that still runs.
pub(crate) fn lease_expired_holders(
    conn: &Connection,
    resource: &str,
) -> Result<Vec<HolderRecord>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, detail -> 'lease_expired_holder' FROM events
         WHERE execution_id = ?1 AND kind IN ('takeover', 'orphan_reclaimed')
           AND detail -> 'lease_expired_holder' IS NOT NULL
         ORDER BY id DESC LIMIT ?2",
    )?;
    let mut rows = statement.query(params![resource, LEASE_EXPIRED_HOLDERS_JUDGED_MAX])?;
    let mut holders = Vec::new();
    while let Some(row) = rows.next()? {
        let (id, text): (i64, String) = (row.get(0)?, row.get(1)?);
        let holder = serde_json::from_str(&text)
            .ok()
            .as_ref()
            .and_then(holder_from_json)
            .ok_or_else(|| {
                Error::Inconsistent(format!(
                    "event {id} of execution {resource} records a lease-expired holder that \
                     does not read back"
                ))
            })?;
        holders.push(holder);
    }
    Ok(holders)
}

fn holder_from_json(value: &Value) -> Option<HolderRecord> {
    let text = |key: &str| value.get(key)?.as_str().map(str::to_owned);
    let number = |key: &str| value.get(key)?.as_i64();
    Some(HolderRecord {
        instance_id: text("instance_id")?,
        pid: number("pid")?,
        start_time: number("start_time")?,
        boot_id: text("boot_id")?,
        pid_ns: number("pid_ns")?,
        hostname: text("hostname")?,
        acquired_at: text("acquired_at")?,
        heartbeat_at: text("heartbeat_at")?,
        lease_ms: number("lease_ms"),
    })
}
