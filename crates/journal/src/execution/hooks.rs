//! Hooks: the caller's own rows, written in the transaction of one of a step's rows. A guarded
//! step's hook goes with its intent ([`Execution::guarded_with`]); a pure or idempotent step's
//! with its result ([`Execution::step_with`]).
//!
//! Invariant: a hook runs only in the transaction that records its step for the first time,
//! and what it writes commits with that row or not at all. A replayed step runs no hook: what
//! it wrote committed with the step, on the run that recorded it.

use std::future::Future;

use chrono::{DateTime, Utc};
use durably_db::Connection;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::Execution;
use super::protocol::StepOutcome;
use crate::error::{Error, Result};
use crate::states::StepState;
use crate::step::{Effect, StepKey};

/// When [`Execution::step_with`] writes its step's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// The result, with the hook, may wait in the handle and commit with a later write of
    /// the same handle ([`Execution::defer_results`]); the hook must then not decline. A
    /// handle that does not defer results writes it at once, as `Now`.
    Deferred,
    /// The result and the hook commit before `step_with` returns (a message consumed, an
    /// event published: what other processes must see before the workflow goes on).
    Now,
}

/// The step a result hook is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRef {
    /// The execution.
    pub execution_id: Uuid,
    /// The step's sequence number.
    pub seq: u32,
    /// How the step ended: [`StepState::Completed`], or [`StepState::Failed`] when its closure
    /// returned an error, which is recorded (and replayed) like a result.
    pub state: StepState,
    /// The time the step's row is stamped with.
    pub now: DateTime<Utc>,
}

/// The caller's writes that go into a guarded step's intent transaction.
pub(super) type IntentHook = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

/// The caller's writes that go into a pure or idempotent step's result transaction.
pub(super) type ResultHook = Box<dyn FnOnce(&Connection, StepRef) -> Result<()> + Send>;

/// A hook, by the row it is written with.
pub(super) enum Hook {
    /// With a guarded step's intent.
    Intent(IntentHook),
    /// With a pure or idempotent step's result, written as `Timing` says.
    Result(ResultHook, Timing),
}

impl Execution {
    /// Runs a pure or idempotent step whose result commits in one transaction with `also`'s
    /// rows: `also(conn, step)` runs in the transaction that records the step. A step
    /// replayed from an earlier run returns its recorded outcome and does not run
    /// `also`. `also` also runs when the closure failed (the failure is recorded like a
    /// result); [`StepRef::state`] says which.
    ///
    /// If `also` returns [`Error::Aborted`] in a write made at once, nothing of the
    /// transaction is written (what the handle kept pending stays pending), the step is not
    /// recorded, and the handle stays usable: calling the step again runs it again at the
    /// same sequence number. That holds while no later step was called; with a later step
    /// already reserved (steps in parallel), the seq cannot be given back, and the handle is
    /// halted at it with [`Error::AbortedBehindLaterSteps`] instead. `also` runs first in that transaction, before the handle's
    /// pending rows and the step's own.
    ///
    /// # Errors
    /// As [`Execution::pure`]; `also`'s own error (then nothing was written; any error but
    /// `Aborted` halts the handle at this step, as a failed result write does); and
    /// [`Error::Refused`] for a guarded `effect`, before anything runs (a guarded step's rows
    /// go with its intent: [`Execution::guarded_with`]).
    pub fn step_with<T, F, Fut, A>(
        &self,
        name: &str,
        effect: Effect,
        timing: Timing,
        f: F,
        also: A,
    ) -> impl Future<Output = Result<T>> + use<T, F, Fut, A>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
        A: FnOnce(&Connection, StepRef) -> Result<()> + Send + 'static,
    {
        let reserved = if effect == Effect::Guarded {
            Err(guarded_step_with(name, self.id()))
        } else {
            self.reserve(name)
        };
        async move { reserved?.step_with(effect, timing, f, also).await }
    }
}

/// The refusal of a guarded step given to `step_with`.
pub(super) fn guarded_step_with(name: &str, execution_id: Uuid) -> Error {
    Error::Refused(format!(
        "step {name:?} of execution {execution_id} is guarded; step_with records pure and \
         idempotent steps, and a guarded step's rows go with its intent (guarded_with)"
    ))
}
