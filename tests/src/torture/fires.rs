//! Scheduler fires in the torture workload: two scheduler processes fire the same slots of four
//! jobs (one per ambiguity policy) through `Scheduler::fire`, so each slot must run once across
//! both processes and every restart. A fire's body appends its effect to the ledger under the
//! idempotency key the journal hands it, so the checker judges fires like any guarded step.

use std::sync::Arc;
use std::time::Duration;

use durably_journal::{Error as JournalError, IdempotencyKey};
use durably_scheduler::{
    Error, FIRE_RETRY_DEFAULT, FIRE_STEP_NAME, FireOutcome, Job, JobId, Overlap, RetryPolicy,
    Scheduler, Slot, StepError,
};
use serde_json::json;

use super::BoxError;
use super::ledger::{RecordFile, monotonic_ns};
use super::plan::PolicyKind;
use super::workload::Workload;

/// The anchor of every job's grid: 2026-01-01T00:00:00Z.
pub const FIRE_ANCHOR_MS: i64 = 1_767_225_600_000;
/// The interval of every job.
pub const FIRE_INTERVAL_MS: i64 = 1_000;
/// How many times one fire call is retried after the operator resolved its ambiguity.
const FIRE_ROUNDS_MAX: u32 = 8;
/// A scheduler process looks for unfinished fires every this many slots.
const RESUME_EVERY: u64 = 8;

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

/// A scheduler over the workload's journal with the four torture jobs registered.
///
/// # Errors
/// A job cannot be built or registered.
pub async fn scheduler(workload: &Workload) -> Result<Scheduler, BoxError> {
    let scheduler = Scheduler::new(workload.journal().clone()).await?;
    for policy in PolicyKind::ALL {
        let ledger = Arc::clone(workload.ledger());
        let job = Job::builder(&job_id(policy))
            .interval(
                Duration::from_millis(FIRE_INTERVAL_MS as u64),
                FIRE_ANCHOR_MS,
            )
            .policy(workload.policy(policy))
            // Both scheduler processes must contend for every slot, not skip it.
            .overlap(Overlap::Allow)
            .retry(RetryPolicy {
                attempts_max: 1,
                ..FIRE_RETRY_DEFAULT
            })
            .body(move |context| {
                let done = effect(&ledger, &context, policy);
                async move { done }
            })
            .build()?;
        let _ = scheduler.register(job).await?;
    }
    Ok(scheduler)
}

fn effect(
    ledger: &RecordFile,
    context: &durably_scheduler::FireContext,
    policy: PolicyKind,
) -> Result<serde_json::Value, StepError> {
    let value = format!("f{}-{}", context.slot.as_millis(), context.attempt);
    let (pid, now) = (std::process::id().to_string(), monotonic_ns().to_string());
    let (id, seq) = (
        context.execution_id.to_string(),
        (context.attempt - 1).to_string(),
    );
    let key = context.idempotency_key.to_string();
    ledger
        .append(&[
            "E",
            &id,
            &seq,
            &key,
            "guarded",
            policy.as_str(),
            &pid,
            &now,
            &value,
            // A fire's body is handed no fencing token.
            "-",
        ])
        .map_err(|error| StepError::fatal(format!("ledger write failed: {error}")))?;
    Ok(json!(value))
}

/// Fires `job` at `slot`, playing the operator when a `Fail` fire is left ambiguous.
///
/// # Errors
/// An error the torture never expects.
pub async fn fire_one(
    workload: &Workload,
    scheduler: &Scheduler,
    job: &JobId,
    slot: Slot,
) -> Result<(), BoxError> {
    for _ in 0..FIRE_ROUNDS_MAX {
        match scheduler.fire(job, slot).await {
            Ok(FireOutcome::Ran {
                execution_id,
                output,
                attempts,
                ..
            }) => {
                let id = execution_id.to_string();
                let value = output.as_str().ok_or("a fire output is a string")?;
                workload.ack(&["A", &id, &(attempts - 1).to_string(), "done", value])?;
                workload.ack(&["F", &id, "completed"])?;
                return Ok(());
            }
            Ok(FireOutcome::Skipped { execution_id, .. }) => {
                // Skipped by policy after a crash: the execution is finalized with the reason.
                if let Some(record) = scheduler.journal().get(execution_id)? {
                    workload.ack(&["F", &execution_id.to_string(), record.status.as_str()])?;
                }
                return Ok(());
            }
            Ok(FireOutcome::Failed { execution_id, .. }) => {
                return Err(format!("fire {execution_id} failed, but its body never fails").into());
            }
            Ok(_) => return Ok(()),
            Err(Error::Journal(
                JournalError::Ambiguous {
                    execution_id, seq, ..
                }
                | JournalError::AwaitingOperator { execution_id, seq },
            )) => {
                let id = execution_id;
                let key = IdempotencyKey::derive(id, seq, FIRE_STEP_NAME);
                if !workload.operate(id, seq, key).await? {
                    return Ok(());
                }
            }
            Err(error) if error.is_retryable() => return Ok(()),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// The fires registered but not finished, as (job, slot).
///
/// # Errors
/// A storage error.
pub fn unfinished(workload: &Workload) -> Result<Vec<(JobId, Slot)>, BoxError> {
    let rows = workload.journal().read(|conn| {
        let mut statement = conn.prepare(
            "SELECT job, slot_ms FROM fires
             WHERE state NOT IN ('completed', 'failed', 'skipped') ORDER BY slot_ms, job",
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

/// Fires every unfinished fire once.
///
/// # Errors
/// As [`fire_one`].
pub async fn resume(workload: &Workload, scheduler: &Scheduler) -> Result<(), BoxError> {
    for (job, slot) in unfinished(workload)? {
        fire_one(workload, scheduler, &job, slot).await?;
    }
    Ok(())
}

/// A scheduler process of the torture run: fires slot after slot of every job, from the lowest
/// high-water mark among the jobs, resuming unfinished fires now and then, until killed.
///
/// # Errors
/// As [`fire_one`].
pub async fn run(workload: &Workload, slots_max: u64) -> Result<(), BoxError> {
    let scheduler = scheduler(workload).await?;
    let jobs = scheduler.job_ids();
    let mut lowest: Option<i64> = None;
    for job in &jobs {
        let mark = scheduler.high_water_mark(job)?.map_or(-1, |slot| {
            (slot.as_millis() - FIRE_ANCHOR_MS) / FIRE_INTERVAL_MS
        });
        lowest = Some(lowest.map_or(mark, |lowest| lowest.min(mark)));
    }
    let first = lowest.map_or(0, |mark| (mark + 1).max(0) as u64);
    for number in first..first + slots_max {
        if (number - first).is_multiple_of(RESUME_EVERY) {
            resume(workload, &scheduler).await?;
        }
        for job in &jobs {
            fire_one(workload, &scheduler, job, slot(number)?).await?;
        }
    }
    Ok(())
}

/// Drives every unfinished fire to its end, a bounded number of rounds.
///
/// # Errors
/// As [`fire_one`], or fires left unfinished after every round.
pub async fn finish(workload: &Workload, rounds_max: u32) -> Result<(), BoxError> {
    let scheduler = scheduler(workload).await?;
    for _ in 0..rounds_max {
        if unfinished(workload)?.is_empty() {
            return Ok(());
        }
        resume(workload, &scheduler).await?;
    }
    let left = unfinished(workload)?.len();
    if left == 0 {
        Ok(())
    } else {
        Err(format!("{left} fires are still unfinished after {rounds_max} rounds").into())
    }
}
