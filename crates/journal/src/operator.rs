//! [`Operator`]: the actions a person (or a tool such as `durably`) takes on a journal that
//! programs do not take in their everyday work: cancel, resolve an ambiguous step, sweep the
//! executions of dead processes, and delete old ones. Every action here holds the execution's
//! lock for the length of its transaction, so no live process is driving it meanwhile.

use std::sync::Arc;

use durably_db::{Connection, Dialect, OptionalExtension, params};
use durably_lock::Locker;
use serde_json::json;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::handles::OpenHandles;
use crate::journal::Journal;
use crate::ownership::{OwnLocks, acquire_or_locked, status_of};
use crate::payload;
use crate::records::event_kind;
use crate::seen_intent::{self, SeenIntent};
use crate::states::{Status, StepState};

/// An operator's answer for a step stuck in the ambiguous window.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The effect happened, and this is its result: replay returns it without running anything.
    Completed(serde_json::Value),
    /// The effect did not happen: the next run executes the step.
    NotDone,
}

/// The operator actions of a journal: `journal.operator()`.
#[derive(Debug, Clone, Copy)]
pub struct Operator<'journal> {
    pub(crate) journal: &'journal Journal,
}

impl Journal {
    /// The operator actions on this journal: cancel, resolve, sweep, retention.
    pub fn operator(&self) -> Operator<'_> {
        Operator { journal: self }
    }
}

impl Operator<'_> {
    /// Cancels execution `id`, or asks its live holder to stop: see
    /// [`Operator::cancel_with`].
    ///
    /// # Errors
    /// As [`Operator::cancel_with`].
    pub async fn cancel(&self, id: Uuid, reason: &str) -> Result<CancelOutcome> {
        self.cancel_with(id, reason, |_| Ok(())).await
    }

    /// Cancels execution `id` with `reason`, running `also` in the same transaction (a crate
    /// built on the journal clears its own rows: a deadline). A cancelled execution never
    /// reopens on its own.
    ///
    /// - Nobody drives it (`queued`, `waiting`, `stuck`, `awaiting_operator`, `interrupted`,
    ///   or `running` with a dead holder or a lock this process leaked): it is `cancelled` at
    ///   once, under its lock for the transaction, with a `cancelled` event:
    ///   [`CancelOutcome::Cancelled`].
    /// - A live process holds it `running`: the request is recorded (once) with a
    ///   `cancel_requested` event, and from this commit on that holder's writes are refused but
    ///   a guarded step's result, `fail` and `finish_cancelled` (R5). The holder sees the
    ///   refusal ([`Error::CancelRequested`]) and ends it with
    ///   [`crate::Execution::finish_cancelled`]: [`CancelOutcome::Requested`].
    ///
    /// A step in the ambiguous window stays there either way: the effect may have happened,
    /// and only an operator's answer says whether.
    ///
    /// # Errors
    /// Nothing is written on any error: [`Error::NotFound`], [`Error::Refused`] when it has
    /// already ended, [`Error::Locked`] when a live process holds an execution that is not
    /// running (a moment's state: retry), [`Error::PayloadTooLarge`] for a reason over
    /// [`crate::lifecycle::CANCEL_REASON_BYTES_MAX`], `also`'s own error, a storage error.
    pub async fn cancel_with<A>(&self, id: Uuid, reason: &str, also: A) -> Result<CancelOutcome>
    where
        A: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let journal = self.journal;
        let (locker, now) = (Arc::clone(&journal.inner.locker), journal.now());
        let handles = Arc::clone(&journal.inner.handles);
        let reason = reason.to_owned();
        let outcome = journal
            .inner
            .writer
            .write(move |conn| {
                cancel_in_transaction(conn, &locker, &handles, id, &now, &reason, also)
            })
            .await?;
        #[cfg(feature = "failpoints")]
        {
            let failpoint = match outcome {
                CancelOutcome::Cancelled { .. } => "journal::after-cancel-commit",
                CancelOutcome::Requested { .. } => "journal::after-cancel-request-commit",
            };
            fail::fail_point!(failpoint, |_| std::process::abort());
        }
        Ok(outcome)
    }

    /// Records an operator's answer for step `seq`, stuck in the ambiguous window. An
    /// execution `awaiting_operator` on that step becomes `interrupted` in the same
    /// transaction: resumable again, by a program's `recoverable()` or the runtime.
    ///
    /// Prefer [`Operator::resolve_seen`]: this answers whatever intent the step has when the
    /// answer arrives, which may not be the one that was checked.
    ///
    /// # Errors
    /// [`Error::Locked`] while a live process holds the execution, [`Error::Refused`] when the
    /// step is not ambiguous, [`Error::NotFound`], [`Error::PayloadTooLarge`].
    pub async fn resolve(&self, id: Uuid, seq: u32, resolution: Resolution) -> Result<()> {
        self.resolve_expecting(id, seq, None, resolution).await
    }

    /// Which intent step `seq` is now, if it is in the ambiguous window: take it before checking
    /// the outside world, and pass it to [`Operator::resolve_seen`] with the answer, so the
    /// answer applies only to the intent that was checked. `None` when the step is not
    /// ambiguous.
    ///
    /// Refused while a live process holds the execution: it may be running that very attempt,
    /// so the outside world can still change without the step changing, and a check made now
    /// could miss an effect that happens next. Refused, too, while a process that lost the
    /// execution only because its lease expired may still be running, whether it still holds
    /// the lock or was taken over since: its lock was forfeited, but it may be inside the
    /// step's closure, frozen or slow, and perform the effect when it goes on.
    ///
    /// # Errors
    /// [`Error::Locked`] while a live process holds the execution,
    /// [`Error::LeaseExpiredHolderAlive`] while one whose lease expired may still run; a
    /// storage error.
    pub fn seen_intent(&self, id: Uuid, seq: u32) -> Result<Option<SeenIntent>> {
        let journal = self.journal;
        let locker = &journal.inner.locker;
        let found = journal.read(|conn| seen_intent::with_holders(conn, id, seq))?;
        // As for an operator action: a lock of this instance with no open handle is a leak,
        // and nobody in this process is running the execution's steps under it.
        seen_intent::unless_held(found, id, seq, locker.judge(), |holder| {
            holder.instance_id == locker.instance_id().to_string()
                && !journal.inner.handles.contains(id)
        })
    }

    /// As [`Operator::resolve`], but refused when the step changed since `seen` was taken: it
    /// was run again (by a process, or after another operator's answer), so the outside world
    /// that was checked may no longer describe this intent.
    ///
    /// # Errors
    /// As [`Operator::resolve`]; [`Error::StaleSeenIntent`] when the step changed.
    pub async fn resolve_seen(
        &self,
        id: Uuid,
        seq: u32,
        seen: SeenIntent,
        resolution: Resolution,
    ) -> Result<()> {
        self.resolve_expecting(id, seq, Some(seen), resolution)
            .await
    }

    async fn resolve_expecting(
        &self,
        id: Uuid,
        seq: u32,
        seen: Option<SeenIntent>,
        resolution: Resolution,
    ) -> Result<()> {
        let value = match &resolution {
            Resolution::Completed(value) => Some(payload::encode(
                value,
                "the resolved result",
                self.journal.payload_bytes_max(),
            )?),
            Resolution::NotDone => None,
        };
        self.with_lock(id, move |conn, now| {
            let resource = id.to_string();
            if let Some(seen) = seen {
                check_unchanged(conn, id, seq, seen)?;
            }
            resolve_step(conn, &resource, seq, value.as_deref(), now)
        })
        .await
    }

    /// Runs `action(conn, now)` in one write transaction while holding execution `id`'s lock.
    async fn with_lock<F>(&self, id: Uuid, action: F) -> Result<()>
    where
        F: FnOnce(&Connection, &str) -> Result<()> + Send + 'static,
    {
        let journal = self.journal;
        let (locker, now) = (Arc::clone(&journal.inner.locker), journal.now());
        let handles = Arc::clone(&journal.inner.handles);
        journal
            .inner
            .writer
            .write(move |conn| with_operator_lock(conn, &locker, &handles, id, &now, action))
            .await
    }
}

/// What [`Operator::cancel_with`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The execution is `cancelled` now.
    Cancelled {
        /// The status it had.
        was: Status,
    },
    /// A live process holds it: the request is recorded, and that process ends it
    /// `cancelled` at its next write (a guarded step already in flight finishes first).
    Requested {
        /// The holder's pid.
        pid: i64,
    },
}

/// The transaction of [`Operator::cancel_with`]. Every refusal returns before the first write.
fn cancel_in_transaction<A>(
    conn: &Connection,
    locker: &Locker,
    handles: &OpenHandles,
    id: Uuid,
    now: &str,
    reason: &str,
    also: A,
) -> Result<CancelOutcome>
where
    A: FnOnce(&Connection) -> Result<()>,
{
    lock_execution_row(conn, id)?;
    let status = status_of(conn, id)?;
    if status.is_final() {
        return Err(Error::Refused(format!(
            "execution {id} is already {status}; only an unfinished execution can be cancelled"
        )));
    }
    // As for every operator action: a handle of this journal may be driving it, else a lock
    // of this instance is a leak.
    let ours = if handles.contains(id) {
        OwnLocks::Respect
    } else {
        OwnLocks::Reclaim
    };
    match acquire_or_locked(conn, locker, ours, id, now) {
        Ok(epoch) => {
            crate::lifecycle::cancel_row(conn, id, status, now, reason)?;
            also(conn)?;
            locker.release(conn, &id.to_string(), epoch)?;
            Ok(CancelOutcome::Cancelled { was: status })
        }
        Err(Error::Locked { pid, .. }) if status == Status::Running => {
            crate::lifecycle::request_cancel_at(conn, id, now, reason)?;
            also(conn)?;
            Ok(CancelOutcome::Requested { pid })
        }
        Err(error) => Err(error),
    }
}

/// Refuses an answer about an intent other than the one the operator looked at.
fn check_unchanged(conn: &Connection, id: Uuid, seq: u32, seen: SeenIntent) -> Result<()> {
    let now = seen_intent::current(conn, &id.to_string(), seq)?;
    if now == Some(seen) {
        return Ok(());
    }
    Err(Error::StaleSeenIntent {
        execution_id: id,
        seq,
        seen,
        now,
    })
}

fn resolve_step(
    conn: &Connection,
    resource: &str,
    seq: u32,
    value: Option<&str>,
    now: &str,
) -> Result<()> {
    let state: Option<StepState> = conn
        .prepare_cached("SELECT state FROM steps WHERE execution_id = ?1 AND seq = ?2")?
        .query_row(params![resource, seq], |row| crate::records::word(row, 0))
        .optional()?;
    match state {
        Some(StepState::Intent) => {}
        Some(other @ (StepState::Completed | StepState::Failed | StepState::Skipped)) => {
            return Err(Error::Refused(format!(
                "step {seq} of execution {resource} is not ambiguous: it is {other}; only a step \
                 with an intent and no result can be resolved"
            )));
        }
        None => {
            return Err(Error::Refused(format!(
                "execution {resource} has no step {seq}"
            )));
        }
    }
    if let Some(value) = value {
        conn.prepare_cached(
            "UPDATE steps SET state = 'completed', result = ?3, result_at = ?4
             WHERE execution_id = ?1 AND seq = ?2",
        )?
        .execute(params![resource, seq, value, now])?;
    } else {
        // Forgetting the intent makes the next run execute the step afresh, with the same key.
        conn.prepare_cached("DELETE FROM steps WHERE execution_id = ?1 AND seq = ?2")?
            .execute(params![resource, seq])?;
    }
    // The execution waited for this answer: it may run again, as after a crash (R6: only an
    // operator moves an execution out of `awaiting_operator`).
    conn.prepare_cached(
        "UPDATE executions SET status = 'interrupted', status_detail = NULL, updated_at = ?3
         WHERE execution_id = ?1 AND status = 'awaiting_operator'
           AND CAST(status_detail ->> 'seq' AS INTEGER) = ?2",
    )?
    .execute(params![resource, seq, now])?;
    let resolution = if value.is_some() {
        "completed"
    } else {
        "not-done"
    };
    events::record(
        conn,
        now,
        Some(resource),
        Some(seq),
        event_kind::OPERATOR_RESOLVED,
        &json!({ "resolution": resolution }),
    )
}

/// On PostgreSQL, locks execution `id`'s row until the transaction ends, before an operator
/// action reads its status and takes its lock row (the execution row first, as everywhere):
/// a claim on another connection then either committed before the read, which sees it, or
/// waits for the action and finds the status it left (a claim's candidates skip the locked
/// row). SQLite's single writer makes the read and the action atomic already. A missing row is
/// reported by the status read.
fn lock_execution_row(conn: &Connection, id: Uuid) -> Result<()> {
    if conn.dialect() == Dialect::Postgres {
        conn.prepare_cached("SELECT 1 FROM executions WHERE execution_id = ?1 FOR UPDATE")?
            .query_row(params![id.to_string()], |_| Ok(()))
            .optional()?;
    }
    Ok(())
}

/// Runs an operator action on an execution while holding its lock for the length of the
/// transaction, so no live process can be driving it meanwhile.
fn with_operator_lock(
    conn: &Connection,
    locker: &Locker,
    handles: &OpenHandles,
    id: Uuid,
    now: &str,
    action: impl FnOnce(&Connection, &str) -> Result<()>,
) -> Result<()> {
    lock_execution_row(conn, id)?;
    status_of(conn, id)?;
    // Decided inside the transaction: an open of this journal claims its id before its request
    // is queued, so it is either seen here or ordered after this action.
    let ours = if handles.contains(id) {
        OwnLocks::Respect
    } else {
        OwnLocks::Reclaim
    };
    let epoch = acquire_or_locked(conn, locker, ours, id, now)?;
    action(conn, now)?;
    locker.release(conn, &id.to_string(), epoch)?;
    Ok(())
}
