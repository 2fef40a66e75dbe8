//! [`Scheduler`]: registered jobs, and firing one slot through the journal.
//!
//! Invariant: a fire's body runs only inside the execution named by its fire id, opened
//! exclusively through the journal, as one guarded step per attempt. Exactly-once across
//! processes rests on that: the id is the same everywhere, a live holder makes every other
//! opener get `Locked`, and a finished execution reopens as its recorded outcome.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use durably_journal::{
    Error as JournalError, Guarded, Journal, Opened, Result as JournalResult, Status, StepError,
};
use durably_lock::{Clock, format_timestamp};
use rusqlite::Connection;
use serde_json::json;
use tracing::Instrument;
use uuid::Uuid;

use crate::catch_up::Overlap;
use crate::error::{Error, Result};
use crate::fire_id::fire_id;
use crate::job::{FireContext, Job, ShutdownSignal};
use crate::job_id::JobId;
use crate::ledger::{self, FireRegistration, Registered};
use crate::outcome::{FireOutcome, FireState, Registration};
use crate::slot::Slot;

/// Default longest sleep of the loop between two passes. The loop sleeps until the next due
/// slot but wakes at least this often, so a wall clock that jumps is noticed within it.
pub const TICK_MAX_DEFAULT: Duration = Duration::from_secs(1);

/// Default time [`Scheduler::run`] lets running fires finish after shutdown is asked for.
/// Fires still running after it are dropped and stay resumable.
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(30);

/// The `kind` of every fire's execution in the journal.
pub const EXECUTION_KIND: &str = "scheduled";

/// The name of the guarded step each attempt of a fire body runs as.
pub const FIRE_STEP_NAME: &str = "fire";

/// Registered jobs over one journal, and the fire loop. Cheap to clone; clones share jobs.
///
/// Any number of schedulers, in one process or many, may share a journal file: each slot of a
/// job fires once among them (see [`Scheduler::fire`]).
#[derive(Debug, Clone)]
pub struct Scheduler {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) journal: Journal,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jobs: Mutex<BTreeMap<JobId, Job>>,
    /// Fires this scheduler is driving now (registered and not yet returned), by job and slot,
    /// each with how many drivers have entered it (an explicit fire may race the loop).
    pub(crate) in_flight: Mutex<HashMap<(JobId, Slot), usize>>,
    /// Where each job's recovery scan resumes: the last slot (epoch ms) of its previous page.
    pub(crate) recovery_cursor: Mutex<HashMap<JobId, i64>>,
    /// Set while [`Scheduler::run`] shuts down: no new fire or attempt starts.
    pub(crate) shutdown: ShutdownSignal,
    pub(crate) tick_max: Duration,
    pub(crate) shutdown_grace: Duration,
}

/// Configures a [`Scheduler`].
#[derive(Debug)]
pub struct SchedulerBuilder {
    journal: Journal,
    clock: Option<Arc<dyn Clock>>,
    tick_max: Duration,
    shutdown_grace: Duration,
}

impl SchedulerBuilder {
    /// The clock slots are computed from. Default: the journal's own clock (the one given to
    /// `JournalBuilder::clock`, or the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The longest sleep between two loop passes. Default [`TICK_MAX_DEFAULT`]; at least 1 ms.
    #[must_use]
    pub fn tick_max(mut self, tick_max: Duration) -> Self {
        self.tick_max = tick_max.max(Duration::from_millis(1));
        self
    }

    /// How long [`Scheduler::run`] waits for running fires after shutdown. Default
    /// [`SHUTDOWN_GRACE_DEFAULT`].
    #[must_use]
    pub fn shutdown_grace(mut self, shutdown_grace: Duration) -> Self {
        self.shutdown_grace = shutdown_grace;
        self
    }

    /// Builds the scheduler. It has no jobs until [`Scheduler::register`].
    pub fn build(self) -> Scheduler {
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::clone(self.journal.locker().judge().clock()));
        Scheduler {
            inner: Arc::new(Inner {
                journal: self.journal,
                clock,
                jobs: Mutex::new(BTreeMap::new()),
                in_flight: Mutex::new(HashMap::new()),
                recovery_cursor: Mutex::new(HashMap::new()),
                shutdown: ShutdownSignal::default(),
                tick_max: self.tick_max,
                shutdown_grace: self.shutdown_grace,
            }),
        }
    }
}

/// Marks one fire as driven by this scheduler until dropped.
pub(crate) struct InFlight {
    inner: Arc<Inner>,
    key: (JobId, Slot),
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.inner.in_flight);
        if let Some(count) = in_flight.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(&self.key);
            }
        }
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical section
/// here is a single insert, remove or lookup).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Scheduler {
    /// A scheduler over `journal`, using the journal's clock.
    pub fn new(journal: Journal) -> Self {
        Self::builder(journal).build()
    }

    /// Starts configuring a scheduler over `journal`.
    pub fn builder(journal: Journal) -> SchedulerBuilder {
        SchedulerBuilder {
            journal,
            clock: None,
            tick_max: TICK_MAX_DEFAULT,
            shutdown_grace: SHUTDOWN_GRACE_DEFAULT,
        }
    }

    /// The journal this scheduler fires through.
    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// The registered job ids.
    pub fn job_ids(&self) -> Vec<JobId> {
        lock(&self.inner.jobs).keys().cloned().collect()
    }

    /// Registers `job` with this scheduler and records it in the `jobs` table.
    ///
    /// A job already in the table with another definition (schedule, policies, retries; see
    /// [`Job::definition`]) is updated and reported as [`Registration::Changed`], with a
    /// `scheduler_job_redefined` audit event. Its high-water mark is kept, so no slot up to it
    /// is fired again, even if the new schedule has slots there; fires already registered keep
    /// their execution ids and, if unfinished, are resumed with the new body and policies;
    /// later slots follow the new schedule. Registering a job again in the same scheduler
    /// replaces it.
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] if the `jobs` row cannot be written. Invalid definitions are refused
    /// earlier, by [`JobBuilder::build`](crate::JobBuilder::build).
    pub async fn register(&self, job: Job) -> Result<Registration> {
        let (id, definition, hash) = (job.id.to_string(), job.definition(), job.definition_hash());
        let now = self.now_text();
        let stored = definition.clone();
        let previous = self
            .inner
            .journal
            .write(move |conn| ledger::upsert_job(conn, &id, &stored, &hash, &now))
            .await?;
        let registration = match previous {
            None => Registration::New,
            Some(old) => {
                let last_handled = old.last_slot_ms.and_then(|ms| Slot::from_millis(ms).ok());
                if old.definition_hash == job.definition_hash() {
                    Registration::Unchanged { last_handled }
                } else {
                    tracing::info!(job = %job.id, "job definition changed");
                    Registration::Changed {
                        previous_definition: old.definition,
                        last_handled,
                    }
                }
            }
        };
        lock(&self.inner.jobs).insert(job.id.clone(), job);
        Ok(registration)
    }

    /// The newest slot of `job` already handled (fired or recorded as skipped) by any
    /// scheduler sharing this file.
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] on a storage error.
    pub fn high_water_mark(&self, job: &JobId) -> Result<Option<Slot>> {
        let mark = self
            .inner
            .journal
            .read(|conn| ledger::high_water_mark(conn, job.as_str()))?;
        Ok(mark.and_then(|ms| Slot::from_millis(ms).ok()))
    }

    /// The state and attempts of the fire of `job` at `slot` in the ledger, if registered.
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] on a storage error, [`Error::Ledger`] for an unreadable row.
    pub fn fire_state(&self, job: &JobId, slot: Slot) -> Result<Option<(FireState, u32)>> {
        Ok(self
            .inner
            .journal
            .read(|conn| ledger::fire_state(conn, job.as_str(), slot))?)
    }

    /// Fires `job` at `slot` once: registers the fire in the ledger, opens its execution (the
    /// fire id) exclusively, and runs the body as one guarded step per attempt under the job's
    /// ambiguity policy, retrying a failing body up to the job's `attempts_max` with backoff.
    ///
    /// - Already finished (here or in another process): [`FireOutcome::Replayed`], nothing runs.
    /// - Held by a live process: [`FireOutcome::LockedBy`], nothing runs.
    /// - Under [`Overlap::Skip`], another fire of the job still running: the slot is recorded
    ///   as skipped, [`FireOutcome::Skipped`].
    /// - Left running by a crash: resumed; a body caught in the ambiguous window is handled by
    ///   the job's policy (Skip: recorded skipped, not re-run; Retry: re-run with the same
    ///   idempotency key).
    ///
    /// An explicit fire may name a slot at or before the high-water mark (a manual backfill);
    /// the loop never does. It may name the upcoming slot (the first after now) early, but no
    /// later one. It raises the mark only when that hides no slot from the loop: to the first
    /// slot after the mark, or, before any slot was handled, to a slot at or before now.
    /// Otherwise the mark stays, the loop still decides every slot after it (fired, or
    /// recorded as skipped), and a slot an explicit fire already ran is replayed, not re-run.
    ///
    /// # Errors
    ///
    /// - [`Error::UnknownJob`] if `job` is not registered here.
    /// - [`Error::NotASlot`] if `slot` is not on the job's schedule.
    /// - [`Error::SlotInFuture`] if `slot` lies after the first slot after the scheduler's
    ///   clock.
    /// - [`Error::ShuttingDown`] if [`Scheduler::run`] is shutting down before a retry; the
    ///   fire stays unfinished and the next pass resumes it.
    /// - [`Error::Journal`] on a storage error, or `Ambiguous` when the body was left
    ///   ambiguous and the policy is `Fail` (the fire stays running until `durably resolve`).
    pub async fn fire(&self, job: &JobId, slot: Slot) -> Result<FireOutcome> {
        let job = self.job(job)?;
        if job.schedule.latest_at_or_before(slot)? != Some(slot) {
            return Err(Error::NotASlot {
                job: job.id.to_string(),
                slot: slot.to_rfc3339(),
            });
        }
        let now = self.inner.clock.now();
        let upcoming = job.schedule.next_after(Slot::from_datetime(now)?)?;
        if slot.as_millis() > now.timestamp_millis() && Some(slot) != upcoming {
            return Err(Error::SlotInFuture {
                job: job.id.to_string(),
                slot: slot.to_rfc3339(),
                now: format_timestamp(now),
            });
        }
        let registered = self.register_fire(&job, slot, false).await?;
        let guard = self.enter(&job.id, slot);
        match early_outcome(&job, slot, &registered) {
            Some(outcome) => Ok(outcome),
            None => self.drive(&job, slot, guard).await,
        }
    }

    pub(crate) fn job(&self, job: &JobId) -> Result<Job> {
        lock(&self.inner.jobs)
            .get(job)
            .cloned()
            .ok_or_else(|| Error::UnknownJob {
                job: job.to_string(),
            })
    }

    pub(crate) fn now_text(&self) -> String {
        format_timestamp(self.inner.clock.now())
    }

    /// Whether this scheduler is driving a fire of `job` other than at `except`.
    pub(crate) fn running_here(&self, job: &JobId, except: Option<Slot>) -> bool {
        lock(&self.inner.in_flight)
            .keys()
            .any(|(running, slot)| running == job && Some(*slot) != except)
    }

    pub(crate) fn is_in_flight(&self, job: &JobId, slot: Slot) -> bool {
        lock(&self.inner.in_flight).contains_key(&(job.clone(), slot))
    }

    pub(crate) fn enter(&self, job: &JobId, slot: Slot) -> InFlight {
        let key = (job.clone(), slot);
        *lock(&self.inner.in_flight).entry(key.clone()).or_insert(0) += 1;
        InFlight {
            inner: Arc::clone(&self.inner),
            key,
        }
    }

    /// Registers the fire in one writer transaction (see [`ledger::register_fire`]).
    pub(crate) async fn register_fire(
        &self,
        job: &Job,
        slot: Slot,
        above_mark_only: bool,
    ) -> Result<Registered> {
        let overlap_skip =
            (job.overlap == Overlap::Skip).then(|| self.running_here(&job.id, Some(slot)));
        let judge = self.inner.journal.locker().judge().clone();
        let (id, now) = (job.id.to_string(), self.now_text());
        let execution_id = fire_id(&job.id, slot).to_string();
        let mark_after = match Slot::from_millis(slot.as_millis() - 1) {
            Ok(before) => job.schedule.latest_at_or_before(before)?,
            Err(_) => None,
        }
        .map(Slot::as_millis);
        let raise_from_unset = slot.as_millis() <= self.inner.clock.now().timestamp_millis();
        let registered = self
            .inner
            .journal
            .write(move |conn| {
                let fire = FireRegistration {
                    job: &id,
                    slot,
                    execution_id: &execution_id,
                    now: &now,
                    above_mark_only,
                    overlap_skip,
                    mark_after,
                    raise_from_unset,
                };
                ledger::register_fire(conn, &judge, &fire)
            })
            .await?;
        Ok(registered)
    }

    /// Opens the fire's execution and runs it to an outcome. `_guard` keeps the fire in this
    /// scheduler's in-flight set until it returns.
    pub(crate) async fn drive(
        &self,
        job: &Job,
        slot: Slot,
        _guard: InFlight,
    ) -> Result<FireOutcome> {
        fail::fail_point!("scheduler::after-fire-registered", |_| std::process::abort(
        ));
        let execution_id = fire_id(&job.id, slot);
        let span = tracing::info_span!("durably.fire", job = %job.id, slot = %slot, %execution_id);
        self.open_and_run(job, slot, execution_id)
            .instrument(span)
            .await
    }

    async fn open_and_run(&self, job: &Job, slot: Slot, execution_id: Uuid) -> Result<FireOutcome> {
        let input =
            json!({ "job": job.id, "slot": slot.to_rfc3339(), "slot_ms": slot.as_millis() });
        let opened = self
            .inner
            .journal
            .open_execution(execution_id, EXECUTION_KIND, job.id.as_str(), &input)
            .await;
        match opened {
            Ok(Opened::Running(execution)) => self.run_attempts(job, slot, execution).await,
            Ok(Opened::Finished(finished)) => {
                let (state, reason) = finished_state(&finished);
                self.finish_ledger(job, slot, state, reason).await?;
                Ok(FireOutcome::Replayed {
                    execution_id,
                    state,
                })
            }
            Err(JournalError::Locked { pid, .. }) => {
                Ok(FireOutcome::LockedBy { execution_id, pid })
            }
            Err(JournalError::Cancelled(_)) => {
                let reason = "its execution was cancelled by an operator".to_owned();
                self.finish_ledger(job, slot, FireState::Skipped, Some(reason.clone()))
                    .await?;
                Ok(FireOutcome::Skipped {
                    execution_id,
                    reason,
                })
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Runs the attempts of an open fire. Attempt `k` is the guarded step at seq `k - 1`, so a
    /// resumed fire replays its recorded attempts and continues where it stopped.
    async fn run_attempts(
        &self,
        job: &Job,
        slot: Slot,
        mut execution: durably_journal::Execution,
    ) -> Result<FireOutcome> {
        let execution_id = execution.id();
        let resumed = execution.is_resume();
        let recorded = if resumed {
            self.inner.journal.steps(execution_id)?.len()
        } else {
            0
        };
        let mut last_error = StepError::fatal("the fire made no attempt");
        for attempt in 1..=job.attempts_max {
            // Only an attempt that has not run yet waits; recorded failures replay at once.
            // Shutdown starts no new attempt: the fire stays unfinished, and the next pass
            // replays the recorded attempts and goes on.
            let fresh = attempt as usize > recorded;
            if fresh && attempt > 1 {
                self.stop_if_shutting_down()?;
                tokio::select! {
                    biased;
                    () = self.inner.shutdown.wait() => return Err(Error::ShuttingDown),
                    () = tokio::time::sleep(job.backoff.before(attempt)) => {}
                }
            }
            if fresh {
                self.stop_if_shutting_down()?;
            } else {
                // A recorded attempt replays and writes no intent to mark the fire with.
                self.mark_running(job, slot, attempt).await?;
            }
            let body = Arc::clone(&job.body);
            let context = FireContext {
                job: job.id.clone(),
                slot,
                execution_id,
                idempotency_key: durably_journal::IdempotencyKey(Uuid::nil()),
                attempt,
                shutdown: self.inner.shutdown.clone(),
            };
            // A fresh attempt marks the fire running in its intent's transaction: the ledger and
            // the journal agree after any crash, and the fire costs one commit less.
            let mark_running = self.ledger_running(job, slot, attempt);
            let step = execution
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
                .await;
            match step {
                Ok(Guarded::Done(output)) => {
                    let record =
                        json!({ "fire": "completed", "attempts": attempt, "output": output });
                    execution
                        .complete_with(
                            &record,
                            self.ledger_finish(job, slot, FireState::Completed, None),
                        )
                        .await?;
                    return Ok(FireOutcome::Ran {
                        execution_id,
                        output,
                        attempts: attempt,
                        resumed,
                    });
                }
                Ok(Guarded::Skipped(skipped)) => {
                    let reason = format!(
                        "attempt {attempt} was interrupted by a crash after its intent was \
                         recorded, and the job's ambiguity policy is Skip, so it was not run \
                         again (idempotency key {})",
                        skipped.idempotency_key
                    );
                    let finish =
                        self.ledger_finish(job, slot, FireState::Skipped, Some(reason.clone()));
                    execution
                        .complete_with(&json!({ "fire": "skipped", "reason": reason }), finish)
                        .await?;
                    return Ok(FireOutcome::Skipped {
                        execution_id,
                        reason,
                    });
                }
                Err(JournalError::StepFailed { error, .. }) => {
                    tracing::info!(attempt, error = %error.message, "fire attempt failed");
                    last_error = error;
                }
                Err(error @ JournalError::Ambiguous { .. }) => {
                    // Logged and noted once: recovery leaves the fire alone until an operator
                    // resolves the step (see `ledger::recoverable`).
                    tracing::warn!(job = %job.id, %slot, %error, "fire waits for an operator");
                    let note = format!("waiting for an operator: {error}");
                    let (id, stored) = (job.id.to_string(), note);
                    self.inner
                        .journal
                        .write(move |conn| ledger::await_operator(conn, &id, slot, &stored))
                        .await?;
                    return Err(error.into());
                }
                Err(error) => return Err(error.into()),
            }
        }
        let attempts = job.attempts_max;
        let record = json!({ "fire": "failed", "attempts": attempts, "error": last_error });
        let reason = format!(
            "{attempts} attempts failed; the last: {}",
            last_error.message
        );
        execution
            .fail_with(
                &record,
                self.ledger_finish(job, slot, FireState::Failed, Some(reason)),
            )
            .await?;
        Ok(FireOutcome::Failed {
            execution_id,
            error: last_error,
            attempts,
        })
    }

    fn stop_if_shutting_down(&self) -> Result<()> {
        if self.inner.shutdown.is_set() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    async fn mark_running(&self, job: &Job, slot: Slot, attempt: u32) -> Result<()> {
        self.inner
            .journal
            .write(self.ledger_running(job, slot, attempt))
            .await?;
        Ok(())
    }

    /// The ledger write that marks attempt `attempt` of a fire as started.
    fn ledger_running(
        &self,
        job: &Job,
        slot: Slot,
        attempt: u32,
    ) -> impl FnOnce(&Connection) -> JournalResult<()> + Send + 'static {
        let (id, now) = (job.id.to_string(), self.now_text());
        move |conn| ledger::mark_running(conn, &id, slot, attempt, &now)
    }

    async fn finish_ledger(
        &self,
        job: &Job,
        slot: Slot,
        state: FireState,
        reason: Option<String>,
    ) -> Result<()> {
        self.inner
            .journal
            .write(self.ledger_finish(job, slot, state, reason))
            .await?;
        Ok(())
    }

    /// The ledger write that records a fire's final state. It runs in the transaction that
    /// finalizes the fire's execution when there is one, so the two never disagree after a
    /// crash, and the fire costs one commit less.
    fn ledger_finish(
        &self,
        job: &Job,
        slot: Slot,
        state: FireState,
        reason: Option<String>,
    ) -> impl FnOnce(&Connection) -> JournalResult<()> + Send + 'static {
        let (id, now) = (job.id.to_string(), self.now_text());
        move |conn| ledger::mark_finished(conn, &id, slot, state, reason.as_deref(), &now)
    }
}

/// The outcome of a registration that leaves nothing to run, if it does.
pub(crate) fn early_outcome(job: &Job, slot: Slot, registered: &Registered) -> Option<FireOutcome> {
    let execution_id = fire_id(&job.id, slot);
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

/// The ledger state of a finished execution, from the record the scheduler finalized it with.
fn finished_state(finished: &durably_journal::Finished) -> (FireState, Option<String>) {
    let record = finished
        .output
        .as_ref()
        .map(durably_journal::Payload::as_json)
        .or(finished
            .error
            .as_ref()
            .map(durably_journal::Payload::as_json))
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
    let field = |name: &str| {
        record
            .as_ref()
            .and_then(|value| value.get(name))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    match (finished.status, field("fire").as_deref()) {
        (_, Some("skipped")) => (FireState::Skipped, field("reason")),
        (Status::Failed, _) => (FireState::Failed, Some("every attempt failed".to_owned())),
        _ => (FireState::Completed, None),
    }
}

/// Runs a fire body's future, turning a panic into a non-retryable failure of the attempt.
///
/// The body is polled in place (not spawned), so dropping the fire, as the shutdown grace does,
/// drops the body with it. After a panic the body's future is not polled again.
struct CatchPanic(crate::job::FireFuture);

impl std::future::Future for CatchPanic {
    type Output = std::result::Result<serde_json::Value, StepError>;

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
                tracing::error!(panic = %message, "fire body panicked");
                std::task::Poll::Ready(Err(StepError::fatal(format!(
                    "the fire body panicked: {message}"
                ))))
            }
        }
    }
}
