//! `concurrent`: C executions in parallel (default 64), each running guarded steps, so the
//! writer's group commit shares each fsync among many callers.

use std::path::Path;
use std::time::{Duration, Instant};

use durably::Journal;
use uuid::Uuid;

use crate::args::EffectArg;
use crate::context::Context;
use crate::error::Result;
use crate::report::Outcome;
use crate::scenarios::{WriterSnapshot, batching_note, ceiling_note, open_running, step};
use crate::stats::Samples;

/// The default number of parallel executions.
pub const CONCURRENCY_DEFAULT: usize = 64;

/// Runs C executions of guarded steps in parallel for the run time.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let concurrency = context.concurrency.unwrap_or(CONCURRENCY_DEFAULT).max(1);
    let journal = context.journal(&dir.join("journal.db"))?;
    let stats_before = WriterSnapshot::take(&journal);
    let start = Instant::now();
    let deadline = start + context.run_time;
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        tasks.push(tokio::spawn(one_execution(
            journal.clone(),
            context.new_id(),
            deadline,
        )));
    }
    let mut latencies = Samples::with_capacity(65_536);
    let mut ops = 0;
    let mut elapsed = Duration::ZERO;
    for task in tasks {
        let (samples, finished) = task.await??;
        ops += samples.len() as u64;
        latencies.merge(&samples);
        elapsed = elapsed.max(finished.duration_since(start));
    }
    let notes = vec![
        format!("{concurrency} executions in parallel, guarded steps"),
        batching_note(&journal, stats_before),
    ];
    let mut outcome = Outcome {
        ops,
        elapsed,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    };
    let ceiling = ceiling_note(
        context,
        dir,
        concurrency,
        EffectArg::Guarded,
        outcome.ops_per_s(),
    )
    .await?;
    outcome.notes.push(ceiling);
    Ok(outcome)
}

/// One execution's loop; returns its step latencies and when its last step finished.
async fn one_execution(
    journal: Journal,
    id: Uuid,
    deadline: Instant,
) -> Result<(Samples, Instant)> {
    let mut execution = open_running(&journal, id).await?;
    let mut latencies = Samples::with_capacity(4096);
    let mut finished = Instant::now();
    while Instant::now() < deadline {
        let began = Instant::now();
        step(&mut execution, EffectArg::Guarded).await?;
        finished = Instant::now();
        latencies.record(finished.duration_since(began));
    }
    execution.complete(&latencies.len()).await?;
    Ok((latencies, finished))
}
