//! Schedule management: list, pause, resume, trigger now, backfill a range.
//!
//! Every call works from the journal's ledger (the `jobs` row holds the whole job, see
//! [`Job::definition`]), so a process that does not run the job's code, such as the `durably`
//! CLI, manages every job in the file. Fires are started as the loop starts them: the row and
//! the execution's start in one transaction, each slot at most once (see `drive`).

use durably_lock::format_timestamp;

use crate::error::{Error, Result};
use crate::job::{Job, schedule_from};
use crate::job_id::JobId;
use crate::ledger;
use crate::outcome::{FireOutcome, FireState};
use crate::scheduler::Scheduler;
use crate::slot::Slot;

/// The most slots one backfill starts. A longer range is refused
/// ([`Error::TooManySlots`]); split it.
pub const BACKFILL_SLOTS_MAX: usize = 1_000;

/// One job as [`Scheduler::schedules`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobSummary {
    /// The job.
    pub job: JobId,
    /// Its schedule's definition (JSON), or `None` if the stored one no longer parses.
    pub schedule: Option<String>,
    /// The workflow kind its fires start; `None` for a job stored with a closure body.
    pub workflow: Option<String>,
    /// The first slot after now, if the schedule has one.
    pub next_slot: Option<Slot>,
    /// The newest slot handled (started or recorded skipped): the high-water mark.
    pub last_slot: Option<Slot>,
    /// Whether the job is paused.
    pub paused: bool,
    /// How many of its fires are in each state, as of now, for the states it has.
    pub fires: Vec<(FireState, u64)>,
}

impl Scheduler {
    /// Every job in the journal's ledger, by id, registered here or not.
    ///
    /// # Errors
    /// [`Error::Journal`] on a storage error; [`Error::Ledger`] for an unreadable row.
    pub fn schedules(&self) -> Result<Vec<JobSummary>> {
        let now = Slot::from_datetime(self.inner.clock.now())?;
        let rows = self.inner.journal.read(|conn| {
            ledger::jobs(conn)?
                .into_iter()
                .map(|row| {
                    let fires = ledger::fire_counts(conn, &row.job)?;
                    Ok((row, fires))
                })
                .collect::<durably_journal::Result<Vec<_>>>()
        })?;
        rows.into_iter()
            .map(|(row, fires)| {
                let job = JobId::new(&row.job)?;
                let value: serde_json::Value =
                    serde_json::from_str(&row.definition).unwrap_or_default();
                let schedule = schedule_from(&value["schedule"]).and_then(Result::ok);
                let next_slot = match &schedule {
                    Some(schedule) => schedule.next_after(now)?,
                    None => None,
                };
                Ok(JobSummary {
                    job,
                    schedule: schedule.as_ref().map(crate::Schedule::definition),
                    workflow: value["workflow"].as_str().map(str::to_owned),
                    next_slot,
                    last_slot: row.last_slot_ms.map(Slot::from_millis).transpose()?,
                    paused: row.paused,
                    fires,
                })
            })
            .collect()
    }

    /// Pauses `job` in every process sharing the journal: the loop fires nothing for it and
    /// leaves its high-water mark where it is, and explicit fires are refused. Fires already
    /// started go on. Returns `false` if it was paused already (nothing changes).
    ///
    /// # Errors
    /// [`Error::UnknownJob`] if no scheduler registered `job` in this journal; nothing is
    /// written. [`Error::Journal`] on a storage error.
    pub async fn pause(&self, job: &JobId) -> Result<bool> {
        self.set_paused(job, true).await
    }

    /// Resumes a paused `job`. The next loop pass applies the job's catch-up policy to the
    /// slots it missed while paused, as after downtime: they are fired or recorded skipped.
    /// Returns `false` if it was not paused (nothing changes).
    ///
    /// # Errors
    /// As [`Scheduler::pause`].
    pub async fn resume(&self, job: &JobId) -> Result<bool> {
        self.set_paused(job, false).await
    }

    async fn set_paused(&self, job: &JobId, paused: bool) -> Result<bool> {
        let (id, now) = (job.to_string(), self.now_text());
        let changed = self
            .inner
            .journal
            .write(move |conn| {
                let before = ledger::paused(conn, &id)?;
                if before.is_some() {
                    ledger::set_paused(conn, &id, paused, &now)?;
                }
                Ok(before)
            })
            .await?;
        fail::fail_point!("scheduler::after-pause-commit", |_| std::process::abort());
        match changed {
            None => Err(Error::UnknownJob {
                job: job.to_string(),
            }),
            Some(before) => Ok(before != paused),
        }
    }

    /// Fires `job` now: its upcoming grid slot (the first slot after now) is started at once,
    /// through [`Scheduler::fire`]'s rule. The slot keeps its fire id, so it runs once: the
    /// loop finds it started when its time comes, and triggering again before then is
    /// [`FireOutcome::Existing`]. Returns the slot and what was done.
    ///
    /// # Errors
    /// [`Error::UnknownJob`], [`Error::JobNeedsWorkflow`], [`Error::JobPaused`],
    /// [`Error::NoSlotsLeft`] when the schedule never fires again, [`Error::Start`] when the
    /// runtime refuses the start; nothing is written on any of them.
    pub async fn trigger(&self, job: &JobId) -> Result<(Slot, FireOutcome)> {
        let job = self.stored_job(job)?;
        let now = self.inner.clock.now();
        let Some(slot) = job.schedule.next_after(Slot::from_datetime(now)?)? else {
            return Err(Error::NoSlotsLeft {
                job: job.id.to_string(),
                after: format_timestamp(now),
            });
        };
        let mut outcomes = self.start_explicit(&job, vec![slot]).await?;
        outcomes.pop().ok_or_else(|| {
            Error::Ledger(format!(
                "the trigger of job {:?} decided nothing",
                job.id.as_str()
            ))
        })
    }

    /// Fires every grid slot of `job` from `from` to `to` (both included) that was not fired
    /// yet (slots skipped by catch-up included), each once, in one transaction: slots already
    /// started or decided are [`FireOutcome::Existing`]. At most [`BACKFILL_SLOTS_MAX`] slots.
    ///
    /// # Errors
    /// Nothing is written on any error: [`Error::RangeReversed`] when `from` > `to`,
    /// [`Error::RangeInFuture`] when `to` lies after now, [`Error::EmptyRange`] when the range
    /// holds no slot, [`Error::TooManySlots`], and those of [`Scheduler::trigger`].
    pub async fn backfill(
        &self,
        job: &JobId,
        from: Slot,
        to: Slot,
    ) -> Result<Vec<(Slot, FireOutcome)>> {
        let job = self.stored_job(job)?;
        let range = |error: fn(String, String, String) -> Error| {
            error(job.id.to_string(), from.to_rfc3339(), to.to_rfc3339())
        };
        if from > to {
            return Err(range(|job, from, to| Error::RangeReversed {
                job,
                from,
                to,
            }));
        }
        let now = self.inner.clock.now();
        if to.as_millis() > now.timestamp_millis() {
            return Err(Error::RangeInFuture {
                job: job.id.to_string(),
                to: to.to_rfc3339(),
                now: format_timestamp(now),
            });
        }
        let mut slots = Vec::new();
        // The range includes `from`: slots after the instant before it, or, at the first
        // representable instant, `from` itself if it is a slot.
        let after = if let Ok(before) = Slot::from_millis(from.as_millis() - 1) {
            before
        } else {
            if job.schedule.latest_at_or_before(from)? == Some(from) {
                slots.push(from);
            }
            from
        };
        slots.extend(
            job.schedule
                .slots_between(after, to, BACKFILL_SLOTS_MAX + 1)?,
        );
        if slots.is_empty() {
            return Err(range(|job, from, to| Error::EmptyRange { job, from, to }));
        }
        if slots.len() > BACKFILL_SLOTS_MAX {
            return Err(Error::TooManySlots {
                job: job.id.to_string(),
                from: from.to_rfc3339(),
                to: to.to_rfc3339(),
                max: BACKFILL_SLOTS_MAX,
            });
        }
        self.start_explicit(&job, slots).await
    }

    /// The job as the ledger stores it.
    fn stored_job(&self, job: &JobId) -> Result<Job> {
        let id = job.to_string();
        let definition = self
            .inner
            .journal
            .read(|conn| ledger::job_definition(conn, &id))?
            .ok_or_else(|| Error::UnknownJob {
                job: job.to_string(),
            })?;
        Job::from_definition(job, &definition)
    }
}
