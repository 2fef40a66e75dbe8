//! Starting fires: each fire's ledger row and its execution's start, committed in one writer
//! transaction.
//!
//! Invariant: a fire's execution is started only in the transaction that records its row, and
//! only when that transaction finds no row for the fire (or an old `pending` one). The row's
//! primary key (job, slot) and the fixed fire id make every later attempt, in any process, find
//! the row and start nothing; the runtime's start, idempotent by id, would not start a second
//! execution either. A start the runtime refuses (an unknown kind or queue) rolls the whole
//! transaction back, so no row claims a fire that has no execution.

use std::sync::{Arc, Mutex, PoisonError};

use durably_db::Connection;
use durably_journal::{Error as JournalError, Result as JournalResult};
use durably_runtime::{PreparedStart, StartOptions};

use crate::error::{Error, Result};
use crate::fire_id::Fire;
use crate::job::Job;
use crate::ledger::{self, Found};
use crate::outcome::FireOutcome;
use crate::scheduler::Scheduler;

/// A fire ready to be decided in a writer transaction: its start is checked and encoded.
pub(crate) struct ReadyFire {
    pub(crate) fire: Fire,
    pub(crate) start: PreparedStart,
}

/// Where a transaction leaves the runtime's refusal of a start, which it rolls back with
/// [`JournalError::Aborted`].
#[derive(Clone, Default)]
pub(crate) struct Refusal(Arc<Mutex<Option<durably_runtime::Error>>>);

impl Refusal {
    /// Records `error` and returns the error that rolls the transaction back.
    fn abort(&self, error: durably_runtime::Error) -> JournalError {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
        JournalError::Aborted("the runtime refused a fire's start")
    }

    /// The refusal, if the transaction was rolled back for one; otherwise `error` as it is.
    pub(crate) fn explain(&self, error: JournalError) -> Error {
        match self.0.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(refused) => Error::Start(refused),
            None => error.into(),
        }
    }
}

/// Decides one fire inside the caller's transaction: starts it and records it `running`, or
/// records it skipped for `skip` (nothing is started), unless the ledger already holds it.
pub(crate) fn decide_in(
    conn: &Connection,
    ready: &ReadyFire,
    skip: Option<&str>,
    now: &str,
    refusal: &Refusal,
) -> JournalResult<FireOutcome> {
    let fire = &ready.fire;
    let execution_id = fire.execution_id();
    let found = ledger::find_fire(conn, fire)?;
    if let Found::Existing(state) = found {
        return Ok(FireOutcome::Existing {
            execution_id,
            state,
        });
    }
    // The fire is registered first, and its execution started only if this transaction
    // registered it: another scheduler (on PostgreSQL, another host) may have registered the
    // slot since `find_fire`. A refusal of the start rolls the registration back with the
    // rest of the transaction.
    if !ledger::insert_fire(conn, fire, &found, skip, now)? {
        return registered_elsewhere(conn, fire);
    }
    if let Some(reason) = skip {
        return Ok(FireOutcome::Skipped {
            execution_id,
            reason: reason.to_owned(),
        });
    }
    if let Err(refused) = ready.start.start_in(conn)? {
        return Err(refusal.abort(refused));
    }
    Ok(FireOutcome::Started { execution_id })
}

/// The outcome of a fire another scheduler registered between this one's look and its
/// insert: the fire as that one left it.
fn registered_elsewhere(conn: &Connection, fire: &Fire) -> JournalResult<FireOutcome> {
    match ledger::find_fire(conn, fire)? {
        Found::Existing(state) => Ok(FireOutcome::Existing {
            execution_id: fire.execution_id(),
            state,
        }),
        Found::None | Found::Pending => Err(JournalError::Inconsistent(format!(
            "the fire of job {:?} at slot {} was neither registered nor found registered",
            fire.job.as_str(),
            fire.slot.as_millis()
        ))),
    }
}

impl Scheduler {
    /// Checks and encodes the start of `job`'s fire at `slot`: an execution of the job's
    /// workflow with id `fire_id(job, slot)`, named after the job, with the [`Fire`] as input.
    pub(crate) fn ready(&self, job: &Job, fire: Fire) -> Result<ReadyFire> {
        let mut options = StartOptions::default().name(job.id.as_str());
        if let Some(queue) = &job.queue {
            options = options.queue(queue);
        }
        let start =
            self.inner
                .client
                .prepare_start(&job.workflow, fire.execution_id(), &fire, options)?;
        Ok(ReadyFire { fire, start })
    }
}
