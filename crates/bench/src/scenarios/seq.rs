//! `seq-guarded` and `seq-idempotent`: one execution, one step at a time. A guarded step costs
//! two commits (intent, result), an idempotent step one, so against the baseline the limits are
//! 0.5 and 1.0.

use std::path::Path;
use std::time::Instant;

use crate::args::EffectArg;
use crate::context::Context;
use crate::error::Result;
use crate::report::Outcome;
use crate::scenarios::{WriterSnapshot, batching_note, ceiling_note, open_running, step};
use crate::stats::Samples;

/// Runs steps of `effect` one after another for the run time.
pub async fn run(context: &Context, dir: &Path, effect: EffectArg) -> Result<Outcome> {
    let journal = context.journal(&dir.join("journal.db"))?;
    let mut execution = open_running(&journal, context.new_id()).await?;
    let stats_before = WriterSnapshot::take(&journal);
    let mut latencies = Samples::with_capacity(16_384);
    let start = Instant::now();
    let mut ops = 0_u64;
    while start.elapsed() < context.run_time {
        let began = Instant::now();
        step(&mut execution, effect).await?;
        latencies.record(began.elapsed());
        ops += 1;
    }
    let elapsed = start.elapsed();
    let notes = vec![batching_note(&journal, stats_before)];
    execution.complete(&ops).await?;
    let mut outcome = Outcome {
        ops,
        elapsed,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    };
    let ceiling = ceiling_note(context, dir, 1, effect, outcome.ops_per_s()).await?;
    outcome.notes.push(ceiling);
    Ok(outcome)
}
