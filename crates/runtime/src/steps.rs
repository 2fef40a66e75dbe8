//! [`StepBuilder`]: a step with options, from [`WorkflowContext::step`]; for now a timeout
//! (plan §4.7).
//!
//! A step that runs past its timeout is dropped, closure and all, which halts the execution's
//! handle as a crash inside the step would, and the run ends:
//! - a **pure or idempotent** step is not recorded; the execution ends `failed` with
//!   `status_detail {"reason": "step_timeout", seq, step, after_ms}`, which
//!   [`crate::Client::resume`] puts back to run the step again. Failing visibly beats running
//!   again at once a call that is likely to hang again.
//! - a **guarded** step's intent stays: the execution is released back to its queue
//!   (`yielded`, `status_detail` as above), and its next run applies the step's policy exactly
//!   as after a crash (Retry bounded by `ambiguous_reruns_max`, then `awaiting_operator`).
//!
//! To handle a slow call in workflow code instead, time out inside the closure and return a
//! [`StepError`], which is recorded and replays.

use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_journal::{
    Effect, Execution, Guarded, Policy, Release, Reservation, StepError, StepKey,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use uuid::Uuid;

use crate::clock::Sleep;
use crate::context::WorkflowContext;
use crate::error::{Error, Result, WorkflowError};
use crate::task::Ran;

/// A step of [`WorkflowContext::step`], run by one of its effect methods.
#[derive(Debug)]
#[must_use = "a step runs only when one of its effect methods is awaited"]
pub struct StepBuilder<'a> {
    context: &'a WorkflowContext,
    name: &'a str,
    timeout: Option<Duration>,
}

/// A step that ran past its timeout, as the run's end records it.
#[derive(Debug, Clone)]
pub(crate) struct StepTimeout {
    seq: u32,
    step: String,
    after: Duration,
    effect: Effect,
}

impl<'a> StepBuilder<'a> {
    pub(crate) fn new(context: &'a WorkflowContext, name: &'a str) -> Self {
        Self {
            context,
            name,
            timeout: None,
        }
    }

    /// Drops the step if it has not finished `after` its start (on the runtime's clock): see
    /// the module's documentation for what then happens to the execution. A timeout too large
    /// to represent is no timeout.
    pub fn timeout(mut self, after: Duration) -> Self {
        self.timeout = Some(after);
        self
    }

    /// Runs it as a pure step; see [`WorkflowContext::pure`]. Its seq is reserved when this
    /// is called; the timeout runs from the future's first poll.
    ///
    /// # Errors
    /// As [`WorkflowContext::pure`], and [`Error::StepTimedOut`].
    pub fn pure<T, F, Fut>(self, f: F) -> impl Future<Output = Result<T>> + use<'a, T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.run(Effect::Pure, |reserved| reserved.pure(f))
    }

    /// Runs it as an idempotent step; see [`WorkflowContext::idempotent`].
    ///
    /// # Errors
    /// As [`StepBuilder::pure`].
    pub fn idempotent<T, F, Fut>(self, f: F) -> impl Future<Output = Result<T>> + use<'a, T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.run(Effect::Idempotent, |reserved| reserved.idempotent(f))
    }

    /// Runs it as a guarded step; see [`WorkflowContext::guarded`].
    ///
    /// # Errors
    /// As [`WorkflowContext::guarded`], and [`Error::StepTimedOut`].
    pub fn guarded<T, F, Fut>(
        self,
        policy: Policy,
        f: F,
    ) -> impl Future<Output = Result<Guarded<T>>> + use<'a, T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.run(Effect::Guarded, |reserved| reserved.guarded(policy, f))
    }

    /// Reserves the step now and returns its run: `call` on the reservation, under the
    /// builder's timeout, holding a lease on the execution, with an outcome that stops the
    /// run remembered.
    fn run<T, Step, Call>(
        self,
        effect: Effect,
        call: Call,
    ) -> impl Future<Output = Result<T>> + use<'a, T, Step, Call>
    where
        Step: Future<Output = durably_journal::Result<T>>,
        Call: FnOnce(Reservation) -> Step,
    {
        let started = self.context.begin_step(self.name);
        async move {
            // The step's future is made here, not in `started`: held in both, it would be
            // stored twice in this future.
            let (lease, reserved) = started?;
            let (context, seq) = (self.context, reserved.seq());
            let outcome = timed(call(reserved), context.timer(self.timeout)).await;
            drop(lease);
            context
                .slot
                .remember_timed(context.id(), outcome, || self.timed_out(seq, effect))
        }
    }

    fn timed_out(&self, seq: u32, effect: Effect) -> StepTimeout {
        StepTimeout {
            seq,
            step: self.name.to_owned(),
            after: self.timeout.unwrap_or_default(),
            effect,
        }
    }
}

/// Runs `step` to its end, or drops it when `timer` ends first (`None`).
async fn timed<T>(step: impl Future<Output = T>, timer: Option<Sleep<'_>>) -> Option<T> {
    let Some(timer) = timer else {
        return Some(step.await);
    };
    tokio::select! {
        biased;
        outcome = step => Some(outcome),
        () = timer => None,
    }
}

impl StepTimeout {
    /// What the step returns to the workflow.
    pub(crate) fn error(&self, execution_id: Uuid) -> Error {
        Error::StepTimedOut {
            execution_id,
            seq: self.seq,
            step: self.step.clone(),
            after: self.after,
        }
    }

    fn after_ms(&self) -> u64 {
        u64::try_from(self.after.as_millis()).unwrap_or(u64::MAX)
    }

    /// The status detail of the execution the timeout ends or requeues: names, never
    /// payloads.
    fn detail(&self) -> serde_json::Value {
        json!({
            "reason": crate::resume::STEP_TIMEOUT_REASON,
            "seq": self.seq,
            "step": self.step,
            "after_ms": self.after_ms(),
        })
    }

    /// Ends the run of `execution`, whose step timed out (see the module's documentation):
    /// a guarded step's execution is requeued, another's fails.
    pub(crate) async fn end(self, execution: Execution, now: DateTime<Utc>) -> Result<Ran> {
        if self.effect == Effect::Guarded {
            self.requeue(execution).await
        } else {
            self.fail(execution, now).await
        }
    }

    /// Puts `execution` back in its queue with the guarded step's intent left to its policy,
    /// as after a crash: the release carries what the run kept pending.
    async fn requeue(self, execution: Execution) -> Result<Ran> {
        let to = Release::Queued { due_at: None };
        execution.release_to(to, self.detail(), |_| Ok(())).await?;
        Ok(Ran::Requeued)
    }

    /// Ends `execution`, whose pure or idempotent step timed out: `failed`, resumable, with the
    /// rows the run kept pending.
    async fn fail(self, execution: Execution, now: DateTime<Utc>) -> Result<Ran> {
        let message = format!(
            "step {} ({:?}) timed out after {} ms",
            self.seq,
            self.step,
            self.after_ms()
        );
        let id = execution.id();
        let detail = self.detail();
        let error = WorkflowError {
            message,
            details: Some(detail.clone()),
        };
        // Failing is allowed on the halted handle, and even after a cancel request.
        execution
            .fail_with(&error, move |conn| {
                durably_journal::lifecycle::set_status_detail(conn, id, &detail)?;
                crate::task::clear_deadline(id, now)(conn)
            })
            .await?;
        fail::fail_point!("runtime::after-step-timeout-commit", |_| {
            std::process::abort()
        });
        Ok(Ran::TimedOut)
    }
}
