//! Driving one registered fire: opening its execution, the attempt loop, and the fire's end.
//!
//! Invariant: a fire's state lives in its `fires` row alone. Every change to it commits in the
//! journal transaction of the event it records: a fresh attempt's mark with the attempt's
//! intent, the final state with the execution's end. So the row and the journal agree after any
//! crash, and a fire found finished is reported from its row, never from its execution.

use std::sync::Arc;

use durably_journal::{
    CancelOutcome, Error as JournalError, Execution, Guarded, IdempotencyKey, Opened,
    Result as JournalResult, StepError,
};
use rusqlite::Connection;
use serde_json::{Value, json};
use tracing::Instrument;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::fire_id::Fire;
use crate::job::{FireContext, FireFuture, Job};
use crate::ledger::{self, Registered};
use crate::outcome::{FireOutcome, FireState};
use crate::scheduler::{EXECUTION_KIND, FIRE_STEP_NAME, InFlight, Scheduler};

/// How a fire's attempts ended, before the end is recorded.
enum AttemptsEnd {
    /// An attempt's body returned this value.
    Completed { output: Value, attempts: u32 },
    /// A crash left an attempt in the ambiguous window and the job's policy is `Skip`.
    Skipped { reason: String },
    /// Every attempt failed; the last one with this error.
    Failed { error: StepError, attempts: u32 },
    /// An operator asked to cancel the fire's execution: the next attempt was refused.
    Cancelled { reason: String },
}

/// The reason a fire is recorded skipped when an operator cancelled its execution.
fn cancelled_by_operator(reason: &str) -> String {
    format!("its execution was cancelled by an operator: {reason}")
}

/// The outcome of a registration that leaves nothing to run, if it does.
pub(crate) fn early_outcome(fire: &Fire, registered: &Registered) -> Option<FireOutcome> {
    let execution_id = fire.execution_id;
    match registered {
        Registered::NewSkipped(reason) => Some(FireOutcome::Skipped {
            execution_id,
            reason: reason.clone(),
        }),
        Registered::Existing { state, .. } if state.is_final() => Some(FireOutcome::Replayed {
            execution_id,
            state: *state,
        }),
        Registered::New | Registered::Existing { .. } | Registered::AtOrBelowMark => None,
    }
}

impl Scheduler {
    /// Opens the fire's execution and runs it to an outcome. `_guard` keeps the fire in this
    /// scheduler's in-flight set until it returns.
    pub(crate) async fn drive(
        &self,
        job: &Job,
        fire: Fire,
        _guard: InFlight,
    ) -> Result<FireOutcome> {
        fail::fail_point!("scheduler::after-fire-registered", |_| std::process::abort(
        ));
        let span = tracing::info_span!(
            "durably.fire",
            job = %fire.job,
            slot = %fire.slot,
            execution_id = %fire.execution_id
        );
        self.open_and_run(job, &fire).instrument(span).await
    }

    async fn open_and_run(&self, job: &Job, fire: &Fire) -> Result<FireOutcome> {
        let input = json!({
            "job": fire.job,
            "slot": fire.slot.to_rfc3339(),
            "slot_ms": fire.slot.as_millis(),
        });
        let execution_id = fire.execution_id;
        let opened = self
            .inner
            .journal
            .open_execution(execution_id, EXECUTION_KIND, fire.job.as_str(), &input)
            .await;
        match opened {
            Ok(Opened::Running(mut execution)) => {
                let end = self.run_attempts(job, fire, &mut execution).await?;
                self.end_fire(fire, execution, end).await
            }
            Ok(Opened::Finished(_)) => Ok(FireOutcome::Replayed {
                execution_id,
                state: self.recorded_end(fire)?,
            }),
            Err(JournalError::Locked { pid, .. }) => {
                Ok(FireOutcome::LockedBy { execution_id, pid })
            }
            // An earlier drive left the body to an operator; the journal refuses to reopen it
            // until the step is resolved. The flag is set again, in case that drive crashed
            // before it set it.
            Err(error @ JournalError::AwaitingOperator { .. }) => {
                Err(self.await_operator(fire, error).await)
            }
            Err(JournalError::Cancelled(_)) => {
                let reason = "its execution was cancelled by an operator".to_owned();
                self.write_ledger(self.ledger_finish(fire, FireState::Skipped, Some(&reason)))
                    .await?;
                Ok(FireOutcome::Skipped {
                    execution_id,
                    reason,
                })
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The final state of a fire whose execution the journal reports finished, from its row.
    /// The row's final state commits with the execution's end, so a row still unfinished here
    /// means the ledger and the journal disagree: an error, never a silent repair.
    fn recorded_end(&self, fire: &Fire) -> Result<FireState> {
        let found = self
            .inner
            .journal
            .read(|conn| ledger::fire_state(conn, fire.job.as_str(), fire.slot))?;
        match found {
            Some((state, _)) if state.is_final() => Ok(state),
            found => Err(Error::Ledger(format!(
                "execution {} of the fire of job {:?} at {} is finished, but its fires row is {}",
                fire.execution_id,
                fire.job.as_str(),
                fire.slot,
                found.map_or("missing", |(state, _)| state.as_str()),
            ))),
        }
    }

    /// Runs the attempts of an open fire until one succeeds, the policy skips an ambiguous
    /// one, or the job's `retry.attempts_max` have failed. Attempt `k` is the guarded step at
    /// seq `k - 1`, so a resumed fire replays its recorded attempts (with no backoff) and goes
    /// on where it stopped.
    async fn run_attempts(
        &self,
        job: &Job,
        fire: &Fire,
        execution: &mut Execution,
    ) -> Result<AttemptsEnd> {
        let recorded = execution.recorded_steps();
        let mut last_error = None;
        for attempt in 1..=job.retry.attempts_max {
            if attempt > recorded {
                self.wait_for_attempt(job, attempt).await?;
            } else {
                // A recorded attempt replays and writes no intent to mark the fire with.
                self.write_ledger(self.ledger_running(fire, attempt))
                    .await?;
            }
            match self.attempt(job, fire, execution, attempt).await {
                Ok(Guarded::Done(output)) => {
                    return Ok(AttemptsEnd::Completed {
                        output,
                        attempts: attempt,
                    });
                }
                Ok(Guarded::Skipped(skipped)) => {
                    let reason = format!(
                        "attempt {attempt} was interrupted by a crash after its intent was \
                         recorded, and the job's ambiguity policy is Skip, so it was not run \
                         again (idempotency key {})",
                        skipped.idempotency_key
                    );
                    return Ok(AttemptsEnd::Skipped { reason });
                }
                Err(JournalError::StepFailed { error, .. }) => {
                    tracing::info!(attempt, "fire attempt failed");
                    last_error = Some(error);
                }
                Err(error @ JournalError::Ambiguous { .. }) => {
                    return Err(self.await_operator(fire, error).await);
                }
                Err(JournalError::CancelRequested { reason, .. }) => {
                    return Ok(AttemptsEnd::Cancelled { reason });
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(AttemptsEnd::Failed {
            error: last_error.unwrap_or_else(|| StepError::fatal("the fire made no attempt")),
            attempts: job.retry.attempts_max,
        })
    }

    /// Waits before a fresh attempt: the job's backoff before every attempt after the first.
    /// Shutdown starts no new attempt, and cuts a backoff short: the fire stays unfinished, and
    /// the next pass replays the recorded attempts and goes on.
    async fn wait_for_attempt(&self, job: &Job, attempt: u32) -> Result<()> {
        self.stop_if_shutting_down()?;
        if attempt > 1 {
            tokio::select! {
                biased;
                () = self.inner.shutdown.wait() => return Err(Error::ShuttingDown),
                () = tokio::time::sleep(job.retry.backoff_before(attempt)) => {}
            }
            self.stop_if_shutting_down()?;
        }
        Ok(())
    }

    fn stop_if_shutting_down(&self) -> Result<()> {
        if self.inner.shutdown.is_set() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    /// Runs attempt `attempt` as the guarded step at seq `attempt - 1`, or replays it.
    async fn attempt(
        &self,
        job: &Job,
        fire: &Fire,
        execution: &mut Execution,
        attempt: u32,
    ) -> JournalResult<Guarded<Value>> {
        let body = Arc::clone(&job.body);
        let context = FireContext {
            job: fire.job.clone(),
            slot: fire.slot,
            execution_id: fire.execution_id,
            idempotency_key: IdempotencyKey(Uuid::nil()),
            attempt,
            shutdown: self.inner.shutdown.clone(),
        };
        // A fresh attempt marks the fire running in its intent's transaction, so the ledger and
        // the journal agree after any crash.
        let mark_running = self.ledger_running(fire, attempt);
        execution
            .guarded_with(
                FIRE_STEP_NAME,
                job.policy.clone(),
                mark_running,
                move |key| {
                    let context = FireContext {
                        idempotency_key: key.idempotency_key(),
                        ..context.clone()
                    };
                    // The scheduler owns fire retries, so the journal must not retry inside the
                    // step: every error is recorded as this attempt's failure. A panic in the
                    // body is caught and recorded as this attempt's failure too; left to unwind,
                    // it would leave the intent ambiguous and be re-run by every recovery.
                    let future = CatchPanic(body(context));
                    async move {
                        future.await.map_err(|error| StepError {
                            retryable: false,
                            ..error
                        })
                    }
                },
            )
            .await
    }

    /// Notes in the fire's row that it waits for an operator (the policy will not decide its
    /// ambiguous body), and returns the error to report. Logged and noted once: recovery passes
    /// the fire over until an operator resolves the step (see [`ledger::recoverable`]).
    async fn await_operator(&self, fire: &Fire, error: JournalError) -> Error {
        tracing::warn!(%error, "fire waits for an operator");
        let note = format!("waiting for an operator: {error}");
        let noted = fire.clone();
        let written = self
            .write_ledger(move |conn| ledger::await_operator(conn, &noted, &note))
            .await;
        match written {
            Ok(()) => error.into(),
            Err(failed) => failed,
        }
    }

    /// Records how the attempts ended: the execution's end and the row's final state, in one
    /// transaction.
    async fn end_fire(
        &self,
        fire: &Fire,
        execution: Execution,
        end: AttemptsEnd,
    ) -> Result<FireOutcome> {
        let execution_id = fire.execution_id;
        let resumed = execution.is_resume();
        Ok(match end {
            AttemptsEnd::Completed { output, attempts } => {
                let record = json!({ "fire": "completed", "attempts": attempts, "output": output });
                let finish = self.ledger_finish(fire, FireState::Completed, None);
                if let Some(cancelled) = self
                    .unless_cancelled(fire, execution.complete_with(&record, finish).await)
                    .await?
                {
                    return Ok(cancelled);
                }
                FireOutcome::Ran {
                    execution_id,
                    output,
                    attempts,
                    resumed,
                }
            }
            AttemptsEnd::Skipped { reason } => {
                let record = json!({ "fire": "skipped", "reason": reason });
                let finish = self.ledger_finish(fire, FireState::Skipped, Some(&reason));
                if let Some(cancelled) = self
                    .unless_cancelled(fire, execution.complete_with(&record, finish).await)
                    .await?
                {
                    return Ok(cancelled);
                }
                FireOutcome::Skipped {
                    execution_id,
                    reason,
                }
            }
            AttemptsEnd::Cancelled { reason } => {
                let skipped = cancelled_by_operator(&reason);
                let finish = self.ledger_finish(fire, FireState::Skipped, Some(&skipped));
                execution.finish_cancelled(&reason, finish).await?;
                FireOutcome::Skipped {
                    execution_id,
                    reason: skipped,
                }
            }
            AttemptsEnd::Failed { error, attempts } => {
                let record = json!({ "fire": "failed", "attempts": attempts, "error": error });
                let reason = format!("{attempts} attempts failed; the last: {}", error.message);
                let finish = self.ledger_finish(fire, FireState::Failed, Some(&reason));
                execution.fail_with(&record, finish).await?;
                FireOutcome::Failed {
                    execution_id,
                    error,
                    attempts,
                }
            }
        })
    }

    /// Passes a completion's result on, unless an operator's cancel request refused it: the
    /// refused handle is gone (its lock released with it), so the operator action ends the
    /// execution, with the fire's row marked skipped in the same transaction. Returns the
    /// fire's outcome then.
    async fn unless_cancelled(
        &self,
        fire: &Fire,
        completed: JournalResult<()>,
    ) -> Result<Option<FireOutcome>> {
        let reason = match completed {
            Err(JournalError::CancelRequested { reason, .. }) => reason,
            other => return other.map(|()| None).map_err(Error::from),
        };
        let execution_id = fire.execution_id;
        let skipped = cancelled_by_operator(&reason);
        let finish = self.ledger_finish(fire, FireState::Skipped, Some(&skipped));
        let outcome = self
            .inner
            .journal
            .operator()
            .cancel_with(execution_id, &reason, finish)
            .await?;
        Ok(Some(match outcome {
            // Another process reopened it meanwhile; it sees the request and ends the fire.
            CancelOutcome::Requested { pid } => FireOutcome::LockedBy { execution_id, pid },
            _ => FireOutcome::Skipped {
                execution_id,
                reason: skipped,
            },
        }))
    }

    async fn write_ledger(
        &self,
        work: impl FnOnce(&Connection) -> JournalResult<()> + Send + 'static,
    ) -> Result<()> {
        self.inner.journal.write(work).await?;
        Ok(())
    }

    /// The ledger write that marks attempt `attempt` of a fire as started.
    fn ledger_running(
        &self,
        fire: &Fire,
        attempt: u32,
    ) -> impl FnOnce(&Connection) -> JournalResult<()> + Send + 'static {
        let (fire, now) = (fire.clone(), self.now_text());
        move |conn| ledger::mark_running(conn, &fire, attempt, &now)
    }

    /// The ledger write that records a fire's final state.
    fn ledger_finish(
        &self,
        fire: &Fire,
        state: FireState,
        reason: Option<&str>,
    ) -> impl FnOnce(&Connection) -> JournalResult<()> + Send + 'static {
        let (fire, now, reason) = (fire.clone(), self.now_text(), reason.map(str::to_owned));
        move |conn| ledger::mark_finished(conn, &fire, state, reason.as_deref(), &now)
    }
}

/// Runs a fire body's future, turning a panic into a non-retryable failure of the attempt.
///
/// The body is polled in place (not spawned), so dropping the fire, as the shutdown grace does,
/// drops the body with it. After a panic the body's future is not polled again.
struct CatchPanic(FireFuture);

impl std::future::Future for CatchPanic {
    type Output = std::result::Result<Value, StepError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let future = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic payload".to_owned());
                tracing::error!("fire body panicked");
                std::task::Poll::Ready(Err(StepError::fatal(format!(
                    "the fire body panicked: {message}"
                ))))
            }
        }
    }
}
