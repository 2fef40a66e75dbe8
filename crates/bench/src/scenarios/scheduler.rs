//! `scheduler`: fires per second, from one scheduler and from two scheduler processes sharing
//! the file. A fire is `Scheduler::fire(job, slot)`, which records the slot and starts the
//! fire's execution in one transaction, and then the execution's run (one pure step) by the
//! process's runtime, to its end. The two processes fire the same slots at the same time, so
//! each slot starts in exactly one of them; the scenario checks that the fires started add up
//! to the executions completed, once each.

use std::path::Path;
use std::time::{Duration, Instant};

use durably::Journal;
use durably::runtime::{Runtime, WorkflowContext, WorkflowError};
use durably::scheduler::{Fire, FireOutcome, Job, JobId, Overlap, Scheduler, Slot};

use crate::args::WorkerArgs;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::rss;
use crate::scenarios::multiprocess::{run_workers, unix_millis};
use crate::stats::Samples;

/// The benchmark job's id.
const JOB: &str = "bench";
/// The first slot fired: 2026-01-01T00:00:00.000Z.
const FIRST_SLOT_MS: i64 = 1_767_225_600_000;
/// The job's interval, in milliseconds.
const INTERVAL_MS: i64 = 1_000;
/// The workflow kind each fire starts.
const WORKFLOW: &str = "bench-fire";

/// The fires' workflow: one pure step.
async fn fire_workflow(context: WorkflowContext, fire: Fire) -> Result<i64, WorkflowError> {
    let slot = fire.slot.as_millis();
    Ok(context.pure("fire", || async move { Ok(slot) }).await?)
}

/// Fires slots from this process, then from two worker processes at once.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let journal = context.journal(&dir.join("one.db"))?;
    let half = context.run_time / 2;
    let (latencies, fired, elapsed) = fire_for(&journal, half).await?;
    drop(journal);
    let two = two_processes(context, &dir.join("two.db"), half).await?;
    let notes = vec!["one process: slots fired one after another".to_owned(), two];
    Ok(Outcome {
        ops: fired,
        elapsed,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

async fn scheduler_on(journal: &Journal) -> Result<(Runtime, Scheduler, JobId)> {
    let runtime = Runtime::builder(journal.clone())
        .register(WORKFLOW, 1, fire_workflow)
        .start()
        .await?;
    let scheduler = Scheduler::new((*runtime).clone()).await?;
    let job = Job::builder(JOB)
        .interval(Duration::from_secs(1), 0)
        // Two processes fire neighbouring slots at once; the overlap policy is the loop's and
        // does not apply to explicit fires, but `Allow` states the intent.
        .overlap(Overlap::Allow)
        .workflow(WORKFLOW)
        .build()?;
    let id = job.id().clone();
    let _ = scheduler.register(job).await?;
    Ok((runtime, scheduler, id))
}

/// Fires consecutive slots for `run_time`; returns the latencies of the fires that ran here,
/// how many ran here, and the time taken.
async fn fire_for(journal: &Journal, run_time: Duration) -> Result<(Samples, u64, Duration)> {
    let (runtime, scheduler, id) = scheduler_on(journal).await?;
    let mut latencies = Samples::with_capacity(4096);
    let mut ran = 0;
    let start = Instant::now();
    let mut slot_ms = FIRST_SLOT_MS;
    while start.elapsed() < run_time {
        let slot = Slot::from_millis(slot_ms)?;
        let began = Instant::now();
        let outcome = scheduler.fire(&id, slot).await?;
        match outcome {
            FireOutcome::Started { execution_id } => {
                let _: i64 = runtime.handle(execution_id).result().await?;
                latencies.record(began.elapsed());
                ran += 1;
            }
            FireOutcome::Existing { .. } | FireOutcome::Skipped { .. } => {}
            other => return Err(BenchError::Unexpected(format!("fire outcome {other:?}"))),
        }
        slot_ms += INTERVAL_MS;
    }
    Ok((latencies, ran, start.elapsed()))
}

/// Two worker processes fire the same slots at once; returns a note with fires/s and the
/// exactly-once check.
async fn two_processes(context: &Context, path: &Path, run_time: Duration) -> Result<String> {
    drop(context.journal(path)?);
    let reports = run_workers(context, "scheduler-worker", path, run_time, 2).await?;
    let (mut ran, mut elapsed, mut latencies) = (0, Duration::ZERO, Samples::default());
    for report in reports {
        ran += report.steps;
        elapsed = elapsed.max(report.elapsed);
        latencies.merge(&report.latencies);
    }
    let covered = count_fires(&Journal::open(path)?)?;
    let once = if covered == ran {
        "each once"
    } else {
        "MISMATCH"
    };
    Ok(format!(
        "two processes on one file: {:.0} fires/s ({ran} fires ran for {covered} recorded \
         fires: {once}), fire p50 {:.0} µs p99 {:.0} µs",
        ran as f64 / elapsed.as_secs_f64().max(1e-9),
        latencies.quantile_us(0.5),
        latencies.quantile_us(0.99)
    ))
}

fn count_fires(journal: &Journal) -> Result<u64> {
    let count: i64 = journal.read(|conn| {
        Ok(conn.query_row(
            "SELECT count(*) FROM executions WHERE status = 'completed'",
            [],
            |row| row.get(0),
        )?)
    })?;
    Ok(count.max(0) as u64)
}

/// One scheduler process of the two-process measurement.
pub async fn worker(args: &WorkerArgs, durability: durably::Durability) -> Result<()> {
    let journal = Journal::builder(&args.db).durability(durability).open()?;
    let wait_ms = args.start_at_ms.saturating_sub(unix_millis());
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    rss::reset_peak();
    let (latencies, ran, elapsed) = fire_for(&journal, Duration::from_millis(args.millis)).await?;
    println!(
        "steps={ran} elapsed_us={} peak_kib={}",
        elapsed.as_micros(),
        rss::peak_kib().unwrap_or(0)
    );
    println!("latencies_ns={}", latencies.to_nanos_line());
    Ok(())
}
