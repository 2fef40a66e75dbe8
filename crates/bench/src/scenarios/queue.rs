//! `queue`: 2,000 workflows of 5 guarded steps (500 with `--quick`) through a runtime queue
//! whose limit is 64 running at once across processes, on a runtime whose own limit is 64,
//! started by 64 producer tasks that then await their results; timed from the first start to
//! the last result. One op is a step.
//!
//! The reference is `workflows` at concurrency 64: the same workflows run with
//! `Runtime::run` from 64 tasks (no queue, no claim: each task runs its workflow itself), on
//! a fresh journal, measured just before and just after; the issue asks the queue for at
//! least 0.8 of their mean.

use std::path::Path;

use durably::runtime::QueueConfig;

use crate::context::Context;
use crate::error::Result;
use crate::report::Outcome;
use crate::scenarios::runtime_load::{self, CONCURRENCY, Load, Occupancy, PRODUCERS, StepSamples};
use crate::scenarios::{WriterSnapshot, batching_note, count};

/// The queue the workflows go through.
const QUEUE: &str = "bench";

/// Its limit across every process.
const QUEUE_LIMIT: u32 = 64;

/// The target: queued steps per second over the reference's.
const TARGET_RATIO: f64 = 0.8;

/// Runs the reference, the queue, and the reference again.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let load = Load {
        workflows: if context.quick { 500 } else { 2_000 },
        steps: 5,
        guarded: true,
    };
    let before = runtime_load::reference(context, &dir.join("reference-before.db"), load).await?;
    let samples = StepSamples::default();
    let journal = context.journal(&dir.join("queue.db"))?;
    let limit = QueueConfig {
        concurrency_max: Some(QUEUE_LIMIT),
        process_concurrency_max: None,
    };
    let runtime = runtime_load::builder(journal.clone(), &samples, None)
        .queue(QUEUE, limit)
        .start()
        .await?;
    let writer_before = WriterSnapshot::take(&journal);
    let occupancy = Occupancy::start(&journal);
    let elapsed = runtime_load::drive(&runtime, load, Some(QUEUE), context.execution_ids).await?;
    let mean_running = occupancy.mean().await?;
    let batching = batching_note(&journal, writer_before);
    runtime.shutdown();
    let claimed = count(
        &journal,
        "SELECT count(*) FROM events WHERE kind = 'claimed'",
    )?;
    let after = runtime_load::reference(context, &dir.join("reference-after.db"), load).await?;
    let steps_per_s = load.total_steps() as f64 / elapsed.as_secs_f64();
    let reference = f64::midpoint(before.steps_per_s, after.steps_per_s);
    let ratio = steps_per_s / reference;
    let verdict = if ratio >= TARGET_RATIO {
        "meets"
    } else {
        "MISSES"
    };
    Ok(Outcome {
        ops: load.total_steps(),
        elapsed,
        latencies: samples.take(),
        notes: vec![
            format!(
                "{} workflows x {} {} steps into queue {QUEUE:?} (limit {QUEUE_LIMIT} across \
                 processes), runtime concurrency {CONCURRENCY}, {PRODUCERS} producer tasks \
                 starting them and then awaiting their results: {claimed} claims counted \
                 against the limit; first start to last result {:.2} s",
                load.workflows,
                load.steps,
                load.effect(),
                elapsed.as_secs_f64()
            ),
            format!(
                "reference, `workflows` at concurrency {CONCURRENCY}: the same workflows run \
                 with Runtime::run from {PRODUCERS} tasks on a fresh journal: {:.0} steps/s \
                 before, {:.0} after; the queue ran at {ratio:.2} of their mean, which \
                 {verdict} the {TARGET_RATIO} target",
                before.steps_per_s, after.steps_per_s
            ),
            format!(
                "executions running at once, on average: {mean_running:.1} in the queue, \
                 {:.1} and {:.1} in the references",
                before.mean_running, after.mean_running
            ),
            format!("the queue's {batching}"),
            format!("the first reference's {}", before.batching),
        ],
        peak_rss_kib_elsewhere: None,
    })
}
