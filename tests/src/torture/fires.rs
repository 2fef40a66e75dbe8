//! Scheduler fires in the torture workload: two scheduler processes fire the same slots of four
//! jobs (one per ambiguity policy) through `Scheduler::fire`, so each slot must start once
//! across both processes and every restart. Each process is also a runtime serving the fires'
//! workflow, one guarded step that appends its effect to the ledger under the idempotency key
//! the journal hands it, so the checker judges fires like any guarded step; a fire killed
//! mid-step is resumed by a runtime's recovery and its step's policy decides.
//!
//! The job of policy `Fail` runs its step under `Retry`, as the runtime's own runs do: a fire
//! is waited for until its execution ends, and an execution awaiting an operator has no end
//! until one answers.

use std::sync::Arc;
use std::time::Duration;

use durably::runtime::{
    Error as RuntimeError, ResumeOptions, Runtime, WorkflowContext, WorkflowError,
};
use durably_journal::{Guarded, StepError, StepKey};
use durably_scheduler::{Fire, Job, JobId, Overlap, Scheduler, Slot};

use super::BoxError;
use super::ledger::{RecordFile, monotonic_ns};
use super::plan::PolicyKind;
use super::workload::Workload;

/// The anchor of every job's grid: 2026-01-01T00:00:00Z.
pub const FIRE_ANCHOR_MS: i64 = 1_767_225_600_000;
/// The interval of every job.
pub const FIRE_INTERVAL_MS: i64 = 1_000;
/// The workflow kind of every fire.
pub const FIRE_KIND: &str = "torture-fire";
/// A scheduler process looks for unfinished fires every this many slots.
const RESUME_EVERY: u64 = 8;
/// The longest one process waits for one fire's execution to end before it moves on (the
/// execution may be another process's, killed meanwhile, until a runtime recovers it).
const FIRE_WAIT_MAX: Duration = Duration::from_secs(10);

/// The torture jobs: one per policy.
pub fn job_id(policy: PolicyKind) -> String {
    format!("torture-{}", policy.as_str())
}

/// The slot `number` of every job.
///
/// # Errors
/// The slot is out of range.
pub fn slot(number: u64) -> Result<Slot, BoxError> {
    Ok(Slot::from_millis(
        FIRE_ANCHOR_MS + number as i64 * FIRE_INTERVAL_MS,
    )?)
}

/// A scheduler process's engines: a runtime serving [`FIRE_KIND`] and a scheduler over it.
pub struct Engines {
    /// Runs the fires' executions (this process's and recovered ones).
    pub runtime: Runtime,
    /// Starts the fires.
    pub scheduler: Scheduler,
}

/// A runtime serving the fires' workflow and a scheduler over the workload's journal with the
/// four torture jobs registered.
///
/// # Errors
/// The runtime does not start, or a job cannot be built or registered.
pub async fn scheduler(workload: &Workload) -> Result<Engines, BoxError> {
    let shared = Arc::new(Workload::new(workload.journal().clone(), workload.dir())?);
    let runtime = Runtime::builder(workload.journal().clone())
        .register(FIRE_KIND, 1, move |context, fire| {
            fire_workflow(Arc::clone(&shared), context, fire)
        })
        .start()
        .await?;
    let scheduler = Scheduler::new((*runtime).clone()).await?;
    for policy in PolicyKind::ALL {
        let job = Job::builder(&job_id(policy))
            .interval(
                Duration::from_millis(FIRE_INTERVAL_MS as u64),
                FIRE_ANCHOR_MS,
            )
            // Both scheduler processes must contend for every slot, not skip it.
            .overlap(Overlap::Allow)
            .workflow(FIRE_KIND)
            .build()?;
        let id = job.id().clone();
        let _ = scheduler.register(job).await?;
        // A process killed between a pause and its resume (the matrix's
        // `scheduler::after-pause-commit`) leaves the job paused; the torture's jobs always run.
        let _ = scheduler.resume(&id).await?;
    }
    Ok(Engines { runtime, scheduler })
}

/// Pauses the first job and resumes it: the management writes of the matrix.
///
/// # Errors
/// A storage error.
pub async fn pause_and_resume(engines: &Engines) -> Result<(), BoxError> {
    let job = JobId::new(&job_id(PolicyKind::Skip))?;
    let _ = engines.scheduler.pause(&job).await?;
    let _ = engines.scheduler.resume(&job).await?;
    Ok(())
}

/// The fires' workflow: one guarded step under the job's policy. Its value, or `None` when the
/// policy skipped the step after a crash.
async fn fire_workflow(
    workload: Arc<Workload>,
    context: WorkflowContext,
    fire: Fire,
) -> Result<Option<String>, WorkflowError> {
    let policy = PolicyKind::ALL
        .into_iter()
        .find(|policy| job_id(*policy) == fire.job.as_str())
        .ok_or_else(|| WorkflowError::new("a fire of an unknown torture job"))?;
    let step_policy = match policy {
        PolicyKind::Fail => PolicyKind::Retry,
        other => other,
    };
    let ledger = Arc::clone(workload.ledger());
    let id = context.id();
    let guarded = context
        .guarded("fire", workload.policy(step_policy), move |key| {
            let done = effect(&ledger, id, &fire, &key, step_policy);
            async move { done }
        })
        .await?;
    Ok(match guarded {
        Guarded::Done(value) => Some(value),
        Guarded::Skipped(_) => None,
    })
}

fn effect(
    ledger: &RecordFile,
    id: uuid::Uuid,
    fire: &Fire,
    key: &StepKey,
    policy: PolicyKind,
) -> Result<String, StepError> {
    let value = format!("f{}-1", fire.slot.as_millis());
    let (pid, now) = (std::process::id().to_string(), monotonic_ns().to_string());
    let (id, key) = (id.to_string(), key.idempotency_key().to_string());
    ledger
        .append(&[
            "E",
            &id,
            "0",
            &key,
            "guarded",
            policy.as_str(),
            &pid,
            &now,
            &value,
            // The fire's effect records no fencing token.
            "-",
        ])
        .map_err(|error| StepError::fatal(format!("ledger write failed: {error}")))?;
    Ok(value)
}

/// Fires `job` at `slot`, then waits (bounded) for its execution to end and acknowledges it.
///
/// # Errors
/// An error the torture never expects.
pub async fn fire_one(
    workload: &Workload,
    engines: &Engines,
    job: &JobId,
    slot: Slot,
) -> Result<(), BoxError> {
    match engines.scheduler.fire(job, slot).await {
        Ok(outcome) => wait_end(workload, engines, outcome.execution_id()).await,
        Err(error) if error.is_retryable() => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Waits, at most [`FIRE_WAIT_MAX`], for execution `id` to end, and acknowledges its end.
async fn wait_end(workload: &Workload, engines: &Engines, id: uuid::Uuid) -> Result<(), BoxError> {
    let handle = engines.runtime.handle::<Option<String>>(id);
    let Ok(result) = tokio::time::timeout(FIRE_WAIT_MAX, handle.result()).await else {
        return Ok(());
    };
    let text = id.to_string();
    match result {
        Ok(Some(value)) => {
            workload.ack(&["A", &text, "0", "done", &value])?;
            workload.ack(&["F", &text, "completed"])?;
        }
        Ok(None) => workload.ack(&["F", &text, "completed"])?,
        Err(error) if error.is_retryable() => {}
        Err(error) => {
            if let Some(record) = workload.journal().get(id)? {
                if !record.status.is_final() {
                    return Err(error.into());
                }
                workload.ack(&["F", &text, record.status.as_str()])?;
            }
        }
    }
    Ok(())
}

/// The fires started but not ended, as (job, slot), by their executions' statuses.
///
/// # Errors
/// A storage error.
pub fn unfinished(workload: &Workload) -> Result<Vec<(JobId, Slot)>, BoxError> {
    let rows = workload.journal().read(|conn| {
        let mut statement = conn.prepare(
            "SELECT f.job, f.slot_ms FROM fire_ledger l JOIN fires f USING (execution_id)
             WHERE l.state NOT IN ('completed', 'failed', 'skipped') ORDER BY f.slot_ms, f.job",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })?;
    rows.into_iter()
        .map(|(job, slot_ms)| Ok((JobId::new(&job)?, Slot::from_millis(slot_ms)?)))
        .collect()
}

/// Plays the operator for fires, as for the runtime's own executions: a fire whose process was
/// killed before its first step too many times in a row is parked `stuck`, and is resumed here.
/// Then waits for every unfinished fire once.
///
/// # Errors
/// As [`fire_one`].
pub async fn resume(workload: &Workload, engines: &Engines) -> Result<(), BoxError> {
    for (job, slot) in unfinished(workload)? {
        let id = durably_scheduler::fire_id(&job, slot);
        let stuck = workload
            .journal()
            .get(id)?
            .is_some_and(|record| record.status == durably_journal::Status::Stuck);
        if stuck {
            match engines.runtime.resume(id, ResumeOptions::default()).await {
                Ok(()) | Err(RuntimeError::NotResumable { .. }) => {}
                Err(error) if error.is_retryable() => {}
                Err(error) => return Err(error.into()),
            }
        }
        fire_one(workload, engines, &job, slot).await?;
    }
    Ok(())
}

/// A scheduler process of the torture run: fires slot after slot of every job, from the lowest
/// high-water mark among the jobs, waiting for unfinished fires now and then, until killed.
///
/// # Errors
/// As [`fire_one`].
pub async fn run(workload: &Workload, slots_max: u64) -> Result<(), BoxError> {
    let engines = scheduler(workload).await?;
    let jobs = engines.scheduler.job_ids();
    let mut lowest: Option<i64> = None;
    for job in &jobs {
        let mark = engines.scheduler.high_water_mark(job)?.map_or(-1, |slot| {
            (slot.as_millis() - FIRE_ANCHOR_MS) / FIRE_INTERVAL_MS
        });
        lowest = Some(lowest.map_or(mark, |lowest| lowest.min(mark)));
    }
    let first = lowest.map_or(0, |mark| (mark + 1).max(0) as u64);
    for number in first..first + slots_max {
        if (number - first).is_multiple_of(RESUME_EVERY) {
            resume(workload, &engines).await?;
        }
        for job in &jobs {
            fire_one(workload, &engines, job, slot(number)?).await?;
        }
    }
    Ok(())
}

/// Drives every unfinished fire to its end, a bounded number of rounds: this process's runtime
/// recovers the fires of killed processes.
///
/// # Errors
/// As [`fire_one`], or fires left unfinished after every round.
pub async fn finish(workload: &Workload, rounds_max: u32) -> Result<(), BoxError> {
    let engines = scheduler(workload).await?;
    for _ in 0..rounds_max {
        if unfinished(workload)?.is_empty() {
            return Ok(());
        }
        resume(workload, &engines).await?;
    }
    let left = unfinished(workload)?.len();
    if left == 0 {
        Ok(())
    } else {
        Err(format!("{left} fires are still unfinished after {rounds_max} rounds").into())
    }
}
