//! `parallel`: one execution, rounds of [`WIDTH`] guarded steps issued at once and joined,
//! repeated; compared in the same run with [`WIDTH`] guarded steps one after the other on
//! another execution (the `seq-guarded` pattern). Joined steps' intents and results reach the
//! writer together and share its commits (and fsyncs), so the target is at least
//! [`SPEEDUP_TARGET`] times the sequential steps per second.

use std::path::Path;
use std::time::{Duration, Instant};

use durably::runtime::join_all;
use durably::{Execution, Guarded, Journal, Policy, StepError};

use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::scenarios::{STEP_NAME, WriterSnapshot, batching_note, open_running};
use crate::stats::Samples;

/// How many guarded steps one round issues at once.
pub const WIDTH: usize = 8;

/// The speed-up over sequential guarded steps the scenario aims at.
pub const SPEEDUP_TARGET: f64 = 4.0;

/// One round: [`WIDTH`] guarded steps, joined when `joined`, else one after the other.
async fn round(execution: &Execution, joined: bool) -> Result<()> {
    let step = || {
        execution.guarded(STEP_NAME, Policy::Fail, |_key| async {
            Ok::<u32, StepError>(1)
        })
    };
    let outcomes = if joined {
        join_all((0..WIDTH).map(|_| step())).await
    } else {
        let mut outcomes = Vec::with_capacity(WIDTH);
        for _ in 0..WIDTH {
            outcomes.push(step().await);
        }
        outcomes
    };
    for outcome in outcomes {
        if let Guarded::Skipped(skipped) = outcome? {
            return Err(BenchError::Unexpected(skipped.to_string()));
        }
    }
    Ok(())
}

/// Runs rounds on a new execution for `run_time`; returns the steps, the time and the
/// latency of each round.
async fn rounds(
    context: &Context,
    journal: &Journal,
    joined: bool,
    run_time: Duration,
) -> Result<(u64, Duration, Samples)> {
    let execution = open_running(journal, context.new_id()).await?;
    let mut latencies = Samples::with_capacity(4096);
    let start = Instant::now();
    let mut steps = 0_u64;
    while start.elapsed() < run_time {
        let began = Instant::now();
        round(&execution, joined).await?;
        latencies.record(began.elapsed());
        steps += WIDTH as u64;
    }
    let elapsed = start.elapsed();
    execution.complete(&steps).await?;
    Ok((steps, elapsed, latencies))
}

/// Runs the sequential comparison, then the joined rounds, for the run time each.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let journal = context.journal(&dir.join("journal.db"))?;
    let (seq_steps, seq_elapsed, _) = rounds(context, &journal, false, context.run_time).await?;
    let stats_before = WriterSnapshot::take(&journal);
    let (ops, elapsed, latencies) = rounds(context, &journal, true, context.run_time).await?;
    let per_s = |steps: u64, time: Duration| steps as f64 / time.as_secs_f64().max(f64::EPSILON);
    let (parallel, sequential) = (per_s(ops, elapsed), per_s(seq_steps, seq_elapsed));
    let speedup = parallel / sequential.max(f64::EPSILON);
    let verdict = if speedup >= SPEEDUP_TARGET {
        "met"
    } else {
        "NOT met"
    };
    let notes = vec![
        format!(
            "latencies are per round of {WIDTH} joined steps; {WIDTH} guarded steps one after \
             the other in the same run: {sequential:.0} steps/s; joined: {parallel:.0} steps/s, \
             {speedup:.2} x (target >= {SPEEDUP_TARGET} x: {verdict})"
        ),
        batching_note(&journal, stats_before),
    ];
    Ok(Outcome {
        ops,
        elapsed,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}
