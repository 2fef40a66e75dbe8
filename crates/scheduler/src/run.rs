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
use crate::error::{Error, Result};
use crate::job::Job;
use crate::job_id::JobId;
use crate::ledger::{self, Registered};
use crate::outcome::{FireOutcome, FireReport, PassReport};
use crate::scheduler::{InFlight, Scheduler, early_outcome};
use crate::slot::Slot;

/// One unit of work a pass hands out: fires run one after another.
type FireTask = Pin<Box<dyn Future<Output = Vec<TaskResult>> + Send>>;

type TaskResult = (JobId, Slot, Result<FireOutcome>);

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
    /// On shutdown no new fire starts. Running fires get the shutdown grace to finish; any
    /// still running then is dropped, leaving its execution running in the journal, and the
    /// next scheduler to start resumes it.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
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
        let mut tasks = Vec::new();
        if let Some(task) = self.recovery_task(job)? {
            tasks.push(task);
        }
        let now = Slot::from_datetime(self.inner.clock.now())?;
        let mark = self.high_water_mark(&job.id)?;
        let due = due_slots(&job.schedule, mark, now, &job.catch_up)?;
        let changes = due.handled_through != mark || due.skipped.is_some() || !due.fire.is_empty();
        if !changes {
            return Ok(JobPlan {
                tasks,
                next: due.next,
            });
        }
        let (registered, skipped) = self
            .register_due(job, &due.fire, due.skipped, due.handled_through)
            .await?;
        if let Some(skipped) = skipped {
            report.skipped.push((job.id.clone(), skipped));
        }
        let mut to_run = Vec::new();
        for (slot, registered) in registered {
            let guard = self.enter(&job.id, slot);
            if let Some(outcome) = early_outcome(job, slot, &registered) {
                if matches!(outcome, FireOutcome::Skipped { .. }) {
                    report.fires.push(FireReport {
                        job: job.id.clone(),
                        slot,
                        outcome,
                    });
                }
            } else if registered == Registered::New {
                to_run.push((slot, guard));
            }
        }
        match job.overlap {
            Overlap::Skip => tasks.push(self.sequential_task(job, to_run)),
            Overlap::Allow => {
                for fire in to_run {
                    tasks.push(self.sequential_task(job, vec![fire]));
                }
            }
        }
        Ok(JobPlan {
            tasks,
            next: due.next,
        })
    }

    /// Records the skipped run, registers the due slots after the high-water mark and raises
    /// the mark to `handled_through`, all in one writer transaction.
    async fn register_due(
        &self,
        job: &Job,
        fire: &[Slot],
        skipped: Option<SkippedSlots>,
        handled_through: Option<Slot>,
    ) -> Result<(Vec<(Slot, Registered)>, Option<SkippedSlots>)> {
        let overlap_skip = (job.overlap == Overlap::Skip).then(|| self.running_here(&job.id, None));
        let judge = self.inner.journal.locker().judge().clone();
        let (id, now, fire) = (job.id.to_string(), self.now_text(), fire.to_vec());
        let reason = skip_reason(&job.catch_up);
        let job_id = job.id.clone();
        let result = self
            .inner
            .journal
            .write(move |conn| {
                let recorded = match &skipped {
                    Some(run) => ledger::record_skipped(conn, &id, run, reason, &now)?,
                    None => false,
                };
                let mut registered = Vec::with_capacity(fire.len());
                for slot in fire {
                    let execution_id = crate::fire_id::fire_id(&job_id, slot).to_string();
                    let registration = ledger::FireRegistration {
                        job: &id,
                        slot,
                        execution_id: &execution_id,
                        now: &now,
                        above_mark_only: true,
                        overlap_skip,
                    };
                    registered.push((slot, ledger::register_fire(conn, &judge, &registration)?));
                }
                if let Some(handled) = handled_through {
                    ledger::raise_mark(conn, &id, handled)?;
                }
                Ok((registered, skipped.filter(|_| recorded)))
            })
            .await?;
        Ok(result)
    }

    /// A task resuming the job's fires that no live process drives (crash recovery). The
    /// journal replays each; the job's policy decides an ambiguous body.
    fn recovery_task(&self, job: &Job) -> Result<Option<FireTask>> {
        let judge = self.inner.journal.locker().judge().clone();
        let id = job.id.to_string();
        let unfinished = self
            .inner
            .journal
            .read(|conn| ledger::unfinished(conn, &judge, &id, None))?;
        let abandoned: Vec<(Slot, InFlight)> = unfinished
            .into_iter()
            .filter(|&(slot, held_live)| !held_live && !self.is_in_flight(&job.id, slot))
            .map(|(slot, _)| (slot, self.enter(&job.id, slot)))
            .collect();
        if abandoned.is_empty() {
            return Ok(None);
        }
        tracing::info!(job = %job.id, fires = abandoned.len(), "resuming abandoned fires");
        Ok(Some(self.sequential_task(job, abandoned)))
    }

    fn sequential_task(&self, job: &Job, fires: Vec<(Slot, InFlight)>) -> FireTask {
        let (scheduler, job) = (self.clone(), job.clone());
        Box::pin(async move {
            let mut results = Vec::with_capacity(fires.len());
            for (slot, guard) in fires {
                let outcome = scheduler.drive(&job, slot, guard).await;
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
