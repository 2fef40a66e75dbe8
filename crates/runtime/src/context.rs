//! [`WorkflowContext`]: what a workflow function drives its execution with. Its steps are the
//! journal's steps (recorded, replayed on resume, guarded steps under their policy), with names
//! in the runtime's namespace refused; none starts once the run was asked to stop.

use std::sync::Arc;

use durably_journal::{Execution, Guarded, Policy, StepError, StepKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Mutex, MutexGuard, Notify};
use uuid::Uuid;

use crate::cancel::CancelSignal;
use crate::clock::Sleep;
use crate::error::{Error, Result};
use crate::names;
use crate::steps::{StepBuilder, StepTimeout};
use crate::waiting::Waits;

/// The handle a workflow function gets: its execution's id, version and steps. Steps are
/// numbered in call order; on a resumed execution, steps already recorded return their
/// recorded outcome without calling their closure.
#[derive(Debug)]
pub struct WorkflowContext {
    pub(crate) id: Uuid,
    version: u32,
    is_resume: bool,
    /// Shared with the task that runs the workflow, which takes the execution back to end it
    /// when the workflow's future returns, whether or not the workflow kept its context.
    pub(crate) slot: Arc<Mutex<Slot>>,
    /// The clock, the client and the parking threshold of timers and receives.
    pub(crate) waits: Arc<Waits>,
    /// Notified once a wait has parked the execution: the task then drops the workflow's
    /// future, which never runs again in this process.
    pub(crate) parked: Arc<Notify>,
    /// Tripped when the run is asked to stop (the slot holds it too, to check every step).
    signal: CancelSignal,
}

/// The execution a context drives, and why it stopped, if it did.
#[derive(Debug)]
pub(crate) struct Slot {
    /// `None` once the task has taken it back.
    pub(crate) execution: Option<Execution>,
    /// Why the run stopped taking steps, if it did: the first step error that stops the
    /// execution (any journal error but a step's own recorded failure), a cancel, or a step
    /// timeout. The task ends the run on it instead of recording the workflow's result.
    pub(crate) stopped: Option<Stop>,
    /// Whether the first write lost the deferred open's race ([`durably_journal::Error::OpenRaced`]):
    /// the execution is another run's, and this one wrote nothing.
    pub(crate) raced: bool,
    /// Tripped when the run is asked to stop: no step starts after it.
    signal: CancelSignal,
}

impl WorkflowContext {
    /// A context for `execution` at `version`, stopped by `signal`, the slot its task ends it
    /// from, and the signal of a park.
    pub(crate) fn new(
        execution: Execution,
        version: u32,
        waits: Arc<Waits>,
        signal: CancelSignal,
    ) -> (Self, Arc<Mutex<Slot>>, Arc<Notify>) {
        let id = execution.id();
        let is_resume = execution.is_resume();
        let slot = Arc::new(Mutex::new(Slot {
            execution: Some(execution),
            stopped: None,
            raced: false,
            signal: signal.clone(),
        }));
        let parked = Arc::new(Notify::new());
        let context = Self {
            id,
            version,
            is_resume,
            slot: Arc::clone(&slot),
            waits,
            parked: Arc::clone(&parked),
            signal,
        };
        (context, slot, parked)
    }

    /// The execution's id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The version of the workflow kind the execution was started with.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether this run resumes an execution that ran before (after a crash, a park or a
    /// requeue): recorded steps replay instead of running.
    pub fn is_resume(&self) -> bool {
        self.is_resume
    }

    /// What tells this run it was asked to stop (a cancel request, its deadline): for a
    /// step's closure that wants to give up long work early, since the runtime never
    /// interrupts a closure.
    pub fn cancellation(&self) -> CancelSignal {
        self.signal.clone()
    }

    /// A step named `name`, to give a timeout before running it:
    /// `ctx.step("fetch").timeout(d).idempotent(|key| ...)`. See [`StepBuilder`].
    pub fn step<'a>(&'a self, name: &'a str) -> StepBuilder<'a> {
        StepBuilder::new(self, name)
    }

    /// Runs a pure step (a computation or a read); see [`Execution::pure`].
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a name starting with `durably:`, [`Error::Cancelled`] once
    /// the run was asked to stop (the step did not run); the journal's step errors as
    /// [`Error::Journal`].
    pub async fn pure<T, F, Fut>(&self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).pure(f).await
    }

    /// Runs an idempotent step with its [`StepKey`]; see [`Execution::idempotent`].
    ///
    /// # Errors
    /// As [`WorkflowContext::pure`].
    pub async fn idempotent<T, F, Fut>(&self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).idempotent(f).await
    }

    /// Runs a guarded step: intent before the closure, result after, `policy` for a crash in
    /// between; see [`Execution::guarded`].
    ///
    /// # Errors
    /// As [`WorkflowContext::pure`], plus the journal's `Ambiguous` and `ProbeFailed`.
    pub async fn guarded<T, F, Fut>(&self, name: &str, policy: Policy, f: F) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).guarded(policy, f).await
    }

    /// Checks `name` and takes the slot for a step, refused once the run was asked to stop.
    /// Returns the step's sequence number too: the execution's next.
    pub(crate) async fn begin_step(&self, name: &str) -> Result<(MutexGuard<'_, Slot>, u32)> {
        names::check_step_name(name)?;
        let mut slot = self.slot.lock().await;
        let seq = running(&mut slot, self.id)?.next_seq();
        Ok((slot, seq))
    }

    /// A timer of `timeout` on the run's clock, if there is a timeout.
    pub(crate) fn timer(&self, timeout: Option<std::time::Duration>) -> Option<Sleep<'_>> {
        let after = chrono::TimeDelta::from_std(timeout?).ok()?;
        let at = durably_lock::Clock::now(self.waits.clock.as_ref()).checked_add_signed(after)?;
        Some(self.waits.clock.sleep_until(at))
    }
}

/// The execution, for a step: an error once the run was asked to stop (no step starts after
/// that), or once its task has taken it back (a step called from a future the workflow
/// spawned and left running after it returned).
pub(crate) fn running(slot: &mut Slot, id: Uuid) -> Result<&mut Execution> {
    if let Some(reason) = slot.signal.reason() {
        slot.stop(Stop::Cancelled(reason));
    }
    if let Some(Stop::Cancelled(reason)) = &slot.stopped {
        return Err(Error::Cancelled {
            execution_id: id,
            reason: reason.clone(),
        });
    }
    slot.execution
        .as_mut()
        .ok_or(Error::StepAfterEnd { execution_id: id })
}

/// Whether the execution's next step is recorded, so calling it replays its outcome and writes
/// nothing.
pub(crate) fn replays(execution: &Execution) -> bool {
    execution.next_seq() < execution.recorded_steps()
}

/// Why a run stopped taking steps, whatever its workflow does next. The task ends the run on
/// it instead of recording the workflow's result.
#[derive(Debug)]
pub(crate) enum Stop {
    /// A step error that stops the execution (lock lost, non-determinism, an ambiguous step
    /// left to an operator, storage), as its message: the handle is dropped, and the
    /// execution is resumed or parked by whoever accounts for failed runs.
    Halted(String),
    /// The run was asked to stop, for this reason: it ends `cancelled`.
    Cancelled(String),
    /// A step ran past its timeout and was dropped.
    TimedOut(StepTimeout),
    /// Replay met a recorded step other than the one the code calls: the execution is parked
    /// `stuck` at once with this diff as its status detail, since retrying the same code can
    /// never heal it (`crate::diverged`).
    Diverged(serde_json::Value),
}

impl Slot {
    /// What tells the run it was asked to stop.
    pub(crate) fn signal(&self) -> &CancelSignal {
        &self.signal
    }

    /// Remembers why the run stopped; the first reason stays.
    pub(crate) fn stop(&mut self, stop: Stop) {
        if self.stopped.is_none() {
            self.stopped = Some(stop);
        }
    }

    /// Passes a step's outcome on, remembering the first error that stops the execution. A
    /// write refused by a cancel request stops the run as the request says.
    pub(crate) fn remember<T>(&mut self, outcome: durably_journal::Result<T>) -> Result<T> {
        match outcome {
            Ok(value) => Ok(value),
            Err(error @ durably_journal::Error::StepFailed { .. }) => Err(error.into()),
            Err(durably_journal::Error::CancelRequested {
                execution_id,
                reason,
            }) => {
                self.stop(Stop::Cancelled(reason.clone()));
                Err(Error::Cancelled {
                    execution_id,
                    reason,
                })
            }
            Err(error @ durably_journal::Error::NonDeterminism { .. }) => {
                self.stop(Stop::Diverged(crate::diverged::detail(&error)));
                Err(error.into())
            }
            Err(error) => {
                if self.stopped.is_none() {
                    self.raced = matches!(error, durably_journal::Error::OpenRaced(_));
                }
                self.stop(Stop::Halted(error.to_string()));
                Err(error.into())
            }
        }
    }

    /// [`Slot::remember`] for a step run under a timeout: `None` when it timed out, as
    /// `timed_out` describes.
    pub(crate) fn remember_timed<T>(
        &mut self,
        id: Uuid,
        outcome: Option<durably_journal::Result<T>>,
        timed_out: impl FnOnce() -> StepTimeout,
    ) -> Result<T> {
        let Some(outcome) = outcome else {
            let timeout = timed_out();
            let error = timeout.error(id);
            self.stop(Stop::TimedOut(timeout));
            return Err(error);
        };
        self.remember(outcome)
    }
}
