//! Execution-level operations of a [`Journal`]: open, inspect, cancel, resolve, recover.

use std::sync::Arc;

use durably_lock::{Acquire, Locker};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::execution::{Execution, Replay};
use crate::handles::{HandleClaim, OpenHandles};
use crate::journal::Journal;
use crate::payload;
use crate::records::{
    EVENT_COLUMNS, EXECUTION_COLUMNS, EventRecord, ExecutionRecord, ListFilter, STEP_COLUMNS,
    Status, StepRecord, event_kind,
};
use crate::seen_intent::{self, SeenIntent};

/// What opening an execution found.
#[derive(Debug)]
#[must_use = "an execution may already be finished"]
pub enum Opened {
    /// The execution is this handle's to drive (new, or resumed when `is_resume()`).
    Running(Execution),
    /// The execution had already finished; nothing runs.
    Finished(Finished),
}

/// The recorded outcome of a finished execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The execution id.
    pub execution_id: Uuid,
    /// `Completed` or `Failed`.
    pub status: Status,
    /// The output (JSON), when completed.
    pub output: Option<String>,
    /// The error (JSON), when failed.
    pub error: Option<String>,
}

/// An operator's answer for a step stuck in the ambiguous window.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The effect happened, and this is its result: replay returns it without running anything.
    Completed(serde_json::Value),
    /// The effect did not happen: the next run executes the step.
    NotDone,
}

struct OpenOutcome {
    epoch: u64,
    is_resume: bool,
    input: String,
}

enum OpenFound {
    Opened(OpenOutcome),
    Finished(Finished),
}

impl Journal {
    /// Opens execution `id` exclusively: takes its lock and creates or resumes its row in one
    /// transaction. A completed or failed execution returns its recorded outcome and runs
    /// nothing. A lock whose holder is dead is taken over (an audit event records it).
    ///
    /// Any UUID names an execution. For a new one, [`crate::new_execution_id`] (time-ordered)
    /// is recommended over a random id: executions made together then sit together in the
    /// journal's B-trees, and their commits write fewer pages.
    ///
    /// # Errors
    /// [`Error::Locked`] when a live process holds it, [`Error::Cancelled`] when it was
    /// cancelled, [`Error::PayloadTooLarge`] for an oversized input, or a storage error.
    pub async fn open_execution(
        &self,
        id: Uuid,
        kind: &str,
        name: &str,
        input: &impl Serialize,
    ) -> Result<Opened> {
        let input = payload::encode(input, "the execution input", self.payload_bytes_max())?;
        let Some(claim) = HandleClaim::claim(&self.inner.handles, id) else {
            return Err(self.locked_here(id));
        };
        let span = tracing::info_span!("durably.open", execution_id = %id, kind, resumed = tracing::field::Empty);
        let (locker, now) = (self.inner.locker.clone(), self.now());
        let (kind_owned, name_owned) = (kind.to_owned(), name.to_owned());
        let found = self
            .inner
            .writer
            .write(move |conn| {
                // This open holds the claim, so a lock of this instance on `id` is a leak.
                let ours = OwnLocks::Reclaim;
                open_in_transaction(
                    conn,
                    &locker,
                    ours,
                    id,
                    &kind_owned,
                    &name_owned,
                    &input,
                    &now,
                )
            })
            .await?;
        fail::fail_point!("journal::after-lock-commit", |_| std::process::abort());
        let outcome = match found {
            OpenFound::Finished(finished) => return Ok(Opened::Finished(finished)),
            OpenFound::Opened(outcome) => outcome,
        };
        span.record("resumed", outcome.is_resume);
        let replay = match self.load_replay(id) {
            Ok(replay) => replay,
            Err(error) => {
                self.release_detached(id, outcome.epoch);
                return Err(error);
            }
        };
        tracing::debug!(parent: &span, steps = replay.len(), "opened");
        Ok(Opened::Running(Execution::new(
            self.clone(),
            id,
            outcome.epoch,
            outcome.is_resume,
            outcome.input,
            replay,
            claim,
        )))
    }

    /// `Locked` for an execution that a live handle of this journal drives.
    fn locked_here(&self, id: Uuid) -> Error {
        let since = self
            .read(|conn| Ok(durably_lock::read(conn, &id.to_string())?))
            .ok()
            .flatten()
            .and_then(|row| row.holder)
            .map_or_else(|| "moments ago".to_owned(), |holder| holder.acquired_at);
        Error::Locked {
            execution_id: id.to_string(),
            pid: self.inner.locker.identity().pid,
            since,
        }
    }

    fn load_replay(&self, id: Uuid) -> Result<Replay> {
        let cap = self.payload_bytes_max();
        self.read(|conn| Replay::load(conn, &id.to_string(), cap))
    }

    pub(crate) fn release_detached(&self, id: Uuid, epoch: u64) {
        let locker = self.inner.locker.clone();
        let resource = id.to_string();
        self.inner.writer.write_detached(move |conn| {
            release_if_held(conn, &locker, &resource, epoch);
            Ok(())
        });
    }

    /// The executions a program should resume at start: interrupted ones, and running ones
    /// whose lock is free or whose holder is dead. Oldest first.
    ///
    /// # Errors
    /// A storage error.
    pub fn recoverable(&self) -> Result<Vec<ExecutionRecord>> {
        let candidates = self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions
                 WHERE status IN ('running', 'interrupted') ORDER BY created_at"
            ))?;
            let rows = statement.query_map([], ExecutionRecord::from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })?;
        let mut recoverable = Vec::with_capacity(candidates.len());
        for record in candidates {
            let lock = self.read(|conn| Ok(durably_lock::read(conn, &record.execution_id)?))?;
            let free = match lock.and_then(|row| row.holder) {
                None => true,
                Some(holder) => self.inner.locker.judge().judge(&holder).is_dead(),
            };
            if free {
                recoverable.push(record);
            }
        }
        Ok(recoverable)
    }

    /// One execution's row.
    ///
    /// # Errors
    /// A storage error.
    pub fn get(&self, id: Uuid) -> Result<Option<ExecutionRecord>> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE execution_id = ?1"
            ))?;
            Ok(statement
                .query_row(params![id.to_string()], ExecutionRecord::from_row)
                .optional()?)
        })
    }

    /// Executions, newest first, filtered.
    ///
    /// # Errors
    /// A storage error.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionRecord>> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions
                 WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR kind = ?2)
                   AND (?3 IS NULL OR instr(name, ?3) > 0) AND (?4 IS NULL OR created_at >= ?4)
                 ORDER BY created_at DESC, execution_id LIMIT ?5"
            ))?;
            let rows = statement.query_map(
                params![
                    filter.status.map(Status::as_str),
                    filter.kind,
                    filter.name_contains,
                    filter.created_since,
                    filter.limit.unwrap_or(100),
                ],
                ExecutionRecord::from_row,
            )?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// One execution's steps, in order.
    ///
    /// # Errors
    /// A storage error.
    pub fn steps(&self, id: Uuid) -> Result<Vec<StepRecord>> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {STEP_COLUMNS} FROM steps WHERE execution_id = ?1 ORDER BY seq"
            ))?;
            let rows = statement.query_map(params![id.to_string()], StepRecord::from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// One execution's audit events, in order.
    ///
    /// # Errors
    /// A storage error.
    pub fn events(&self, id: Uuid) -> Result<Vec<EventRecord>> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE execution_id = ?1 ORDER BY id"
            ))?;
            let rows = statement.query_map(params![id.to_string()], EventRecord::from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Cancels an execution that no live process holds. A cancelled execution never reopens.
    ///
    /// # Errors
    /// [`Error::Locked`] while a live process holds it, [`Error::NotFound`],
    /// [`Error::Refused`] when it has already finished.
    pub async fn cancel(&self, id: Uuid, reason: &str) -> Result<()> {
        let (locker, now, reason) = (self.inner.locker.clone(), self.now(), reason.to_owned());
        let handles = Arc::clone(&self.inner.handles);
        self.inner
            .writer
            .write(move |conn| {
                with_operator_lock(conn, &locker, &handles, id, &now, |resource| {
                    let status = status_of(conn, resource)?;
                    if status.is_final() {
                        return Err(Error::Refused(format!(
                            "execution {resource} is already {status}; only running or \
                             interrupted executions can be cancelled"
                        )));
                    }
                    let error = json!({ "cancelled": reason }).to_string();
                    conn.prepare_cached(
                        "UPDATE executions SET status = 'cancelled', error = ?2, updated_at = ?3,
                                               finalized_at = ?3
                         WHERE execution_id = ?1",
                    )?
                    .execute(params![resource, error, now])?;
                    events::record(
                        conn,
                        &now,
                        Some(resource),
                        None,
                        event_kind::CANCELLED,
                        &json!({ "was": status.as_str() }),
                    )
                })
            })
            .await
    }

    /// Records an operator's answer for step `seq`, stuck in the ambiguous window.
    ///
    /// # Errors
    /// [`Error::Locked`] while a live process holds the execution, [`Error::Refused`] when the
    /// step is not ambiguous, [`Error::NotFound`], [`Error::PayloadTooLarge`].
    pub async fn resolve(&self, id: Uuid, seq: u32, resolution: Resolution) -> Result<()> {
        self.resolve_expecting(id, seq, None, resolution).await
    }

    /// Which intent step `seq` is now, if it is in the ambiguous window: take it before checking
    /// the outside world, and pass it to [`Journal::resolve_seen`] with the answer, so the answer
    /// applies only to the intent that was checked. `None` when the step is not ambiguous.
    ///
    /// Refused while a live process holds the execution: it may be running that very attempt,
    /// so the outside world can still change without the step changing, and a check made now
    /// could miss an effect that happens next.
    ///
    /// # Errors
    /// [`Error::Locked`] while a live process holds the execution; a storage error.
    pub fn seen_intent(&self, id: Uuid, seq: u32) -> Result<Option<SeenIntent>> {
        let resource = id.to_string();
        let (seen, lock) = self.read(|conn| {
            Ok((
                seen_intent::current(conn, &resource, seq)?,
                durably_lock::read(conn, &resource)?,
            ))
        })?;
        let holder = lock.and_then(|lock| lock.holder);
        if let (Some(_), Some(holder)) = (seen, holder) {
            let locker = &self.inner.locker;
            // As for an operator action: a lock of this instance with no open handle is a leak,
            // and nobody is running the step under it.
            let leaked = holder.instance_id == locker.instance_id().to_string()
                && !self.inner.handles.contains(id);
            if !leaked && !locker.judge().judge(&holder).is_dead() {
                return Err(Error::Locked {
                    execution_id: resource,
                    pid: holder.pid,
                    since: holder.acquired_at,
                });
            }
        }
        Ok(seen)
    }

    /// As [`Journal::resolve`], but refused when the step changed since `seen` was taken: it was
    /// run again (by a process, or after another operator's answer), so the outside world that
    /// was checked may no longer describe this intent.
    ///
    /// # Errors
    /// As [`Journal::resolve`]; [`Error::Refused`] when the step changed.
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
                self.payload_bytes_max(),
            )?),
            Resolution::NotDone => None,
        };
        let (locker, now) = (self.inner.locker.clone(), self.now());
        let handles = Arc::clone(&self.inner.handles);
        self.inner
            .writer
            .write(move |conn| {
                with_operator_lock(conn, &locker, &handles, id, &now, |resource| {
                    if let Some(seen) = seen {
                        match seen_intent::current(conn, resource, seq)? {
                            Some(current) if current == seen => {}
                            Some(current) => {
                                return Err(Error::Refused(format!(
                                    "step {seq} of execution {resource} changed since it was \
                                     looked at (then {seen}, now {current}): it ran again, or \
                                     another operator answered, so what was checked may not \
                                     describe it any more; look at it again with \
                                     `durably show {resource}`"
                                )));
                            }
                            None => {
                                return Err(Error::Refused(format!(
                                    "step {seq} of execution {resource} is no longer in the \
                                     ambiguous window: since it was looked at ({seen}) it was \
                                     answered, or it ran to a result; look at it again with \
                                     `durably show {resource}`"
                                )));
                            }
                        }
                    }
                    resolve_step(conn, resource, seq, value.as_deref(), &now)
                })
            })
            .await
    }
}

fn resolve_step(
    conn: &Connection,
    resource: &str,
    seq: u32,
    value: Option<&str>,
    now: &str,
) -> Result<()> {
    let state: Option<String> = conn
        .prepare_cached("SELECT state FROM steps WHERE execution_id = ?1 AND seq = ?2")?
        .query_row(params![resource, seq], |row| row.get(0))
        .optional()?;
    match state.as_deref() {
        Some("intent") => {}
        Some(other) => {
            return Err(Error::Refused(format!(
                "step {seq} of execution {resource} is not ambiguous: it is {other}; only a step \
                 with an intent and no result can be resolved"
            )));
        }
        None => {
            return Err(Error::Refused(format!(
                "execution {resource} has no step {seq}; `durably show {resource}` lists its steps"
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

/// Runs an operator action on an execution while holding its lock for the length of the
/// transaction, so no live process can be driving it meanwhile.
fn with_operator_lock(
    conn: &Connection,
    locker: &Locker,
    handles: &OpenHandles,
    id: Uuid,
    now: &str,
    action: impl FnOnce(&str) -> Result<()>,
) -> Result<()> {
    let resource = id.to_string();
    status_of(conn, &resource)?;
    // Decided inside the transaction: an open of this journal claims its id before its request
    // is queued, so it is either seen here or ordered after this action.
    let ours = if handles.contains(id) {
        OwnLocks::Respect
    } else {
        OwnLocks::Reclaim
    };
    let epoch = acquire_or_locked(conn, locker, ours, &resource, now)?;
    action(&resource)?;
    locker.release(conn, &resource, epoch)?;
    Ok(())
}

fn status_of(conn: &Connection, resource: &str) -> Result<Status> {
    let word: Option<String> = conn
        .prepare_cached("SELECT status FROM executions WHERE execution_id = ?1")?
        .query_row(params![resource], |row| row.get(0))
        .optional()?;
    let word = word.ok_or_else(|| Error::NotFound(resource.to_owned()))?;
    Status::parse(&word).ok_or_else(|| {
        Error::Refused(format!(
            "execution {resource} has an unknown status {word:?}"
        ))
    })
}

/// Takes the lock or reports its live holder; a takeover from a dead holder is audited.
/// What to do with a lock that this journal's own instance holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnLocks {
    /// A live handle of this journal may hold it: refuse like any other holder.
    Respect,
    /// No live handle of this journal holds it, so it is a leak: take it back.
    Reclaim,
}

/// Takes the lock or reports its live holder. A takeover from a dead holder, or of a lock this
/// instance leaked, is audited.
fn acquire_or_locked(
    conn: &Connection,
    locker: &Locker,
    ours: OwnLocks,
    resource: &str,
    now: &str,
) -> Result<u64> {
    let (epoch, from_pid, from_epoch, reason) = match locker.try_acquire(conn, resource)? {
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
            let Some(new_epoch) = locker.take_over(conn, resource, epoch)? else {
                return Err(Error::Locked {
                    execution_id: resource.to_owned(),
                    pid: holder.pid,
                    since: holder.acquired_at,
                });
            };
            let reason = "this process leaked it: its handle went away before the release \
                          committed";
            (new_epoch, holder.pid, epoch, reason.to_owned())
        }
        Acquire::Held { holder, .. } => {
            return Err(Error::Locked {
                execution_id: resource.to_owned(),
                pid: holder.pid,
                since: holder.acquired_at,
            });
        }
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
        is_execution.then_some(resource),
        None,
        event_kind::TAKEOVER,
        &detail,
    )?;
    Ok(epoch)
}

#[allow(clippy::too_many_arguments)] // One transaction's inputs; a struct would only rename them.
fn open_in_transaction(
    conn: &Connection,
    locker: &Locker,
    ours: OwnLocks,
    id: Uuid,
    kind: &str,
    name: &str,
    input: &str,
    now: &str,
) -> Result<OpenFound> {
    let resource = id.to_string();
    let existing: Option<(String, String, Option<String>, Option<String>)> = conn
        .prepare_cached(
            "SELECT status, input, output, error FROM executions WHERE execution_id = ?1",
        )?
        .query_row(params![resource], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    if let Some((status, _, output, error)) = &existing {
        match Status::parse(status) {
            Some(status @ (Status::Completed | Status::Failed)) => {
                return Ok(OpenFound::Finished(Finished {
                    execution_id: id,
                    status,
                    output: output.clone(),
                    error: error.clone(),
                }));
            }
            Some(Status::Cancelled) => return Err(Error::Cancelled(resource)),
            _ => {}
        }
    }
    let epoch = acquire_or_locked(conn, locker, ours, &resource, now)?;
    if let Some((_, recorded_input, _, _)) = existing {
        conn.prepare_cached(
            "UPDATE executions SET status = 'running', opens = opens + 1, updated_at = ?2
             WHERE execution_id = ?1",
        )?
        .execute(params![resource, now])?;
        return Ok(OpenFound::Opened(OpenOutcome {
            epoch,
            is_resume: true,
            input: recorded_input,
        }));
    }
    conn.prepare_cached(
        "INSERT INTO executions (execution_id, kind, name, status, input, opens, created_at,
                                 updated_at)
         VALUES (?1, ?2, ?3, 'running', ?4, 1, ?5, ?5)",
    )?
    .execute(params![resource, kind, name, input, now])?;
    Ok(OpenFound::Opened(OpenOutcome {
        epoch,
        is_resume: false,
        input: input.to_owned(),
    }))
}

/// Releases a lock if this instance still holds it; a lock already lost needs no release.
pub(crate) fn release_if_held(conn: &Connection, locker: &Locker, resource: &str, epoch: u64) {
    if let Err(error) = locker.release(conn, resource, epoch) {
        tracing::debug!(execution_id = resource, %error, "lock already gone at release");
    }
}
