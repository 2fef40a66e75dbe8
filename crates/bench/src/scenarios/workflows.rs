//! `workflows`: whole executions (open, K steps, finalize), N of them, C at a time, for
//! comparison with other engines (DBOS Transact reported about 460 steps/s on SQLite on a
//! 2-core machine for 200 workflows of 10 steps, one after another).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use durably::Journal;

use crate::args::{EffectArg, IdsArg};
use crate::context::Context;
use crate::error::Result;
use crate::report::Outcome;
use crate::scenarios::{WriterSnapshot, batching_note, open_running, step};
use crate::stats::Samples;

/// Runs the configured executions and reports steps per second.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let concurrency = context.concurrency.unwrap_or(1).max(1);
    let (executions, steps, effect) = (
        context.workflow_executions,
        context.workflow_steps,
        context.workflow_effect,
    );
    let journal = context.journal(&dir.join("journal.db"))?;
    let stats_before = WriterSnapshot::take(&journal);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    let ids = context.execution_ids;
    for _ in 0..concurrency {
        let (journal, next) = (journal.clone(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            worker(&journal, &next, ids, (executions, steps, effect)).await
        }));
    }
    let mut latencies = Samples::with_capacity((executions * u64::from(steps)) as usize);
    let mut whole = Samples::with_capacity(executions as usize);
    for task in tasks {
        let (step_samples, execution_samples) = task.await??;
        latencies.merge(&step_samples);
        whole.merge(&execution_samples);
    }
    let elapsed = start.elapsed();
    let executions_per_s = executions as f64 / elapsed.as_secs_f64();
    let notes = vec![
        format!(
            "{executions} executions x {steps} {effect:?} steps, concurrency {concurrency}: \
             {executions_per_s:.0} executions/s, execution p50 {:.0} µs p99 {:.0} µs",
            whole.quantile_us(0.5),
            whole.quantile_us(0.99)
        ),
        batching_note(&journal, stats_before),
    ];
    Ok(Outcome {
        ops: executions * u64::from(steps),
        elapsed,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

async fn worker(
    journal: &Journal,
    next: &AtomicU64,
    ids: IdsArg,
    (executions, steps, effect): (u64, u32, EffectArg),
) -> Result<(Samples, Samples)> {
    let mut step_latencies = Samples::default();
    let mut execution_latencies = Samples::default();
    while next.fetch_add(1, Ordering::Relaxed) < executions {
        let began = Instant::now();
        let mut execution = open_running(journal, ids.new_id()).await?;
        for _ in 0..steps {
            let step_began = Instant::now();
            step(&mut execution, effect).await?;
            step_latencies.record(step_began.elapsed());
        }
        execution.complete(&steps).await?;
        execution_latencies.record(began.elapsed());
    }
    Ok((step_latencies, execution_latencies))
}
