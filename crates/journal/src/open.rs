//! Opening an execution: its lock and its row in one transaction, then its recorded steps.

use std::sync::Arc;

use durably_db::{Connection, params};
use durably_lock::Locker;
use serde::Serialize;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::execution::{Execution, Fence, Opening};
use crate::handles::HandleClaim;
use crate::journal::Journal;
use crate::ownership::{OwnLocks, acquire_or_locked};
use crate::payload::{self, Payload, PayloadColumn};
use crate::replay::Replay;
use crate::states::Status;
use crate::writer::Undo;

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
    /// The output, when completed.
    pub output: Option<Payload>,
    /// The error, when failed.
    pub error: Option<Payload>,
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

/// The row of an execution that exists, as an open needs it.
struct ExistingRow {
    status: Status,
    input: Payload,
    output: Option<Payload>,
    error: Option<Payload>,
    /// The step an `awaiting_operator` execution waits on (`status_detail.seq`).
    awaited_seq: Option<u32>,
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
    /// cancelled, [`Error::AwaitingOperator`] while a step waits for an operator,
    /// [`Error::NotRunnable`] when it is queued, waiting or stuck (neither writes anything),
    /// [`Error::PayloadTooLarge`] for an oversized input, or a storage error.
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
        let span = crate::telemetry::execution_span(id, kind);
        let (locker, now) = (Arc::clone(&self.inner.locker), self.now());
        let (kind, name) = (kind.to_owned(), name.to_owned());
        let bytes_max = self.payload_bytes_max();
        let found = self
            .inner
            .writer
            .write_for(id, Undo::Savepoint, move |conn| {
                // This open holds the claim, so a lock of this instance on `id` is a leak.
                let row = NewRow {
                    id,
                    kind: &kind,
                    name: &name,
                    input: &input,
                };
                open_in_transaction(conn, &locker, &row, bytes_max, &now)
            })
            .await?;
        fail::fail_point!("journal::after-lock-commit", |_| std::process::abort());
        let outcome = match found {
            OpenFound::Finished(finished) => return Ok(Opened::Finished(finished)),
            OpenFound::Opened(outcome) => outcome,
        };
        let fence = Arc::new(Fence::new(self, id, outcome.epoch));
        let replay = match Replay::open(self, id) {
            Ok(replay) => replay,
            Err(error) => {
                fence.release_detached();
                return Err(error);
            }
        };
        tracing::debug!(parent: &span, "opened");
        Ok(Opened::Running(Execution::new(Opening {
            fence,
            settings: self.inner.settings,
            id,
            is_resume: outcome.is_resume,
            input: outcome.input,
            replay,
            claim,
            span,
        })))
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
            execution_id: id,
            pid: self.inner.locker.identity().pid,
            since,
            in_this_process: true,
        }
    }
}

/// The row an open creates when the execution is new.
pub(crate) struct NewRow<'a> {
    pub(crate) id: Uuid,
    pub(crate) kind: &'a str,
    pub(crate) name: &'a str,
    pub(crate) input: &'a str,
}

/// Inserts `row` as a `running` execution opened once; `false`, with nothing written, when an
/// execution with its id exists.
pub(crate) fn insert_running(conn: &Connection, row: &NewRow<'_>, now: &str) -> Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO executions (execution_id, kind, name, status, input, opens, created_at,
                                     updated_at)
             VALUES (?1, ?2, ?3, 'running', ?4, 1, ?5, ?5)
             ON CONFLICT (execution_id) DO NOTHING",
        )?
        .execute(params![
            row.id.to_string(),
            row.kind,
            row.name,
            row.input,
            now
        ])?;
    Ok(inserted == 1)
}

fn open_in_transaction(
    conn: &Connection,
    locker: &Locker,
    row: &NewRow<'_>,
    bytes_max: usize,
    now: &str,
) -> Result<OpenFound> {
    let resource = row.id.to_string();
    // Locked before it is read, so the status judged below is the one the takeover acts on.
    crate::ownership::lock_execution_row(conn, &resource)?;
    let existing = read_existing(conn, row.id, bytes_max)?;
    if let Some(existing) = &existing {
        match existing.status {
            Status::Completed | Status::Failed => {
                return Ok(OpenFound::Finished(Finished {
                    execution_id: row.id,
                    status: existing.status,
                    output: existing.output.clone(),
                    error: existing.error.clone(),
                }));
            }
            Status::Cancelled => return Err(Error::Cancelled(row.id)),
            // Refused before the lock is touched: reopening a parked execution would take the
            // lock and bump its epoch for nothing, and for one awaiting an operator it would
            // race the operator's own lock.
            Status::AwaitingOperator => {
                return Err(Error::AwaitingOperator {
                    execution_id: row.id,
                    seq: existing.awaited_seq.ok_or_else(|| {
                        Error::Inconsistent(format!(
                            "execution {} awaits an operator but its status_detail names no step",
                            row.id
                        ))
                    })?,
                });
            }
            status @ (Status::Queued | Status::Waiting | Status::Stuck) => {
                return Err(Error::NotRunnable {
                    execution_id: row.id,
                    status,
                });
            }
            Status::Running | Status::Interrupted => {}
        }
    }
    let epoch = acquire_or_locked(conn, locker, OwnLocks::Reclaim, row.id, now)?;
    if let Some(existing) = existing {
        conn.prepare_cached(
            "UPDATE executions SET status = 'running', opens = opens + 1, updated_at = ?2
             WHERE execution_id = ?1",
        )?
        .execute(params![resource, now])?;
        return Ok(OpenFound::Opened(OpenOutcome {
            epoch,
            is_resume: true,
            input: existing.input.into_json(),
        }));
    }
    if !insert_running(conn, row, now)? {
        return Err(Error::Inconsistent(format!(
            "execution {resource} appeared inside the transaction that found it absent"
        )));
    }
    Ok(OpenFound::Opened(OpenOutcome {
        epoch,
        is_resume: false,
        input: row.input.to_owned(),
    }))
}

/// Reads execution `id`'s status and payloads, each refused over `bytes_max` before it is read.
fn read_existing(conn: &Connection, id: Uuid, bytes_max: usize) -> Result<Option<ExistingRow>> {
    let sql = format!(
        "SELECT status, {}, {}, {}, CAST(status_detail ->> 'seq' AS INTEGER)
         FROM executions WHERE execution_id = ?1",
        Payload::select("input", bytes_max, conn.dialect()),
        Payload::select("output", bytes_max, conn.dialect()),
        Payload::select("error", bytes_max, conn.dialect()),
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let mut rows = statement.query(params![id.to_string()])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let row = &row;
    let payload = |index, column: &'static str| {
        Payload::read(row, index, bytes_max, || {
            format!("the stored {column} of execution {id}")
        })
    };
    Ok(Some(ExistingRow {
        status: crate::records::word(row, 0)?,
        input: payload(1, "input")?
            .ok_or_else(|| Error::Inconsistent(format!("execution {id} has no input")))?,
        output: payload(3, "output")?,
        error: payload(5, "error")?,
        awaited_seq: row.get(7)?,
    }))
}
