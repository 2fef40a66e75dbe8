//! [`Scheduler`]: registered jobs, and firing one slot through the runtime.
//!
//! Invariant: a fire's execution is started only with its ledger row, in one transaction (see
//! `drive`), under the id `fire_id(job, slot)`. Exactly-once across processes rests on that:
//! the row's key and the id are the same everywhere, so a second scheduler reaching the slot
//! finds the row and starts nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use durably_journal::Journal;
use durably_lock::{Clock, format_timestamp};
use durably_runtime::Client;

use crate::drive::{Refusal, decide_in};
use crate::error::{Error, Result};
use crate::fire_id::Fire;
use crate::job::Job;
use crate::job_id::JobId;
use crate::ledger::{self, LEDGER_SCHEMA};
use crate::outcome::{FireOutcome, FireState, Registration};
use crate::slot::Slot;

/// Default longest sleep of the loop between two passes. The loop sleeps until the next due
/// slot but wakes at least this often, so a wall clock that jumps is noticed within it.
pub const TICK_MAX_DEFAULT: Duration = Duration::from_secs(1);

/// Registered jobs over one journal, the fire loop, and the management of every job in the
/// journal's ledger. Cheap to clone; clones share jobs.
///
/// Any number of schedulers, in one process or many, may share a journal file: each slot of a
/// job fires once among them (see [`Scheduler::fire`]). A scheduler starts executions through
/// a runtime [`Client`]; the workflows run in whatever runtime process serves their kinds
/// (this process too, if the client is a `Runtime`).
#[derive(Debug, Clone)]
pub struct Scheduler {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) journal: Journal,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jobs: Mutex<BTreeMap<JobId, Job>>,
    /// Per job, where the next pass's copy of ended fires pages on (see `ledger::copy_ends`).
    pub(crate) copy_cursors: Mutex<BTreeMap<JobId, i64>>,
    pub(crate) tick_max: Duration,
}

/// Configures a [`Scheduler`].
#[derive(Debug)]
pub struct SchedulerBuilder {
    client: Client,
    clock: Option<Arc<dyn Clock>>,
    tick_max: Duration,
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

    /// Builds the scheduler: brings the scheduler's tables and views in the journal's file up
    /// to date (creating them in a journal no scheduler used yet), through the journal's
    /// writer. It has no jobs until [`Scheduler::register`].
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] when the migrations cannot be applied, among them
    /// `ExtensionSchemaTooNew` when a newer build of the scheduler migrated the file.
    pub async fn build(self) -> Result<Scheduler> {
        let journal = self.client.journal().clone();
        journal.migrate_extension(&LEDGER_SCHEMA).await?;
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::clone(journal.locker().judge().clock()));
        Ok(Scheduler {
            inner: Arc::new(Inner {
                client: self.client,
                journal,
                clock,
                jobs: Mutex::new(BTreeMap::new()),
                copy_cursors: Mutex::new(BTreeMap::new()),
                tick_max: self.tick_max,
            }),
        })
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical section
/// here is a single insert, remove or lookup).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Scheduler {
    /// A scheduler that starts fires through `client` (a `Runtime` is one), on the client's
    /// journal, using the journal's clock: `Scheduler::builder(client)` built with the
    /// defaults.
    ///
    /// # Errors
    ///
    /// As [`SchedulerBuilder::build`].
    pub async fn new(client: Client) -> Result<Self> {
        Self::builder(client).build().await
    }

    /// Starts configuring a scheduler that starts fires through `client`.
    pub fn builder(client: Client) -> SchedulerBuilder {
        SchedulerBuilder {
            client,
            clock: None,
            tick_max: TICK_MAX_DEFAULT,
        }
    }

    /// The runtime client fires are started through.
    pub fn client(&self) -> &Client {
        &self.inner.client
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
    /// A job already in the table with another definition (schedule, policies, workflow; see
    /// [`Job::definition`]) is updated and reported as [`Registration::Changed`], with a
    /// `scheduler_job_redefined` audit event. Its high-water mark and its paused flag are
    /// kept, so no slot up to the mark is fired again, even if the new schedule has slots
    /// there; fires already started keep their executions; later slots follow the new
    /// schedule. Registering a job again in the same scheduler replaces it.
    ///
    /// # Errors
    ///
    /// [`Error::NoSlotsLeft`] when the schedule has no slot after the scheduler's clock (an
    /// interval or cron that never fires again): nothing is written. [`Error::Journal`] if the
    /// `jobs` row cannot be written. Invalid definitions are refused earlier, by
    /// [`JobBuilder::build`](crate::JobBuilder::build).
    pub async fn register(&self, job: Job) -> Result<Registration> {
        let now = self.inner.clock.now();
        if job
            .schedule
            .next_after(Slot::from_datetime(now)?)?
            .is_none()
        {
            return Err(Error::NoSlotsLeft {
                job: job.id.to_string(),
                after: format_timestamp(now),
            });
        }
        let (id, definition, hash) = (job.id.to_string(), job.definition(), job.definition_hash());
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

    /// The state of the fire of `job` at `slot` as of now (a started fire follows its
    /// execution), and its attempts (1 once started), if the ledger holds it.
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

    /// Fires `job` at `slot` once: in one transaction, records the fire and starts its
    /// execution, an execution of the job's workflow with id `fire_id(job, slot)` and the
    /// [`Fire`] as input. The workflow runs in whatever runtime process serves its kind.
    ///
    /// - Started or decided before (here or in another process): [`FireOutcome::Existing`],
    ///   nothing is started.
    /// - Otherwise [`FireOutcome::Started`]. An explicit fire is an operator's request: the
    ///   overlap policy is the loop's, and does not apply to it.
    ///
    /// An explicit fire may name a slot at or before the high-water mark (a manual backfill);
    /// the loop never does. It may name the upcoming slot (the first after now) early, but no
    /// later one. It raises the mark only when that hides no slot from the loop: to the first
    /// slot after the mark, or, before any slot was handled, to a slot at or before now.
    /// Otherwise the mark stays, the loop still decides every slot after it (started, or
    /// recorded as skipped), and a slot an explicit fire already started is found, not
    /// started again.
    ///
    /// # Errors
    ///
    /// - [`Error::UnknownJob`] if `job` is not registered here.
    /// - [`Error::NotASlot`] if `slot` is not on the job's schedule.
    /// - [`Error::SlotInFuture`] if `slot` lies after the first slot after the scheduler's
    ///   clock.
    /// - [`Error::JobPaused`] if the job is paused.
    /// - [`Error::Start`] when the runtime refuses the start (an unknown workflow kind or
    ///   queue, a wrong input type); nothing is written.
    /// - [`Error::Journal`] on a storage error.
    pub async fn fire(&self, job: &JobId, slot: Slot) -> Result<FireOutcome> {
        let job = self.job(job)?;
        let now = self.inner.clock.now();
        let upcoming = job.schedule.next_after(Slot::from_datetime(now)?)?;
        if job.schedule.latest_at_or_before(slot)? != Some(slot) {
            return Err(Error::NotASlot {
                job: job.id.to_string(),
                slot: slot.to_rfc3339(),
            });
        }
        if slot.as_millis() > now.timestamp_millis() && Some(slot) != upcoming {
            return Err(Error::SlotInFuture {
                job: job.id.to_string(),
                slot: slot.to_rfc3339(),
                now: format_timestamp(now),
            });
        }
        let mut outcomes = self.start_explicit(&job, vec![slot]).await?;
        outcomes.pop().map(|(_, outcome)| outcome).ok_or_else(|| {
            Error::Ledger(format!(
                "the fire of job {:?} at {slot} was not decided",
                job.id.as_str()
            ))
        })
    }

    pub(crate) fn job(&self, job: &JobId) -> Result<Job> {
        lock(&self.inner.jobs)
            .get(job)
            .cloned()
            .ok_or_else(|| Error::UnknownJob {
                job: job.to_string(),
            })
    }

    /// The registered jobs.
    pub(crate) fn jobs(&self) -> Vec<Job> {
        lock(&self.inner.jobs).values().cloned().collect()
    }

    pub(crate) fn now_text(&self) -> String {
        format_timestamp(self.inner.clock.now())
    }

    /// Starts the fires of `job` at `slots` (each on the job's grid, at or before its upcoming
    /// slot) in one writer transaction, each unless the ledger already holds it, raising the
    /// high-water mark as [`Scheduler::fire`] documents. Refused, with nothing written, when
    /// the job is paused or the runtime refuses a start.
    pub(crate) async fn start_explicit(
        &self,
        job: &Job,
        slots: Vec<Slot>,
    ) -> Result<Vec<(Slot, FireOutcome)>> {
        let now = self.inner.clock.now();
        let mut ready = Vec::with_capacity(slots.len());
        for slot in slots {
            let mark_after = match Slot::from_millis(slot.as_millis() - 1) {
                Ok(before) => job.schedule.latest_at_or_before(before)?,
                Err(_) => None,
            }
            .map(Slot::as_millis);
            let raise_from_unset = slot.as_millis() <= now.timestamp_millis();
            ready.push((
                self.ready(job, Fire::new(&job.id, slot))?,
                mark_after,
                raise_from_unset,
            ));
        }
        let (id, now_text, refusal) = (
            job.id.to_string(),
            format_timestamp(now),
            Refusal::default(),
        );
        let rolled_back = refusal.clone();
        let decided = self
            .inner
            .journal
            .write(move |conn| {
                match ledger::lock_job(conn, &id)?.map(|job| job.paused) {
                    Some(false) => {}
                    Some(true) => return Ok(Err(Error::JobPaused { job: id })),
                    None => return Ok(Err(Error::UnknownJob { job: id })),
                }
                let mut outcomes = Vec::with_capacity(ready.len());
                for (fire, mark_after, raise_from_unset) in &ready {
                    let outcome = decide_in(conn, fire, None, &now_text, &refusal)?;
                    let slot = fire.fire.slot;
                    if outcome.started_here() {
                        // An explicit fire raises the mark only when that hides no slot from
                        // the loop (see `Scheduler::fire`).
                        let raise = match ledger::high_water_mark(conn, &id)? {
                            None => *raise_from_unset,
                            Some(mark) => *mark_after == Some(mark),
                        };
                        if raise {
                            ledger::raise_mark(conn, &id, slot)?;
                        }
                    }
                    outcomes.push((slot, outcome));
                }
                Ok(Ok(outcomes))
            })
            .await
            .map_err(|error| rolled_back.explain(error))??;
        fail::fail_point!("scheduler::after-fire-registered", |_| std::process::abort(
        ));
        crate::telemetry::fires_decided(&self.inner.client, job, &decided);
        Ok(decided)
    }
}
