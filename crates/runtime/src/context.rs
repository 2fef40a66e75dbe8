//! [`WorkflowContext`]: what a workflow function drives its execution with. Its steps are the
//! journal's steps (recorded, replayed on resume, guarded steps under their policy), with names
//! in the runtime's namespace refused; none starts once the run was asked to stop.
//!
//! Steps take `&self` and may run at once (see the crate's "Parallel steps"): each step holds
//! a shared [`Lease`] on the execution for its whole duration, and the task that ends the run
//! takes the execution back exclusively once the workflow's future has ended. Every step
//! method reserves its seq (all of them, for a compound one) when it is called, before its
//! future is first polled.

use std::sync::{Arc, PoisonError};

use durably_journal::{Execution, Guarded, Policy, Reservation, StepError, StepKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, OwnedRwLockReadGuard, RwLock};
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
    pub(crate) slot: Arc<Slot>,
    /// The clock, the client and the parking threshold of timers and receives.
    pub(crate) waits: Arc<Waits>,
    /// Notified once a wait has parked the execution: the task then drops the workflow's
    /// future, which never runs again in this process.
    pub(crate) parked: Arc<Notify>,
    /// Tripped when the run is asked to stop (the slot holds it too, to check every step).
    signal: CancelSignal,
}

/// A step's share of the execution, held for the step's whole duration: the task's end waits
/// for every lease to go before it takes the execution back.
pub(crate) type Lease = OwnedRwLockReadGuard<Option<Execution>, Execution>;

/// The execution a context drives, and why it stopped, if it did.
#[derive(Debug)]
pub(crate) struct Slot {
    /// `None` once the task has taken it back (with the write lock, once no step holds a
    /// [`Lease`]).
    pub(crate) execution: Arc<RwLock<Option<Execution>>>,
    /// Why the run stopped. Never held across an `.await`.
    ending: std::sync::Mutex<Ending>,
    /// Tripped when the run is asked to stop: no step starts after it.
    signal: CancelSignal,
}

/// Why a run stopped taking steps, if it did.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    /// The first step error that stops the execution (any journal error but a step's own
    /// recorded failure), a cancel, or a step timeout. The task ends the run on it instead
    /// of recording the workflow's result.
    pub(crate) stopped: Option<Stop>,
    /// Whether the first write lost the deferred open's race
    /// ([`durably_journal::Error::OpenRaced`]): the execution is another run's, and this one
    /// wrote nothing.
    pub(crate) raced: bool,
}

impl WorkflowContext {
    /// A context for `execution` at `version`, stopped by `signal`, the slot its task ends it
    /// from, and the signal of a park.
    pub(crate) fn new(
        execution: Execution,
        version: u32,
        waits: Arc<Waits>,
        signal: CancelSignal,
    ) -> (Self, Arc<Slot>, Arc<Notify>) {
        let id = execution.id();
        let is_resume = execution.is_resume();
        let slot = Arc::new(Slot {
            execution: Arc::new(RwLock::new(Some(execution))),
            ending: std::sync::Mutex::default(),
            signal: signal.clone(),
        });
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

    /// Runs a pure step (a computation or a read); see [`Execution::pure`]. Its seq is
    /// reserved when this is called.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a name starting with `durably:`, [`Error::Cancelled`] once
    /// the run was asked to stop (the step did not run); the journal's step errors as
    /// [`Error::Journal`].
    pub fn pure<'a, T, F, Fut>(
        &'a self,
        name: &'a str,
        f: F,
    ) -> impl Future<Output = Result<T>> + use<'a, T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).pure(f)
    }

    /// Runs an idempotent step with its [`StepKey`]; see [`Execution::idempotent`].
    ///
    /// # Errors
    /// As [`WorkflowContext::pure`].
    pub fn idempotent<'a, T, F, Fut>(
        &'a self,
        name: &'a str,
        f: F,
    ) -> impl Future<Output = Result<T>> + use<'a, T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).idempotent(f)
    }

    /// Runs a guarded step: intent before the closure, result after, `policy` for a crash in
    /// between; see [`Execution::guarded`].
    ///
    /// # Errors
    /// As [`WorkflowContext::pure`], plus the journal's `Ambiguous` and `ProbeFailed`.
    pub fn guarded<'a, T, F, Fut>(
        &'a self,
        name: &'a str,
        policy: Policy,
        f: F,
    ) -> impl Future<Output = Result<Guarded<T>>> + use<'a, T, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        self.step(name).guarded(policy, f)
    }

    /// Checks `name` and reserves a step's seq now, with a lease on the execution for the
    /// step's duration; refused once the run was asked to stop or has ended.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::Cancelled`], [`Error::StepAfterEnd`], or the
    /// journal's refusal (a halted handle), remembered so the run ends on it.
    pub(crate) fn begin_step(&self, name: &str) -> Result<(Lease, Reservation)> {
        names::check_step_name(name)?;
        self.begin_step_unchecked(name)
    }

    /// [`WorkflowContext::begin_step`] for a step of the runtime's own namespace
    /// (`durably:…`), whose name its caller built.
    ///
    /// # Errors
    /// As [`WorkflowContext::begin_step`], but for the name check.
    pub(crate) fn begin_step_unchecked(&self, name: &str) -> Result<(Lease, Reservation)> {
        let lease = self.lease()?;
        let reserved = lease.reserve(name);
        let reserved = self.slot.remember(reserved)?;
        Ok((lease, reserved))
    }

    /// A share of the execution for a step: refused once the run was asked to stop (no step
    /// starts after that), or once its task has taken it back (a step called from a future
    /// the workflow spawned and left running after it returned).
    ///
    /// # Errors
    /// [`Error::Cancelled`], [`Error::StepAfterEnd`].
    pub(crate) fn lease(&self) -> Result<Lease> {
        self.slot.refuse_if_cancelled(self.id)?;
        let after_end = || Error::StepAfterEnd {
            execution_id: self.id,
        };
        let shared = Arc::clone(&self.slot.execution)
            .try_read_owned()
            .map_err(|_| after_end())?;
        OwnedRwLockReadGuard::try_map(shared, Option::as_ref).map_err(|_| after_end())
    }

    /// A timer of `timeout` on the run's clock, if there is a timeout.
    pub(crate) fn timer(&self, timeout: Option<std::time::Duration>) -> Option<Sleep<'_>> {
        let after = chrono::TimeDelta::from_std(timeout?).ok()?;
        let at = durably_lock::Clock::now(self.waits.clock.as_ref()).checked_add_signed(after)?;
        Some(self.waits.clock.sleep_until(at))
    }
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

    fn ending(&self) -> std::sync::MutexGuard<'_, Ending> {
        self.ending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the run stopped, taken by the task that ends it.
    pub(crate) fn take_ending(&self) -> Ending {
        std::mem::take(&mut *self.ending())
    }

    /// Remembers why the run stopped; the first reason stays.
    pub(crate) fn stop(&self, stop: Stop) {
        let mut ending = self.ending();
        if ending.stopped.is_none() {
            ending.stopped = Some(stop);
        }
    }

    /// [`Error::Cancelled`] once the run was asked to stop: no step starts after that.
    fn refuse_if_cancelled(&self, id: Uuid) -> Result<()> {
        if let Some(reason) = self.signal.reason() {
            self.stop(Stop::Cancelled(reason));
        }
        match &self.ending().stopped {
            Some(Stop::Cancelled(reason)) => Err(Error::Cancelled {
                execution_id: id,
                reason: reason.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Passes a step's outcome on, remembering the first error that stops the execution. A
    /// write refused by a cancel request stops the run as the request says.
    pub(crate) fn remember<T>(&self, outcome: durably_journal::Result<T>) -> Result<T> {
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
                let mut ending = self.ending();
                if ending.stopped.is_none() {
                    ending.raced = matches!(error, durably_journal::Error::OpenRaced(_));
                    ending.stopped = Some(Stop::Halted(error.to_string()));
                }
                Err(error.into())
            }
        }
    }

    /// [`Slot::remember`] for a step run under a timeout: `None` when it timed out, as
    /// `timed_out` describes.
    pub(crate) fn remember_timed<T>(
        &self,
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
