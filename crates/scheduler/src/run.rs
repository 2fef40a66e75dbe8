//! The fire loop: passes over the registered jobs, each one deciding the due slots from the
//! stored high-water mark and starting them (or recording them skipped) in one transaction.
//!
//! Invariant: the loop starts a slot only if it lies after the job's high-water mark as read
//! inside the starting transaction, and raises the mark in that same transaction. So a clock
//! moved backward, or a second scheduler process, never gets a slot started twice. A paused
//! job's mark is left alone, so on resume its catch-up policy decides what it missed.
//!
//! The loop runs no workflow code: a fire is an execution of the job's registered workflow,
//! run, resumed after a crash and retried by whatever runtime process serves its kind.

use std::future::Future;
use std::ops::DerefMut;
use std::pin::Pin;
use std::task::{Context, Waker};

use durably_db::Connection;
use durably_journal::Result as JournalResult;

use crate::catch_up::{CatchUp, DueSlots, Overlap, SkippedSlots, due_slots};
use crate::drive::{ReadyFire, Refusal, decide_in};
use crate::error::Result;
use crate::fire_id::Fire;
use crate::job::Job;
use crate::ledger::{self, REASON_OVERLAP};
use crate::outcome::{FireOutcome, FireReport, PassReport};
use crate::scheduler::{Scheduler, lock};
use crate::slot::Slot;
use crate::telemetry;

/// The most old `pending` fires (registered by a scheduler from before fires were workflows,
/// never opened) one pass starts for a job.
const PENDING_FIRES_STARTED_MAX: u32 = 100;

/// What the starting transaction of one job decided.
#[derive(Default)]
struct Planned {
    fires: Vec<(Slot, FireOutcome)>,
    skipped: Option<SkippedSlots>,
    next: Option<Slot>,
    /// Where the next copy of ended fires pages on, when this transaction copied.
    copy_cursor: Option<i64>,
}

/// What the starting transaction found.
enum Decided {
    Planned(Planned),
    /// The mark moved, or the job was paused, between the read that prepared the starts and
    /// the transaction: nothing was written; the next pass decides again.
    Stale,
}

impl Scheduler {
    /// Runs one pass of the loop: starts (or records skipped) the due slots of every registered
    /// job that is not paused. Handy for tests with an injected clock, and for programs that
    /// drive their own timing. The fires' workflows run in the runtime, not in this call.
    pub async fn run_once(&self) -> PassReport {
        let mut report = PassReport::default();
        self.pass(&mut report, || false).await;
        report
    }

    /// Runs the loop until `shutdown` completes: each pass starts the due slots, then the loop
    /// sleeps until the next due slot, but never longer than the configured `tick_max`, so a
    /// wall-clock jump (or a resumed job) is noticed quickly. A pass that fails for one job
    /// (the database busy, say) is logged and retried on the next pass. Fires already started
    /// keep running in the runtime after shutdown.
    ///
    /// Once `shutdown` has completed the loop starts no fire: a pass looks at it before each
    /// job's starting transaction and stops there, leaving the remaining slots to the next
    /// scheduler pass; a `shutdown` complete before the call starts nothing at all.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut shutdown = Shutdown {
            future: shutdown,
            done: false,
        };
        while !shutdown.poll_now() {
            let mut report = PassReport::default();
            let next = self.pass(&mut report, || shutdown.poll_now()).await;
            log_pass(&report);
            if shutdown.done {
                break;
            }
            let wait = self.wait_until(next);
            tokio::select! {
                biased;
                () = shutdown.wait() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How long to sleep before the next pass.
    fn wait_until(&self, next: Option<Slot>) -> std::time::Duration {
        let tick_max = self.inner.tick_max;
        let Some(next) = next else {
            return tick_max;
        };
        let now_ms = self.inner.clock.now().timestamp_millis();
        let until_ms = u64::try_from(next.as_millis().saturating_sub(now_ms)).unwrap_or(0);
        std::time::Duration::from_millis(until_ms.max(1)).min(tick_max)
    }

    /// Plans every job, stopping before the next one once `stop` says so; returns the earliest
    /// next slot.
    async fn pass(&self, report: &mut PassReport, mut stop: impl FnMut() -> bool) -> Option<Slot> {
        let mut next: Option<Slot> = None;
        for job in self.jobs() {
            if stop() {
                break;
            }
            match self.start_due(&job).await {
                Ok(planned) => {
                    if let Some(skipped) = planned.skipped {
                        report.skipped.push((job.id.clone(), skipped));
                    }
                    report
                        .fires
                        .extend(planned.fires.into_iter().map(|(slot, outcome)| FireReport {
                            job: job.id.clone(),
                            slot,
                            outcome,
                        }));
                    next = match (next, planned.next) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Err(error) => {
                    tracing::warn!(job = %job.id, %error, "scheduler pass failed for a job");
                    report.errors.push((job.id.clone(), error.to_string()));
                }
            }
        }
        next
    }

    /// Reads the mark, prepares the starts of the due slots (and of old `pending` fires), then
    /// decides them in one writer transaction that re-reads the mark and the paused flag: if
    /// either changed, nothing is written and the next pass decides again.
    async fn start_due(&self, job: &Job) -> Result<Planned> {
        let now = Slot::from_datetime(self.inner.clock.now())?;
        let id = job.id.to_string();
        let (paused, mark, pending) = self.inner.journal.read(|conn| {
            Ok((
                ledger::paused(conn, &id)?.unwrap_or(false),
                ledger::high_water_mark(conn, &id)?,
                ledger::pending_slots(conn, &id, PENDING_FIRES_STARTED_MAX)?,
            ))
        })?;
        if paused {
            return Ok(Planned::default());
        }
        let mark = mark.map(Slot::from_millis).transpose()?;
        let due = due_slots(&job.schedule, mark, now, &job.catch_up)?;
        let ready = due
            .fire
            .iter()
            .map(|slot| self.ready(job, Fire::new(&job.id, *slot)))
            .collect::<Result<Vec<ReadyFire>>>()?;
        let pending = pending
            .into_iter()
            .map(|ms| self.ready(job, Fire::new(&job.id, Slot::from_millis(ms)?)))
            .collect::<Result<Vec<ReadyFire>>>()?;
        if ready.is_empty()
            && pending.is_empty()
            && due.skipped.is_none()
            && due.handled_through == mark
        {
            return Ok(Planned {
                next: due.next,
                ..Planned::default()
            });
        }
        let copy_cursor = lock(&self.inner.copy_cursors)
            .get(&job.id)
            .copied()
            .unwrap_or(i64::MIN);
        let plan = DuePlan {
            job: job.clone(),
            mark,
            copy_cursor,
            due,
            pending,
            ready,
        };
        let (now_text, refusal) = (self.now_text(), Refusal::default());
        let rolled_back = refusal.clone();
        let decided = self
            .inner
            .journal
            .write(move |conn| plan.decide_in(conn, &now_text, &refusal))
            .await
            .map_err(|error| rolled_back.explain(error))?;
        fail::fail_point!("scheduler::after-fire-registered", |_| std::process::abort(
        ));
        Ok(match decided {
            Decided::Planned(planned) => {
                telemetry::fires_decided(&self.inner.client, job, &planned.fires);
                if let Some(cursor) = planned.copy_cursor {
                    lock(&self.inner.copy_cursors).insert(job.id.clone(), cursor);
                }
                planned
            }
            Decided::Stale => Planned::default(),
        })
    }
}

/// The loop's shutdown future, and whether it has completed (it is never polled again then).
struct Shutdown<F> {
    future: Pin<F>,
    done: bool,
}

impl<F: DerefMut<Target: Future<Output = ()>>> Shutdown<F> {
    /// Whether the future has completed, polling it once without registering for a wake-up
    /// if it had not yet.
    fn poll_now(&mut self) -> bool {
        if !self.done {
            let mut context = Context::from_waker(Waker::noop());
            self.done = self.future.as_mut().poll(&mut context).is_ready();
        }
        self.done
    }

    /// Completes when the future does.
    async fn wait(&mut self) {
        if !self.done {
            self.future.as_mut().await;
            self.done = true;
        }
    }
}

/// What a pass read and prepared for one job, to decide in its writer transaction.
struct DuePlan {
    job: Job,
    /// The high-water mark the due slots were computed from.
    mark: Option<Slot>,
    /// Where the copy of ended fires pages on.
    copy_cursor: i64,
    due: DueSlots,
    /// Old `pending` fires, ready to start.
    pending: Vec<ReadyFire>,
    /// The due slots' fires, ready to start.
    ready: Vec<ReadyFire>,
}

impl DuePlan {
    /// The starting transaction: nothing is written if the mark moved or the job was paused
    /// since the read.
    fn decide_in(
        &self,
        conn: &Connection,
        now_text: &str,
        refusal: &Refusal,
    ) -> JournalResult<Decided> {
        let (job, due) = (&self.job, &self.due);
        let id = job.id.as_str();
        // Locked: schedulers on other hosts decide this job after this transaction commits,
        // and then find the mark moved.
        let expected = ledger::LockedJob {
            paused: false,
            last_slot_ms: self.mark.map(Slot::as_millis),
        };
        if ledger::lock_job(conn, id)? != Some(expected) {
            return Ok(Decided::Stale);
        }
        let mut planned = Planned {
            next: due.next,
            ..Planned::default()
        };
        for old in &self.pending {
            let outcome = decide_in(conn, old, None, now_text, refusal)?;
            planned.fires.push((old.fire.slot, outcome));
        }
        if let Some(run) = &due.skipped
            && ledger::record_skipped(conn, id, run, skip_reason(&job.catch_up), now_text)?
        {
            planned.skipped = Some(*run);
        }
        // The overlap check looks at fires started before the due slots (and copies the ends
        // of those that ended): the slots of one catch-up are decided together.
        let (running, copy_cursor) = ledger::copy_ends(conn, id, now_text, self.copy_cursor)?;
        planned.copy_cursor = Some(copy_cursor);
        let skip = (job.overlap == Overlap::Skip && running).then_some(REASON_OVERLAP);
        for fire in &self.ready {
            let outcome = decide_in(conn, fire, skip, now_text, refusal)?;
            planned.fires.push((fire.fire.slot, outcome));
        }
        if let Some(handled) = due.handled_through {
            ledger::raise_mark(conn, id, handled)?;
        }
        Ok(Decided::Planned(planned))
    }
}

fn skip_reason(catch_up: &CatchUp) -> &'static str {
    match catch_up {
        CatchUp::Skip => {
            "missed while no scheduler ran or the job was paused; catch-up policy Skip"
        }
        CatchUp::Latest => {
            "missed while no scheduler ran or the job was paused; catch-up policy Latest fired \
             only the latest"
        }
        CatchUp::All { .. } => {
            "missed while no scheduler ran or the job was paused; outside the catch-up window \
             or cap"
        }
    }
}

fn log_pass(report: &PassReport) {
    for fire in &report.fires {
        tracing::debug!(job = %fire.job, slot = %fire.slot, outcome = ?fire.outcome, "fire");
    }
    for (job, skipped) in &report.skipped {
        tracing::info!(%job, first = %skipped.first, last = %skipped.last, count = ?skipped.count,
            "missed slots recorded as skipped");
    }
    for (job, error) in &report.errors {
        tracing::warn!(%job, %error, "scheduler pass error");
    }
}
