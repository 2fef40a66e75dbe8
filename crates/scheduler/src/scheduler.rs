//! [`Scheduler`]: registered jobs, and firing one slot through the journal.
//!
//! Invariant: a fire's body runs only inside the execution named by its fire id, opened
//! exclusively through the journal, as one guarded step per attempt. Exactly-once across
//! processes rests on that: the id is the same everywhere, a live holder makes every other
//! opener get `Locked`, and a finished execution reopens as its recorded outcome.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use durably_journal::Journal;
use durably_lock::{Clock, format_timestamp};

use crate::catch_up::Overlap;
use crate::drive::early_outcome;
use crate::error::{Error, Result};
use crate::fire_id::Fire;
use crate::job::{Job, ShutdownSignal};
use crate::job_id::JobId;
use crate::ledger::{self, FireRegistration, LEDGER_SCHEMA, Registered};
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

    /// Builds the scheduler: brings the scheduler's tables and views in the journal's file up
    /// to date (creating them in a journal no scheduler used yet), through the journal's
    /// writer. It has no jobs until [`Scheduler::register`].
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] when the migrations cannot be applied, among them
    /// `ExtensionSchemaTooNew` when a newer build of the scheduler migrated the file.
    pub async fn build(self) -> Result<Scheduler> {
        self.journal.migrate_extension(&LEDGER_SCHEMA).await?;
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::clone(self.journal.locker().judge().clock()));
        Ok(Scheduler {
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
        })
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
    /// A scheduler over `journal`, using the journal's clock: `Scheduler::builder(journal)`
    /// built with the defaults.
    ///
    /// # Errors
    ///
    /// As [`SchedulerBuilder::build`].
    pub async fn new(journal: Journal) -> Result<Self> {
        Self::builder(journal).build().await
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
        let now = self.inner.clock.now();
        let stored = definition.clone();
        let previous = self
            .inner
            .journal
            .write(move |conn| ledger::upsert_job(conn, &id, &stored, &hash, now))
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
    /// ambiguity policy, retrying a failing body as the job's [`RetryPolicy`](crate::RetryPolicy)
    /// allows.
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
        let fire = Fire::new(&job.id, slot);
        let registered = self.register_fire(&job, &fire).await?;
        let guard = self.enter(&job.id, slot);
        match early_outcome(&fire, &registered) {
            Some(outcome) => Ok(outcome),
            None => self.drive(&job, fire, guard).await,
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

    /// Registers an explicit fire in one writer transaction (see [`ledger::register_fire`]).
    async fn register_fire(&self, job: &Job, fire: &Fire) -> Result<Registered> {
        let overlap_skip =
            (job.overlap == Overlap::Skip).then(|| self.running_here(&job.id, Some(fire.slot)));
        let judge = self.inner.journal.locker().judge().clone();
        let (fire, now) = (fire.clone(), self.now_text());
        let mark_after = match Slot::from_millis(fire.slot.as_millis() - 1) {
            Ok(before) => job.schedule.latest_at_or_before(before)?,
            Err(_) => None,
        }
        .map(Slot::as_millis);
        let raise_from_unset = fire.slot.as_millis() <= self.inner.clock.now().timestamp_millis();
        let registered = self
            .inner
            .journal
            .write(move |conn| {
                let registration = FireRegistration {
                    fire: &fire,
                    now: &now,
                    above_mark_only: false,
                    overlap_skip,
                    mark_after,
                    raise_from_unset,
                };
                ledger::register_fire(conn, &judge, &registration)
            })
            .await?;
        Ok(registered)
    }
}
