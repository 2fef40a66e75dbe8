//! Parallel steps: what the steps of one handle share, and the [`Reservation`] that gives each
//! step its place in call order.
//!
//! Invariant: a step's seq is reserved when the step is CALLED, synchronously, never when its
//! future is first polled: the n-th step call of a run gets seq n, whatever order the steps'
//! futures are polled in or finish in. The reservation takes the step's record from the replay
//! window at the same moment, so a recorded step replays at once even while its siblings still
//! run.
//!
//! Invariant: the handle's per-step state ([`State`]) sits behind one `std::sync::Mutex`, which
//! is only ever held for a few statements and never across an `.await`.
//!
//! A reservation that is dropped before its step has an outcome (a step future dropped half
//! way: a timeout, a `select!` that lost) halts the handle at its seq: the step's state is
//! unknown, and the handle must not go on. Its siblings' recorded results stay recorded.
//!
//! Because steps finish in any order, the journal may hold a later step's row without an
//! earlier one's (a guarded step's intent commits before its closure runs, while an earlier
//! sibling still runs; a crash then leaves a gap). A gap is a step that had no outcome yet, and
//! replay runs it again, as after any crash.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use durably_db::{Connection, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;
use uuid::Uuid;

use super::fence::Fence;
use super::hooks::{Hook, IntentHook, StepRef, Timing};
use super::protocol::{StepCall, StepOutcome, step_end};
use crate::config::StepSettings;
use crate::error::{Error, Result};
use crate::replay::{RecordedStep, Replay};
use crate::states::{Status, StepState};
use crate::step::{Effect, Guarded, Policy, StepKey};
use crate::telemetry::{self, RunEnd, StepRecord};

/// What every step of one handle shares: the fence it writes with, its settings, and the
/// per-step state behind a mutex.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(super) fence: Arc<Fence>,
    pub(super) settings: StepSettings,
    pub(super) id: Uuid,
    /// The run's `durably.execution` span, the parent of every step's span. It closes once
    /// the handle and every step future are gone.
    pub(super) span: tracing::Span,
    state: Mutex<State>,
}

/// The state the steps of a handle change. Never held across an `.await`.
#[derive(Debug)]
pub(super) struct State {
    // Boxed: the replay window's state is a third of the handle.
    pub(super) replay: Box<Replay>,
    /// The seq the next step call reserves.
    pub(super) next_seq: u32,
    /// Where the handle stopped: the lowest seq of a step that ended in an error that stops
    /// the execution, or whose future was dropped before it finished.
    pub(super) halted_at: Option<u32>,
    /// The seqs reserved whose steps have no outcome yet.
    in_flight: BTreeSet<u32>,
    /// Write-behind ([`super::Execution::defer_results`]): results wait in the fence's carry.
    pub(super) deferring: bool,
    /// Set by [`super::Execution::release_to`]: the status the execution was parked in. The
    /// handle then writes nothing more.
    pub(super) released_to: Option<Status>,
    /// Whether the handle ended the execution's run (finalized or released): dropping it then
    /// releases nothing.
    pub(super) finalized: bool,
}

impl State {
    /// Halts the handle at `seq`, keeping the lowest seq it was halted at.
    fn halt_at(&mut self, seq: u32) {
        self.halted_at = Some(self.halted_at.map_or(seq, |halted| halted.min(seq)));
    }
}

impl Shared {
    pub(super) fn new(
        fence: Arc<Fence>,
        settings: StepSettings,
        id: Uuid,
        replay: Replay,
        span: tracing::Span,
    ) -> Self {
        Self {
            fence,
            settings,
            id,
            span,
            state: Mutex::new(State {
                replay: Box::new(replay),
                next_seq: 0,
                halted_at: None,
                in_flight: BTreeSet::new(),
                deferring: false,
                released_to: None,
                finalized: false,
            }),
        }
    }

    /// Records how the run ended, on its span and in the metrics.
    pub(super) fn ended(&self, end: RunEnd) {
        self.span.record("status", end.as_str());
        telemetry::run_ended(end);
    }

    /// The per-step state, for a few statements.
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Halts the handle at `seq`, keeping the lowest seq it was halted at.
    pub(super) fn halt_at(&self, seq: u32) {
        self.state().halt_at(seq);
    }

    /// Where the handle cannot go on from, if anywhere: the seq it halted at, else the lowest
    /// seq still in flight (a step future kept alive past the handle's end).
    pub(super) fn stopped_at(&self) -> Option<u32> {
        let state = self.state();
        state.halted_at.or_else(|| state.in_flight.first().copied())
    }

    /// [`Error::Refused`] once the handle was released: the execution is parked, and only a
    /// claim reopens it.
    pub(super) fn refuse_if_released(&self) -> Result<()> {
        match self.state().released_to {
            None => Ok(()),
            Some(status) => Err(Error::Refused(format!(
                "execution {} was released {status}; this handle writes nothing more",
                self.id
            ))),
        }
    }

    /// [`Error::Halted`] when the handle is halted: a step not yet started does not start.
    pub(super) fn refuse_if_halted(&self) -> Result<()> {
        match self.state().halted_at {
            None => Ok(()),
            Some(seq) => Err(Error::Halted {
                execution_id: self.id,
                seq,
            }),
        }
    }

    /// One past the highest seq recorded when the handle opened the execution.
    pub(super) fn recorded_steps(&self) -> u32 {
        self.state().replay.recorded()
    }

    /// How many steps are reserved and have no outcome yet.
    pub(super) fn in_flight(&self) -> usize {
        self.state().in_flight.len()
    }

    /// Reserves the next seq for a step named `name`, taking its record from the replay window.
    fn reserve(self: &Arc<Self>, name: &str) -> Result<Reservation> {
        self.refuse_if_released()?;
        let mut state = self.state();
        if let Some(seq) = state.halted_at {
            return Err(Error::Halted {
                execution_id: self.id,
                seq,
            });
        }
        let seq = state.next_seq;
        let recorded = match state.replay.take(seq) {
            Ok(recorded) => recorded,
            Err(error) => {
                state.halted_at = Some(seq);
                return Err(error);
            }
        };
        state.next_seq = seq.saturating_add(1);
        state.in_flight.insert(seq);
        drop(state);
        let depends_on = self.fence.unconfirmed();
        Ok(Reservation {
            shared: Arc::clone(self),
            seq,
            name: name.to_owned(),
            recorded,
            depends_on,
            settled: false,
        })
    }

    /// Accounts for the outcome of step `seq`: it leaves the steps in flight; an error that
    /// stops the execution halts the handle at it; a hook's [`Error::Aborted`] gives the seq
    /// back when no later step was reserved, and otherwise halts the handle at it with
    /// [`Error::AbortedBehindLaterSteps`].
    fn settle<T>(&self, seq: u32, result: Result<T>) -> Result<T> {
        let mut state = self.state();
        state.in_flight.remove(&seq);
        match result {
            Ok(value) => Ok(value),
            Err(error @ Error::StepFailed { .. }) => Err(error),
            Err(Error::Aborted(reason)) if state.next_seq == seq.saturating_add(1) => {
                // Nothing of the step was written and no later step holds a seq: the same
                // step may be called again at the same seq.
                state.next_seq = seq;
                Err(Error::Aborted(reason))
            }
            Err(Error::Aborted(reason)) => {
                state.halt_at(seq);
                Err(Error::AbortedBehindLaterSteps {
                    execution_id: self.id,
                    seq,
                    reason,
                })
            }
            Err(error) => {
                state.halt_at(seq);
                Err(error)
            }
        }
    }

    /// W1 with steps in flight: every outcome the caller had when it called a step is durable
    /// before the step's effect runs. The flush before the closure (or the guarded step's
    /// intent) writes what is still pending; an outcome that a sibling's write took along, and
    /// whose commit that sibling has not confirmed yet, is looked up in the journal. One that
    /// is not there was lost with a failed write: the handle halts there, and the effect does
    /// not run.
    pub(super) async fn confirm_durable(&self, depends_on: &[u32]) -> Result<()> {
        if !self.state().deferring {
            // Written at once: a step returns only once its outcome is durable.
            return Ok(());
        }
        let unconfirmed = self.fence.still_unconfirmed(depends_on);
        if unconfirmed.is_empty() {
            return Ok(());
        }
        // Looked up by the writer, which answers requests in order: the sibling's write, made
        // before this step was called, has committed or failed by then.
        let missing = self
            .fence
            .write(move |conn, resource, _| {
                first_missing_outcome(conn, resource, &unconfirmed).map_err(Error::from)
            })
            .await?;
        match missing {
            None => Ok(()),
            Some(seq) => {
                self.halt_at(seq);
                Err(Error::Halted {
                    execution_id: self.id,
                    seq,
                })
            }
        }
    }
}

/// The first of `seqs` whose outcome is not in the journal: no row, or a guarded step's row
/// still in the intent state.
fn first_missing_outcome(
    conn: &Connection,
    resource: &str,
    seqs: &[u32],
) -> durably_db::Result<Option<u32>> {
    let mut statement = conn.prepare_cached(
        "SELECT count(*) FROM steps WHERE execution_id = ?1 AND seq = ?2 AND state != 'intent'",
    )?;
    for &seq in seqs {
        let found: i64 = statement.query_row(params![resource, seq], |row| row.get(0))?;
        if found == 0 {
            return Ok(Some(seq));
        }
    }
    Ok(None)
}

/// A step's place in its execution, reserved when the step was called
/// ([`super::Execution::reserve`]), with its record when the step is recorded. Run it with one
/// of its effect methods; dropping it unrun, or dropping the future of its effect method
/// before that finished, halts the handle at its seq.
///
/// Compound operations that are several steps reserve all their seqs first, so that steps
/// called in parallel with them cannot take seqs in between by timing.
#[derive(Debug)]
#[must_use = "a reserved step that is dropped unrun halts its handle"]
pub struct Reservation {
    shared: Arc<Shared>,
    seq: u32,
    name: String,
    recorded: Option<RecordedStep>,
    /// The outcomes pending (not yet confirmed durable) when the step was called: W1 makes
    /// them durable before an idempotent or guarded effect runs.
    depends_on: Vec<u32>,
    /// Whether the step's outcome was accounted for.
    settled: bool,
}

impl Reservation {
    /// The step's sequence number.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Whether the step is recorded, so that running it replays its outcome and writes nothing.
    pub fn replays(&self) -> bool {
        self.recorded.is_some()
    }

    /// The recorded result of a step that replays, decoded as `T`; `None` when the step is not
    /// recorded, has no result, or its result is not a `T`. A compound operation reads it at
    /// call time to name the steps it reserves after this one, before anything runs.
    pub fn recorded_result<T: DeserializeOwned>(&self) -> Option<T> {
        self.recorded.as_ref()?.result.as_ref()?.decode().ok()
    }

    /// Runs it as a pure step; see [`super::Execution::pure`].
    ///
    /// # Errors
    /// As [`super::Execution::pure`].
    pub async fn pure<T, F, Fut>(self, mut f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let id = self.shared.id;
        let outcome = self.run(Effect::Pure, None, None, |_| f()).await?;
        never_skipped(id, outcome)
    }

    /// Runs it as an idempotent step; see [`super::Execution::idempotent`].
    ///
    /// # Errors
    /// As [`super::Execution::idempotent`].
    pub async fn idempotent<T, F, Fut>(self, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let id = self.shared.id;
        let outcome = self.run(Effect::Idempotent, None, None, f).await?;
        never_skipped(id, outcome)
    }

    /// Runs it as a guarded step; see [`super::Execution::guarded`].
    ///
    /// # Errors
    /// As [`super::Execution::guarded`].
    pub async fn guarded<T, F, Fut>(self, policy: Policy, f: F) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        self.run(Effect::Guarded, Some(&policy), None, f).await
    }

    /// Runs it as a guarded step with the caller's rows in its intent's transaction; see
    /// [`super::Execution::guarded_with`].
    ///
    /// # Errors
    /// As [`super::Execution::guarded_with`].
    pub async fn guarded_with<T, F, Fut, W>(
        self,
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
        let hook = Some(Hook::Intent(with_intent));
        self.run(Effect::Guarded, Some(&policy), hook, f).await
    }

    /// Runs it as a pure or idempotent step whose result commits with `also`'s rows; see
    /// [`super::Execution::step_with`].
    ///
    /// # Errors
    /// As [`super::Execution::step_with`].
    pub async fn step_with<T, F, Fut, A>(
        self,
        effect: Effect,
        timing: Timing,
        f: F,
        also: A,
    ) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
        A: FnOnce(&Connection, StepRef) -> Result<()> + Send + 'static,
    {
        let id = self.shared.id;
        if effect == Effect::Guarded {
            let name = self.name.clone();
            // Nothing ran: the seq is given back, or the handle halts there.
            let _ = self.give_back("guarded");
            return Err(super::hooks::guarded_step_with(&name, id));
        }
        let hook = Some(Hook::Result(Box::new(also), timing));
        let outcome = self.run(effect, None, hook, f).await?;
        never_skipped(id, outcome)
    }

    /// Gives the seq back unused, for a step its caller refused before running it (bad
    /// input): nothing is written, and the next step takes this seq when it is still the last
    /// one reserved, as after a hook's declined write. Behind a later reserved step the seq
    /// cannot be given back, and the handle halts at it.
    ///
    /// # Errors
    /// [`Error::AbortedBehindLaterSteps`] when the handle halted.
    pub fn give_back(mut self, reason: &'static str) -> Result<()> {
        self.settled = true;
        match self
            .shared
            .settle::<()>(self.seq, Err(Error::Aborted(reason)))
        {
            Err(Error::Aborted(_)) => Ok(()),
            other => other,
        }
    }

    /// Runs the step: replays it when it is recorded, runs it otherwise, then accounts for
    /// its outcome.
    async fn run<T, F, Fut>(
        mut self,
        effect: Effect,
        policy: Option<&Policy>,
        hook: Option<Hook>,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let shared = Arc::clone(&self.shared);
        let seq = self.seq;
        let call = StepCall::new(seq, &self.name, effect, policy, shared.id, &self.depends_on);
        let replayed = self
            .recorded
            .as_ref()
            .is_some_and(|recorded| recorded.state != StepState::Intent);
        let span = tracing::info_span!(
            parent: &shared.span,
            telemetry::SPAN_STEP,
            execution_id = %shared.id,
            seq,
            name = self.name.as_str(),
            effect = effect.as_str(),
            policy = policy.map(|policy| policy.kind().as_str()),
            attempt = tracing::field::Empty,
            replayed,
            outcome = tracing::field::Empty,
        );
        let record = StepRecord::new(span.clone(), effect, replayed);
        let result = match self.recorded.take() {
            Some(recorded) => {
                shared
                    .replay_step(&call, recorded, f)
                    .instrument(span.clone())
                    .await
            }
            None => {
                shared
                    .run_fresh(&call, hook, f)
                    .instrument(span.clone())
                    .await
            }
        };
        record.end(step_end(&result));
        self.settled = true;
        shared.settle(seq, result)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            let mut state = self.shared.state();
            state.in_flight.remove(&self.seq);
            state.halt_at(self.seq);
        }
    }
}

fn never_skipped<T>(id: Uuid, outcome: Guarded<T>) -> Result<T> {
    match outcome {
        Guarded::Done(value) => Ok(value),
        Guarded::Skipped(skipped) => Err(Error::Inconsistent(format!(
            "step {} of execution {id} is recorded as skipped but is not guarded",
            skipped.seq
        ))),
    }
}

impl super::Execution {
    /// Reserves the next step's seq now, in call order, for a step named `name`, and takes its
    /// record when it is recorded; run it with one of the [`Reservation`]'s effect methods.
    /// The step methods of the handle reserve this way when they are called, so
    /// `join!(h.pure("a", ..), h.pure("b", ..))` always gives `a` seq n and `b` seq n + 1.
    ///
    /// # Errors
    /// [`Error::Refused`] once the handle was released, [`Error::Halted`] once it halted, or
    /// the replay window's error (a damaged row, a storage error), which halts it.
    pub fn reserve(&self, name: &str) -> Result<Reservation> {
        self.shared.reserve(name)
    }

    /// How many steps of this handle are called and have no outcome yet.
    pub fn steps_in_flight(&self) -> usize {
        self.shared.in_flight()
    }
}
