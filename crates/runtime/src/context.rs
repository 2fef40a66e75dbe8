//! [`WorkflowContext`]: what a workflow function drives its execution with. Its steps are the
//! journal's steps (recorded, replayed on resume, guarded steps under their policy), with names
//! in the runtime's namespace refused; none starts once the run was asked to stop.

use std::sync::Arc;

use durably_journal::{Execution, Guarded, Policy, StepError, StepKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Mutex, MutexGuard};
use uuid::Uuid;

use crate::cancel::{CancelSignal, RunWatch};
use crate::clock::{Clock, Sleep};
use crate::error::{Error, Result};
use crate::names;
use crate::steps::{StepBuilder, StepTimeout};

/// The handle a workflow function gets: its execution's id, version and steps. Steps are
/// numbered in call order; on a resumed execution, steps already recorded return their
/// recorded outcome without calling their closure.
#[derive(Debug)]
pub struct WorkflowContext {
    id: Uuid,
    version: u32,
    is_resume: bool,
    /// Shared with the task that runs the workflow, which takes the execution back to end it
    /// when the workflow's future returns, whether or not the workflow kept its context.
    slot: Arc<Mutex<Slot>>,
    /// Tripped when the run is asked to stop; checked before every step.
    signal: CancelSignal,
    /// The runtime's clock, which step timeouts run on.
    clock: Arc<dyn Clock>,
}

/// The execution a context drives, and why it stopped, if it did.
#[derive(Debug)]
pub(crate) struct Slot {
    /// `None` once the task has taken it back.
    pub(crate) execution: Option<Execution>,
    /// Why the run stopped taking steps, if it did: the first step error that stops the
    /// execution (any journal error but a step's own recorded failure), a cancel, or a step
    /// timeout.
    pub(crate) stopped: Option<Stop>,
}

impl WorkflowContext {
    /// A context for `execution` at `version`, stopped by `watch`'s signal and timed on its
    /// clock, and the slot its task ends it from.
    pub(crate) fn new(
        execution: Execution,
        version: u32,
        watch: &RunWatch,
    ) -> (Self, Arc<Mutex<Slot>>) {
        let id = execution.id();
        let is_resume = execution.is_resume();
        let slot = Arc::new(Mutex::new(Slot {
            execution: Some(execution),
            stopped: None,
        }));
        let context = Self {
            id,
            version,
            is_resume,
            slot: Arc::clone(&slot),
            signal: watch.signal().clone(),
            clock: Arc::clone(watch.clock()),
        };
        (context, slot)
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
    pub fn step<'a>(&'a mut self, name: &'a str) -> StepBuilder<'a> {
        StepBuilder::new(self, name)
    }

    /// Runs a pure step (a computation or a read); see [`Execution::pure`].
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a name starting with `durably:`, [`Error::Cancelled`] once
    /// the run was asked to stop (the step did not run); the journal's step errors as
    /// [`Error::Journal`].
    pub async fn pure<T, F, Fut>(&mut self, name: &str, f: F) -> Result<T>
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
    pub async fn idempotent<T, F, Fut>(&mut self, name: &str, f: F) -> Result<T>
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
    pub async fn guarded<T, F, Fut>(
        &mut self,
        name: &str,
        policy: Policy,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).guarded(policy, f).await
    }

    /// Checks `name`, takes the slot and checks that the run may take a step: not asked to
    /// stop. The step's sequence number is the execution's next.
    pub(crate) async fn begin_step(&self, name: &str) -> Result<(MutexGuard<'_, Slot>, u32)> {
        names::check_step_name(name)?;
        let mut slot = self.slot.lock().await;
        if let Some(reason) = self.signal.reason() {
            slot.stop(Stop::Cancelled(reason));
        }
        if let Some(Stop::Cancelled(reason)) = &slot.stopped {
            return Err(Error::Cancelled {
                execution_id: self.id,
                reason: reason.clone(),
            });
        }
        let seq = running(&mut slot, self.id)?.next_seq();
        Ok((slot, seq))
    }

    /// A timer of `timeout` on the run's clock, if there is a timeout.
    pub(crate) fn timer(&self, timeout: Option<std::time::Duration>) -> Option<Sleep<'_>> {
        let after = chrono::TimeDelta::from_std(timeout?).ok()?;
        let at = self.clock.now().checked_add_signed(after)?;
        Some(self.clock.sleep_until(at))
    }
}

/// The execution, or an error once its task has taken it back (a step called from a future
/// the workflow spawned and left running after it returned).
fn running(slot: &mut Slot, id: Uuid) -> Result<&mut Execution> {
    slot.execution
        .as_mut()
        .ok_or(Error::StepAfterEnd { execution_id: id })
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
}

impl Slot {
    /// Remembers why the run stopped; the first reason stays.
    pub(crate) fn stop(&mut self, stop: Stop) {
        if self.stopped.is_none() {
            self.stopped = Some(stop);
        }
    }

    /// The execution a step runs on.
    pub(crate) fn execution(&mut self, id: Uuid) -> Result<&mut Execution> {
        running(self, id)
    }

    /// Passes a step's outcome on (`None`: it timed out, as `timed_out` describes),
    /// remembering the first error that stops the execution.
    pub(crate) fn remember<T>(
        &mut self,
        id: Uuid,
        outcome: Option<durably_journal::Result<T>>,
        timed_out: impl FnOnce() -> StepTimeout,
    ) -> Result<T> {
        match outcome {
            Some(Ok(value)) => Ok(value),
            Some(Err(error @ durably_journal::Error::StepFailed { .. })) => Err(error.into()),
            Some(Err(durably_journal::Error::CancelRequested { reason, .. })) => {
                self.stop(Stop::Cancelled(reason.clone()));
                Err(Error::Cancelled {
                    execution_id: id,
                    reason,
                })
            }
            Some(Err(error)) => {
                self.stop(Stop::Halted(error.to_string()));
                Err(error.into())
            }
            None => {
                let timeout = timed_out();
                let error = timeout.error(id);
                self.stop(Stop::TimedOut(timeout));
                Err(error)
            }
        }
    }
}
