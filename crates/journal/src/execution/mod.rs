//! [`Execution`]: the handle that drives one open execution.
//!
//! The handle's files, one job each:
//! - this file: the handle, its public step methods and its end (complete, fail, drop);
//! - `hooks`: steps whose rows commit with the caller's own ([`Execution::step_with`]);
//! - `deferred`: write-behind and the deferred open (what a write carries, and when);
//! - `release`: the end that parks the execution instead ([`Execution::release_to`]);
//! - `protocol`: the step protocol (replay, the ambiguity policies, retries);
//! - `step_rows`: the SQL of step rows;
//! - `fence`: the writer, lock and epoch the handle writes with.

mod deferred;
mod fence;
mod hooks;
mod peek;
mod protocol;
mod release;
mod step_rows;

use std::future::Future;
use std::sync::Arc;

use rusqlite::Connection;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

pub use deferred::{DEFERRED_BYTES_MAX, DEFERRED_STEPS_MAX};
pub(crate) use deferred::{DeferredOpen, OpenHook};
pub(crate) use fence::Fence;
use hooks::{Hook, IntentHook};
pub use hooks::{StepRef, Timing};
use protocol::StepOutcome;
pub use release::{Release, STATUS_DETAIL_BYTES_MAX};
pub(crate) use step_rows::first_open_intent;

use crate::config::StepSettings;
use crate::error::{Error, Result};
use crate::handles::HandleClaim;
use crate::payload;
use crate::replay::Replay;
use crate::states::Status;
use crate::step::{Effect, FencingToken, Guarded, Policy, StepKey};

/// The handle that drives one open execution. Steps are numbered in call order; on a resumed
/// execution, steps already recorded return their recorded outcome without calling the closure.
///
/// Dropping it without [`Execution::complete`] or [`Execution::fail`] releases the lock and
/// leaves the execution `running`, to be resumed.
#[derive(Debug)]
pub struct Execution {
    // Shared with the lease heartbeat task and with the finalize transaction's release.
    fence: Arc<Fence>,
    settings: StepSettings,
    id: Uuid,
    is_resume: bool,
    input: String,
    // Boxed: the replay window's state is a third of the handle, which callers move around.
    replay: Box<Replay>,
    next_seq: u32,
    halted_at: Option<u32>,
    /// Write-behind ([`Execution::defer_results`]): results wait in the fence's carry.
    deferring: bool,
    /// Set by [`Execution::release_to`]: the status the execution was parked in. The handle
    /// then writes nothing more.
    released_to: Option<Status>,
    finalized: bool,
    // Keeps a lease alive while the handle lives; aborted on drop.
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    // Declared last so it is released after `Drop::drop` has queued the lock release.
    _claim: HandleClaim,
}

/// What [`Execution::new`] is built from: the open's outcome.
pub(crate) struct Opening {
    pub(crate) fence: Arc<Fence>,
    pub(crate) settings: StepSettings,
    pub(crate) id: Uuid,
    pub(crate) is_resume: bool,
    pub(crate) input: String,
    pub(crate) replay: Replay,
    pub(crate) claim: HandleClaim,
}

impl Execution {
    pub(crate) fn new(opening: Opening) -> Self {
        let heartbeat = spawn_heartbeat(&opening.fence, opening.settings.lease_ms);
        Self {
            fence: opening.fence,
            settings: opening.settings,
            id: opening.id,
            is_resume: opening.is_resume,
            input: opening.input,
            replay: Box::new(opening.replay),
            next_seq: 0,
            halted_at: None,
            deferring: false,
            released_to: None,
            finalized: false,
            heartbeat,
            _claim: opening.claim,
        }
    }

    /// The execution id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Whether this open resumed an execution that had been opened before.
    pub fn is_resume(&self) -> bool {
        self.is_resume
    }

    /// The fencing token of this handle's lock; each step closure also gets it in its
    /// [`StepKey`]. `FencingToken(0)` until the first write of a handle from
    /// [`crate::Journal::begin_execution`] has taken the lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.fence.token()
    }

    /// The journal the execution is in.
    pub(crate) fn journal(&self) -> &crate::journal::Journal {
        self.fence.journal()
    }

    /// The sequence number the next step will get.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// How many steps were recorded when this handle opened the execution (0 for a new one):
    /// steps `0..recorded_steps()` replay their recorded outcome instead of running.
    pub fn recorded_steps(&self) -> u32 {
        self.replay.recorded()
    }

    /// The execution's input, as recorded when it was first opened.
    ///
    /// # Errors
    /// [`Error::Json`] when it does not decode as `T`.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T> {
        payload::decode(
            &self.input,
            "the execution input",
            self.settings.payload_bytes_max,
        )
    }

    /// Runs a pure step (a computation or a read). Its result is journaled in one commit; a
    /// crash inside it runs it again.
    ///
    /// # Errors
    /// [`Error::StepFailed`] when the closure failed (now or on an earlier run),
    /// [`Error::NonDeterminism`], [`Error::LockLost`], [`Error::PayloadTooLarge`], or a storage
    /// error.
    pub async fn pure<T, F, Fut>(&mut self, name: &str, mut f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let outcome = self.step(name, Effect::Pure, None, None, |_| f()).await?;
        self.never_skipped(outcome)
    }

    /// Runs an idempotent step, handing the closure its [`StepKey`]. Its result is journaled
    /// in one commit; a crash inside it runs it again with the same idempotency key.
    ///
    /// # Errors
    /// As [`Execution::pure`].
    pub async fn idempotent<T, F, Fut>(&mut self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let outcome = self.step(name, Effect::Idempotent, None, None, f).await?;
        self.never_skipped(outcome)
    }

    /// Runs a guarded step: its intent is committed before the closure runs and its result after.
    /// If a crash left the intent without a result, `policy` decides (see [`Policy`]).
    ///
    /// # Errors
    /// As [`Execution::pure`], plus [`Error::Ambiguous`] under [`Policy::Fail`] and
    /// [`Error::ProbeFailed`] under [`Policy::Reconcile`].
    pub async fn guarded<T, F, Fut>(
        &mut self,
        name: &str,
        policy: Policy,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        self.step(name, Effect::Guarded, Some(&policy), None, f)
            .await
    }

    /// As [`Execution::guarded`], and runs `with_intent` in the transaction that records the
    /// step's intent: the program's own rows (a scheduler marking its fire running) commit
    /// together with the intent, or not at all, and cost no commit of their own.
    ///
    /// `with_intent` runs only if this call records an intent. A step replayed from an earlier
    /// run (completed, failed, or found ambiguous) records none, and `with_intent` is dropped
    /// without running: what it wrote committed with that step's intent, on the earlier run.
    ///
    /// # Errors
    /// As [`Execution::guarded`], or `with_intent`'s own error, in which case neither the
    /// intent nor anything of `with_intent` was written and the closure did not run; the
    /// handle is then halted at this step, as after any failed intent write.
    pub async fn guarded_with<T, F, Fut, W>(
        &mut self,
        name: &str,
        policy: Policy,
        with_intent: W,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
        W: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let with_intent: IntentHook = Box::new(with_intent);
        let hook = Hook::Intent(with_intent);
        self.step(name, Effect::Guarded, Some(&policy), Some(hook), f)
            .await
    }

    fn never_skipped<T>(&self, outcome: Guarded<T>) -> Result<T> {
        match outcome {
            Guarded::Done(value) => Ok(value),
            Guarded::Skipped(skipped) => Err(Error::Inconsistent(format!(
                "step {} of execution {} is recorded as skipped but is not guarded",
                skipped.seq, self.id
            ))),
        }
    }

    /// Refreshes this handle's lease heartbeat (for journals opened with a lease).
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock was taken over.
    pub async fn heartbeat(&self) -> Result<()> {
        self.fence.heartbeat().await
    }

    /// Finalizes the execution as completed with `output`, and releases its lock, in one
    /// transaction.
    ///
    /// # Errors
    /// [`Error::LockLost`], [`Error::PayloadTooLarge`], [`Error::Halted`] after a step error
    /// that stops the execution, [`Error::Refused`] while a step is in the ambiguous window,
    /// or a storage error.
    pub async fn complete(self, output: &impl Serialize) -> Result<()> {
        self.complete_with(output, |_| Ok(())).await
    }

    /// As [`Execution::complete`], and runs `also` in the same transaction: the program's own
    /// rows in the journal's database (a scheduler's ledger, an outbox) commit together with
    /// the execution's end, or not at all.
    ///
    /// # Errors
    /// As [`Execution::complete`], or `also`'s own error, in which case nothing was written and
    /// the execution is still running (reopen it to finish it).
    pub async fn complete_with<F>(self, output: &impl Serialize, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        self.complete_returning(output, also).await
    }

    /// [`Execution::complete_with`], handing back what `also` returned once the end committed.
    pub(crate) async fn complete_returning<T, F>(
        self,
        output: &impl Serialize,
        also: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let output = payload::encode(
            output,
            "the execution output",
            self.settings.payload_bytes_max,
        )?;
        self.refuse_if_released()?;
        // After an ambiguous step, a lost lock or non-determinism the journal is in doubt:
        // completing would bury the doubt under a final status. `fail` stays allowed. A lost
        // lock is the more useful answer when it is the reason, so the fence is asked first.
        if let Some(seq) = self.halted_at {
            self.fence.check().await?;
            return Err(Error::Halted {
                execution_id: self.id,
                seq,
            });
        }
        self.finalize(Status::Completed, output, also).await
    }

    /// Finalizes the execution as failed with `error`, and releases its lock, in one transaction.
    /// Failing is allowed after a step error that stops the execution, and while a cancel
    /// request is pending.
    ///
    /// # Errors
    /// As [`Execution::complete`], apart from the refusals: failing is always allowed.
    pub async fn fail(self, error: &impl Serialize) -> Result<()> {
        self.fail_with(error, |_| Ok(())).await
    }

    /// As [`Execution::fail`], and runs `also` in the same transaction (see
    /// [`Execution::complete_with`]).
    ///
    /// # Errors
    /// As [`Execution::complete_with`].
    pub async fn fail_with<F>(self, error: &impl Serialize, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        self.fail_returning(error, also).await
    }

    /// [`Execution::fail_with`], handing back what `also` returned once the end committed.
    pub(crate) async fn fail_returning<T, F>(self, error: &impl Serialize, also: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let error = payload::encode(
            error,
            "the execution error",
            self.settings.payload_bytes_max,
        )?;
        self.finalize(Status::Failed, error, also).await
    }

    /// Finalizes the execution as cancelled, with error `{"cancelled": reason}`, a `cancelled`
    /// event and the lock's release, in one transaction with `also`: what a holder does when a
    /// step was refused [`Error::CancelRequested`], or when it decides to stop on its own (a
    /// deadline). Allowed while a request is pending and after a step error that stops the
    /// execution. A step left in the ambiguous window stays there, for an operator.
    ///
    /// # Errors
    /// [`Error::LockLost`], [`Error::PayloadTooLarge`] for a reason over
    /// [`crate::lifecycle::CANCEL_REASON_BYTES_MAX`], `also`'s own error (nothing is written
    /// then), or a storage error.
    pub async fn finish_cancelled<F>(mut self, reason: &str, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        self.refuse_if_released()?;
        let (id, reason) = (self.id, reason.to_owned());
        let release = Arc::clone(&self.fence);
        self.fence
            .write_admitted(move |conn, _, now| {
                crate::lifecycle::cancel_row(conn, id, Status::Running, now, &reason)?;
                also(conn)?;
                release.release_in(conn)
            })
            .await?;
        self.finalized = true;
        tracing::info!(execution_id = %self.id, status = "cancelled", "finalized");
        Ok(())
    }

    async fn finalize<T, F>(mut self, status: Status, payload: String, also: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.refuse_if_released()?;
        let (id, next_seq) = (self.id, self.next_seq);
        let release = Arc::clone(&self.fence);
        let write = move |conn: &Connection, resource: &str, now: &str| {
            if status == Status::Completed
                && let Some(seq) = step_rows::first_open_intent(conn, resource, next_seq)?
            {
                return Err(Error::Refused(format!(
                    "execution {id} cannot complete while step {seq} is in the ambiguous \
                     window; resolve it first, or finalize the execution as failed"
                )));
            }
            step_rows::finalize_row(conn, resource, status, &payload, now)?;
            let also = also(conn)?;
            release.release_in(conn)?;
            Ok(also)
        };
        // Completing loses to a committed cancel request; failing does not.
        let also = if status == Status::Completed {
            self.fence.write(write).await?
        } else {
            self.fence.write_admitted(write).await?
        };
        self.finalized = true;
        tracing::info!(execution_id = %self.id, status = status.as_str(), "finalized");
        Ok(also)
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        if let Some(heartbeat) = &self.heartbeat {
            heartbeat.abort();
        }
        if !self.finalized {
            self.fence.release_detached();
        }
    }
}

/// Keeps the lease of a journal opened with one alive while the handle lives, at a third of
/// the lease. A process that is frozen (SIGSTOP) or hung stops heartbeating and loses the lease,
/// which is the point of one. Ends when the lock is lost; aborted when the handle drops.
fn spawn_heartbeat(
    fence: &Arc<Fence>,
    lease_ms: Option<u64>,
) -> Option<tokio::task::JoinHandle<()>> {
    let lease_ms = lease_ms?;
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let fence = Arc::clone(fence);
    let period = std::time::Duration::from_millis((lease_ms / 3).max(1));
    Some(runtime.spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            if let Err(Error::LockLost(_)) = fence.heartbeat().await {
                break;
            }
        }
    }))
}
