//! [`Execution`]: the handle that drives one open execution.
//!
//! The handle's files, one job each:
//! - this file: the handle, its public step methods and its end (complete, fail, drop);
//! - `hooks`: steps whose rows commit with the caller's own ([`Execution::step_with`]);
//! - `deferred`: write-behind and the deferred open (what a write carries, and when);
//! - `release`: the end that parks the execution instead ([`Execution::release_to`]);
//! - `reservation`: parallel steps: the state steps share, and each step's seq reserved in
//!   call order ([`Reservation`]);
//! - `protocol`: the step protocol (replay, the ambiguity policies, retries);
//! - `step_rows`: the SQL of step rows;
//! - `fence`: the writer, lock and epoch the handle writes with.

mod deferred;
mod fence;
mod hooks;
mod peek;
mod protocol;
mod release;
mod reservation;
mod step_rows;

use std::future::Future;
use std::sync::Arc;

use durably_db::Connection;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

pub use deferred::{DEFERRED_BYTES_MAX, DEFERRED_STEPS_MAX};
pub(crate) use deferred::{DeferredOpen, OpenHook};
pub(crate) use fence::Fence;
pub use hooks::{StepRef, Timing};
use protocol::StepOutcome;
pub use release::{Release, STATUS_DETAIL_BYTES_MAX};
pub use reservation::Reservation;
use reservation::Shared;
pub(crate) use step_rows::first_open_intent;

use crate::config::StepSettings;
use crate::error::{Error, Result};
use crate::handles::HandleClaim;
use crate::payload;
use crate::replay::Replay;
use crate::states::Status;
use crate::step::{FencingToken, Guarded, Policy, StepKey};
use crate::telemetry::{self, RunEnd};

/// The handle that drives one open execution. Steps are numbered in call order; on a resumed
/// execution, steps already recorded return their recorded outcome without calling the closure.
///
/// Its step methods take `&self` and reserve their step's seq when they are called, so several
/// steps may run at once (`join!(h.pure("a", ..), h.pure("b", ..))`); see [`Reservation`].
///
/// Dropping it without [`Execution::complete`] or [`Execution::fail`] releases the lock and
/// leaves the execution `running`, to be resumed.
#[derive(Debug)]
pub struct Execution {
    // Shared with every step future of the handle (which owns a reference, so that a step's
    // future does not borrow the handle), and through the fence with the lease heartbeat.
    shared: Arc<Shared>,
    is_resume: bool,
    input: String,
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
    /// The run's span ([`telemetry::execution_span`]), made where the open began so that it
    /// covers the open's write.
    pub(crate) span: tracing::Span,
}

impl Execution {
    pub(crate) fn new(opening: Opening) -> Self {
        let heartbeat = spawn_heartbeat(&opening.fence, opening.settings.lease_ms);
        opening.span.record("resumed", opening.is_resume);
        telemetry::run_started(opening.is_resume);
        let shared = Shared::new(
            opening.fence,
            opening.settings,
            opening.id,
            opening.replay,
            opening.span,
        );
        Self {
            shared: Arc::new(shared),
            is_resume: opening.is_resume,
            input: opening.input,
            heartbeat,
            _claim: opening.claim,
        }
    }

    /// The execution id.
    pub fn id(&self) -> Uuid {
        self.shared.id
    }

    /// Whether this open resumed an execution that had been opened before.
    pub fn is_resume(&self) -> bool {
        self.is_resume
    }

    /// The fencing token of this handle's lock; each step closure also gets it in its
    /// [`StepKey`]. `FencingToken(0)` until the first write of a handle from
    /// [`crate::Journal::begin_execution`] has taken the lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.shared.fence.token()
    }

    /// The span of this run of the execution (`durably.execution`), the parent of its steps'
    /// spans. Instrument work done for the execution with it to nest that work under the run.
    pub fn span(&self) -> &tracing::Span {
        &self.shared.span
    }

    /// The journal the execution is in.
    pub(crate) fn journal(&self) -> &crate::journal::Journal {
        self.shared.fence.journal()
    }

    /// The sequence number the next step call will reserve; on a halted handle (which
    /// reserves no more), the seq it halted at.
    pub fn next_seq(&self) -> u32 {
        let state = self.shared.state();
        state
            .halted_at
            .map_or(state.next_seq, |halted| halted.min(state.next_seq))
    }

    /// One past the highest seq recorded when this handle opened the execution (0 for a new
    /// one): steps below it replay their recorded outcome instead of running, but for gaps
    /// left by parallel steps a crash cut short ([`Reservation::replays`] says which).
    pub fn recorded_steps(&self) -> u32 {
        self.shared.recorded_steps()
    }

    /// The execution's input, as recorded when it was first opened.
    ///
    /// # Errors
    /// [`Error::Json`] when it does not decode as `T`.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T> {
        payload::decode(
            &self.input,
            "the execution input",
            self.shared.settings.payload_bytes_max,
        )
    }

    /// Runs a pure step (a computation or a read). Its result is journaled in one commit; a
    /// crash inside it runs it again. The step's seq is reserved when this is called, before
    /// the future is polled.
    ///
    /// # Errors
    /// [`Error::StepFailed`] when the closure failed (now or on an earlier run),
    /// [`Error::NonDeterminism`], [`Error::LockLost`], [`Error::PayloadTooLarge`],
    /// [`Error::Halted`] once the handle halted, or a storage error.
    pub fn pure<T, F, Fut>(
        &self,
        name: &str,
        f: F,
    ) -> impl Future<Output = Result<T>> + use<T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let reserved = self.reserve(name);
        async move { reserved?.pure(f).await }
    }

    /// Runs an idempotent step, handing the closure its [`StepKey`]. Its result is journaled
    /// in one commit; a crash inside it runs it again with the same idempotency key.
    ///
    /// # Errors
    /// As [`Execution::pure`].
    pub fn idempotent<T, F, Fut>(
        &self,
        name: &str,
        f: F,
    ) -> impl Future<Output = Result<T>> + use<T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let reserved = self.reserve(name);
        async move { reserved?.idempotent(f).await }
    }

    /// Runs a guarded step: its intent is committed before the closure runs and its result after.
    /// If a crash left the intent without a result, `policy` decides (see [`Policy`]). Each
    /// guarded step keeps its own policy and idempotency key, also when several run at once.
    ///
    /// # Errors
    /// As [`Execution::pure`], plus [`Error::Ambiguous`] under [`Policy::Fail`] and
    /// [`Error::ProbeFailed`] under [`Policy::Reconcile`].
    pub fn guarded<T, F, Fut>(
        &self,
        name: &str,
        policy: Policy,
        f: F,
    ) -> impl Future<Output = Result<Guarded<T>>> + use<T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let reserved = self.reserve(name);
        async move { reserved?.guarded(policy, f).await }
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
    /// handle is then halted at this step, as after any failed intent write (a declining
    /// [`Error::Aborted`] gives the seq back instead, see [`Execution::step_with`]).
    pub fn guarded_with<T, F, Fut, W>(
        &self,
        name: &str,
        policy: Policy,
        with_intent: W,
        f: F,
    ) -> impl Future<Output = Result<Guarded<T>>> + use<T, F, Fut, W>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
        W: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let reserved = self.reserve(name);
        async move { reserved?.guarded_with(policy, with_intent, f).await }
    }

    /// Refreshes this handle's lease heartbeat (for journals opened with a lease).
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock was taken over.
    pub async fn heartbeat(&self) -> Result<()> {
        self.shared.fence.heartbeat().await
    }

    /// Finalizes the execution as completed with `output`, and releases its lock, in one
    /// transaction.
    ///
    /// # Errors
    /// [`Error::LockLost`], [`Error::PayloadTooLarge`], [`Error::Halted`] after a step error
    /// that stops the execution (or while a step future of the handle is still alive, unfinished),
    /// [`Error::Refused`] while a step is in the ambiguous window,
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
            self.shared.settings.payload_bytes_max,
        )?;
        self.shared.refuse_if_released()?;
        // After an ambiguous step, a lost lock or non-determinism the journal is in doubt:
        // completing would bury the doubt under a final status. `fail` stays allowed. A lost
        // lock is the more useful answer when it is the reason, so the fence is asked first.
        if let Some(seq) = self.shared.stopped_at() {
            self.shared.fence.check().await?;
            return Err(Error::Halted {
                execution_id: self.id(),
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
            self.shared.settings.payload_bytes_max,
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
    pub async fn finish_cancelled<F>(self, reason: &str, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        self.shared.refuse_if_released()?;
        let (id, reason) = (self.id(), reason.to_owned());
        let release = Arc::clone(&self.shared.fence);
        self.shared
            .fence
            .write_admitted(move |conn, _, now| {
                crate::lifecycle::cancel_row(conn, id, Status::Running, now, &reason)?;
                also(conn)?;
                release.release_in(conn)
            })
            .await?;
        self.shared.state().finalized = true;
        self.shared.ended(RunEnd::Status(Status::Cancelled));
        tracing::info!(parent: &self.shared.span, execution_id = %id, status = "cancelled", "finalized");
        Ok(())
    }

    async fn finalize<T, F>(self, status: Status, payload: String, also: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.shared.refuse_if_released()?;
        let (id, next_seq) = (self.id(), self.next_seq());
        let fence = &self.shared.fence;
        let release = Arc::clone(fence);
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
            fence.write(write).await?
        } else {
            fence.write_admitted(write).await?
        };
        self.shared.state().finalized = true;
        self.shared.ended(RunEnd::Status(status));
        tracing::info!(parent: &self.shared.span, execution_id = %id, status = status.as_str(), "finalized");
        Ok(also)
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        if let Some(heartbeat) = &self.heartbeat {
            heartbeat.abort();
        }
        if !self.shared.state().finalized {
            self.shared.ended(RunEnd::Dropped);
            self.shared.fence.release_detached();
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
