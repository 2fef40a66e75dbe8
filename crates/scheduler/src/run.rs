//! The fire loop: passes over the registered jobs, each one resuming abandoned fires, deciding
//! the due slots from the stored high-water mark, registering them and running them.
//!
//! Invariant: the loop registers a slot only if it lies after the job's high-water mark as read
//! inside the registering transaction, and raises the mark in that same transaction. So a
//! clock moved backward, or a second scheduler process, never gets a slot registered twice.

use std::future::Future;
use std::pin::Pin;

use tokio::task::JoinSet;

use crate::catch_up::{CatchUp, Overlap, SkippedSlots, due_slots};
use crate::drive::early_outcome;
use crate::error::{Error, Result};
use crate::fire_id::Fire;
use crate::job::Job;
use crate::job_id::JobId;
use crate::ledger::{self, Registered};
use crate::outcome::{FireOutcome, FireReport, PassReport};
use crate::schedule::Schedule;
use crate::scheduler::{InFlight, Scheduler};
use crate::slot::Slot;

/// One unit of work a pass hands out: fires run one after another.
type FireTask = Pin<Box<dyn Future<Output = Vec<TaskResult>> + Send>>;

type TaskResult = (JobId, Slot, Result<FireOutcome>);

/// What the registering transaction of one job decided.
struct Planned {
    registered: Vec<(Fire, Registered)>,
    skipped: Option<SkippedSlots>,
    next: Option<Slot>,
}

/// What planning one job found.
struct JobPlan {
    tasks: Vec<FireTask>,
    next: Option<Slot>,
}

impl Scheduler {
    /// Runs one pass of the loop and waits for the fires it started: resumes the abandoned
    /// fires of every registered job, then fires the due slots. Handy for tests with an
    /// injected clock, and for programs that drive their own timing.
    pub async fn run_once(&self) -> PassReport {
        let mut report = PassReport::default();
        let (tasks, _) = self.plan_pass(&mut report).await;
        let mut running = JoinSet::new();
        for task in tasks {
            running.spawn(task);
        }
        while let Some(joined) = running.join_next().await {
            collect(&mut report, joined);
        }
        report
    }

    /// Runs the loop until `shutdown` completes.
    ///
    /// Each pass resumes abandoned fires, fires the due slots (concurrently for jobs with
    /// [`Overlap::Allow`], one after another for [`Overlap::Skip`]) and records missed slots
    /// as skipped; then the loop sleeps until the next due slot, but never longer than the
    /// configured `tick_max`, so a wall-clock jump is noticed quickly. A pass that fails for
    /// one job (the database busy, say) is logged and retried on the next pass.
    ///
    /// On shutdown no new fire starts: a sequence of fires stops before its next fire (left
    /// `pending`), and a failing fire makes no further attempt (left `running`); bodies can
    /// watch [`FireContext::shutting_down`](crate::FireContext::shutting_down). Running fires
    /// get the shutdown grace to finish; any still running then is dropped, leaving its
    /// execution running in the journal. The next scheduler pass resumes all of them.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        self.inner.shutdown.clear();
        tokio::pin!(shutdown);
        let mut running = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = std::future::ready(()) => {}
            }
            let mut report = PassReport::default();
            let (tasks, next) = self.plan_pass(&mut report).await;
            log_pass(&report);
            for task in tasks {
                running.spawn(task);
            }
            while let Some(joined) = running.try_join_next() {
                log_pass(&collect_one(joined));
            }
            let wait = self.wait_until(next);
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.inner.shutdown.set();
        let grace = self.inner.shutdown_grace;
        let drain = async {
            while let Some(joined) = running.join_next().await {
                log_pass(&collect_one(joined));
            }
        };
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!(
                fires = running.len(),
                "fires still running after the shutdown grace were dropped; they stay resumable"
            );
            running.abort_all();
            while running.join_next().await.is_some() {}
        }
        // Every fire of this run has returned: explicit fires made later may run again.
        self.inner.shutdown.clear();
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

    /// Plans every job; returns the fire tasks and the earliest next slot.
    async fn plan_pass(&self, report: &mut PassReport) -> (Vec<FireTask>, Option<Slot>) {
        let jobs: Vec<Job> = crate::scheduler::lock(&self.inner.jobs)
            .values()
            .cloned()
            .collect();
        let mut tasks = Vec::new();
        let mut next: Option<Slot> = None;
        for job in jobs {
            match self.plan_job(&job, report).await {
                Ok(plan) => {
                    tasks.extend(plan.tasks);
                    next = match (next, plan.next) {
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
        (tasks, next)
    }

    async fn plan_job(&self, job: &Job, report: &mut PassReport) -> Result<JobPlan> {
        // The overlap check counts the fires this scheduler drives from earlier passes, taken
        // before recovery enters its own: under `Overlap::Skip` the resumed fires and the new
        // ones run in one sequence below, so they cannot overlap each other.
        let running_before = self.running_here(&job.id, None);
        let recovered = self.recoverable(job)?;
        let now = Slot::from_datetime(self.inner.clock.now())?;
        let planned = self.register_due(job, now, running_before).await?;
        if let Some(skipped) = planned.skipped {
            report.skipped.push((job.id.clone(), skipped));
        }
        let mut to_run = Vec::new();
        for (fire, registered) in planned.registered {
            let guard = self.enter(&job.id, fire.slot);
            if let Some(outcome) = early_outcome(&fire, &registered) {
                if matches!(outcome, FireOutcome::Skipped { .. }) {
                    report.fires.push(FireReport {
                        job: fire.job,
                        slot: fire.slot,
                        outcome,
                    });
                }
            } else if registered == Registered::New {
                to_run.push((fire, guard));
            }
        }
        let mut tasks = Vec::new();
        match job.overlap {
            Overlap::Skip => {
                let mut fires = recovered;
                fires.extend(to_run);
                if !fires.is_empty() {
                    tasks.push(self.sequential_task(job, fires));
                }
            }
            Overlap::Allow => {
                if !recovered.is_empty() {
                    tasks.push(self.sequential_task(job, recovered));
                }
                for fire in to_run {
                    tasks.push(self.sequential_task(job, vec![fire]));
                }
            }
        }
        Ok(JobPlan {
            tasks,
            next: planned.next,
        })
    }

    /// In one writer transaction: reads the high-water mark, decides the due slots from it
    /// ([`due_slots`] is pure and bounded), records the skipped run, registers the due slots
    /// and raises the mark to `handled_through`. Deciding inside the transaction means two
    /// processes planning at once never act on a stale mark: the second sees the first's mark
    /// and decides only the slots after it.
    async fn register_due(&self, job: &Job, now: Slot, running_before: bool) -> Result<Planned> {
        let overlap_skip = (job.overlap == Overlap::Skip).then_some(running_before);
        let judge = self.inner.journal.locker().judge().clone();
        let (id, now_text) = (job.id.to_string(), self.now_text());
        let reason = skip_reason(&job.catch_up);
        let (job_id, schedule, catch_up): (JobId, Schedule, CatchUp) =
            (job.id.clone(), job.schedule.clone(), job.catch_up);
        let planned = self
            .inner
            .journal
            .write(move |conn| {
                let mark = match ledger::high_water_mark(conn, &id)?.map(Slot::from_millis) {
                    None => None,
                    Some(Ok(mark)) => Some(mark),
                    Some(Err(error)) => return Ok(Err(error)),
                };
                let due = match due_slots(&schedule, mark, now, &catch_up) {
                    Ok(due) => due,
                    Err(error) => return Ok(Err(error)),
                };
                let mut planned = Planned {
                    registered: Vec::with_capacity(due.fire.len()),
                    skipped: None,
                    next: due.next,
                };
                if due.handled_through == mark && due.skipped.is_none() && due.fire.is_empty() {
                    return Ok(Ok(planned));
                }
                if let Some(run) = &due.skipped
                    && ledger::record_skipped(conn, &id, run, reason, &now_text)?
                {
                    planned.skipped = Some(*run);
                }
                for slot in due.fire {
                    let fire = Fire::new(&job_id, slot);
                    let registration = ledger::FireRegistration {
                        fire: &fire,
                        now: &now_text,
                        above_mark_only: true,
                        overlap_skip,
                        mark_after: None,
                        raise_from_unset: false,
                    };
                    let registered = ledger::register_fire(conn, &judge, &registration)?;
                    planned.registered.push((fire, registered));
                }
                if let Some(handled) = due.handled_through {
                    ledger::raise_mark(conn, &id, handled)?;
                }
                Ok(Ok(planned))
            })
            .await??;
        Ok(planned)
    }

    /// The job's fires that no live process drives (crash recovery), entered as driven here.
    /// The journal replays each; the job's policy decides an ambiguous body. Fires waiting for
    /// an operator are left out (see [`ledger::recoverable`]); the scan reads one page per
    /// pass and resumes after it on the next, so any number of stuck fires cannot hide a newer
    /// abandoned one.
    fn recoverable(&self, job: &Job) -> Result<Vec<(Fire, InFlight)>> {
        let judge = self.inner.journal.locker().judge().clone();
        let after = crate::scheduler::lock(&self.inner.recovery_cursor)
            .get(&job.id)
            .copied();
        let page = self
            .inner
            .journal
            .read(|conn| ledger::recoverable(conn, &judge, &job.id, after))?;
        {
            let mut cursor = crate::scheduler::lock(&self.inner.recovery_cursor);
            match page.last() {
                Some((fire, _)) if page.len() >= ledger::UNFINISHED_FIRES_SCANNED_MAX as usize => {
                    cursor.insert(job.id.clone(), fire.slot.as_millis());
                }
                // The last page: start from the oldest again next pass.
                _ => {
                    cursor.remove(&job.id);
                }
            }
        }
        let abandoned: Vec<(Fire, InFlight)> = page
            .into_iter()
            .filter(|(fire, held_live)| !held_live && !self.is_in_flight(&job.id, fire.slot))
            .map(|(fire, _)| {
                let guard = self.enter(&job.id, fire.slot);
                (fire, guard)
            })
            .collect();
        if !abandoned.is_empty() {
            tracing::info!(job = %job.id, fires = abandoned.len(), "resuming abandoned fires");
        }
        Ok(abandoned)
    }

    fn sequential_task(&self, job: &Job, fires: Vec<(Fire, InFlight)>) -> FireTask {
        let (scheduler, job) = (self.clone(), job.clone());
        Box::pin(async move {
            let mut results = Vec::with_capacity(fires.len());
            for (fire, guard) in fires {
                // Shutdown starts no new fire: the rest stay `pending` (or as they were) in
                // the ledger, and the next pass, here or elsewhere, resumes them.
                if scheduler.inner.shutdown.is_set() {
                    tracing::info!(
                        job = %job.id,
                        slot = %fire.slot,
                        "shutting down: fire left for the next pass"
                    );
                    break;
                }
                let slot = fire.slot;
                let outcome = scheduler.drive(&job, fire, guard).await;
                results.push((job.id.clone(), slot, outcome));
            }
            results
        })
    }
}

fn skip_reason(catch_up: &CatchUp) -> &'static str {
    match catch_up {
        CatchUp::Skip => "missed while no scheduler ran; catch-up policy Skip",
        CatchUp::Latest => {
            "missed while no scheduler ran; catch-up policy Latest fired only the latest"
        }
        CatchUp::All { .. } => "missed while no scheduler ran; outside the catch-up window or cap",
    }
}

fn collect(
    report: &mut PassReport,
    joined: std::result::Result<Vec<TaskResult>, tokio::task::JoinError>,
) {
    let one = collect_one(joined);
    report.fires.extend(one.fires);
    report.errors.extend(one.errors);
}

fn collect_one(joined: std::result::Result<Vec<TaskResult>, tokio::task::JoinError>) -> PassReport {
    let mut report = PassReport::default();
    match joined {
        Ok(results) => {
            for (job, slot, outcome) in results {
                match outcome {
                    Ok(outcome) => report.fires.push(FireReport { job, slot, outcome }),
                    Err(error) => report.errors.push((job, describe(slot, &error))),
                }
            }
        }
        Err(error) => {
            tracing::error!(%error, "a fire task panicked or was cancelled");
        }
    }
    report
}

fn describe(slot: Slot, error: &Error) -> String {
    format!("fire at {slot}: {error}")
}

fn log_pass(report: &PassReport) {
    for fire in &report.fires {
        // Replayed and LockedBy are another process's (or an earlier run's) work: not ours.
        tracing::debug!(job = %fire.job, slot = %fire.slot, outcome = ?fire.outcome, "fire");
    }
    for (job, skipped) in &report.skipped {
        tracing::info!(%job, first = %skipped.first, last = %skipped.last, count = ?skipped.count,
            "missed slots recorded as skipped");
    }
    for (job, error) in &report.errors {
        tracing::warn!(%job, %error, "fire error");
    }
}
