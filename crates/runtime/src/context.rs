//! [`WorkflowContext`]: what a workflow function drives its execution with. Its steps are the
//! journal's steps (recorded, replayed on resume, guarded steps under their policy), with names
//! in the runtime's namespace refused.

use std::sync::Arc;

use durably_journal::{Execution, Guarded, Policy, StepError, StepKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Mutex, Notify};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::names;
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
}

/// The execution a context drives, and why it stopped, if it did.
#[derive(Debug)]
pub(crate) struct Slot {
    /// `None` once the task has taken it back.
    pub(crate) execution: Option<Execution>,
    /// The first step error that stops the execution whatever the workflow does with it: any
    /// journal error but a step's own recorded failure (lock lost, non-determinism, an
    /// ambiguous step left to an operator, storage), as its message. The task ends the run on
    /// it instead of recording the workflow's result.
    pub(crate) halted: Option<String>,
    /// Whether the first write lost the deferred open's race ([`durably_journal::Error::OpenRaced`]):
    /// the execution is another run's, and this one wrote nothing.
    pub(crate) raced: bool,
}

impl WorkflowContext {
    /// A context for `execution` at `version`, the slot its task ends it from, and the signal
    /// of a park.
    pub(crate) fn new(
        execution: Execution,
        version: u32,
        waits: Arc<Waits>,
    ) -> (Self, Arc<Mutex<Slot>>, Arc<Notify>) {
        let id = execution.id();
        let is_resume = execution.is_resume();
        let slot = Arc::new(Mutex::new(Slot {
            execution: Some(execution),
            halted: None,
            raced: false,
        }));
        let parked = Arc::new(Notify::new());
        let context = Self {
            id,
            version,
            is_resume,
            slot: Arc::clone(&slot),
            waits,
            parked: Arc::clone(&parked),
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

    /// Runs a pure step (a computation or a read); see [`Execution::pure`].
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a name starting with `durably:`; the journal's step errors
    /// as [`Error::Journal`].
    pub async fn pure<T, F, Fut>(&mut self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, StepError>>,
    {
        names::check_step_name(name)?;
        let mut slot = self.slot.lock().await;
        let outcome = running(&mut slot, self.id)?.pure(name, f).await;
        slot.remember(outcome)
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
        names::check_step_name(name)?;
        let mut slot = self.slot.lock().await;
        let outcome = running(&mut slot, self.id)?.idempotent(name, f).await;
        slot.remember(outcome)
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
        names::check_step_name(name)?;
        let mut slot = self.slot.lock().await;
        let outcome = running(&mut slot, self.id)?.guarded(name, policy, f).await;
        slot.remember(outcome)
    }
}

/// The execution, or an error once its task has taken it back (a step called from a future
/// the workflow spawned and left running after it returned).
pub(crate) fn running(slot: &mut Slot, id: Uuid) -> Result<&mut Execution> {
    slot.execution
        .as_mut()
        .ok_or(Error::StepAfterEnd { execution_id: id })
}

/// Whether the execution's next step is recorded, so calling it replays its outcome and writes
/// nothing.
pub(crate) fn replays(execution: &Execution) -> bool {
    execution.next_seq() < execution.recorded_steps()
}

impl Slot {
    /// Passes a step's outcome on, remembering the first error that stops the execution.
    pub(crate) fn remember<T>(&mut self, outcome: durably_journal::Result<T>) -> Result<T> {
        match outcome {
            Ok(value) => Ok(value),
            Err(error @ durably_journal::Error::StepFailed { .. }) => Err(error.into()),
            Err(error) => {
                if self.halted.is_none() {
                    self.raced = matches!(error, durably_journal::Error::OpenRaced(_));
                    self.halted = Some(error.to_string());
                }
                Err(error.into())
            }
        }
    }
}
