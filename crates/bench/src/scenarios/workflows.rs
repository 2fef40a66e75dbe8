//! `workflows`: whole executions (open, K steps, finalize), N of them, C at a time, for
//! comparison with other engines (DBOS Transact reported about 460 steps/s on SQLite on a
//! 2-core machine for 200 workflows of 10 steps, one after another).
//!
//! By default each execution is a registered workflow run with `Runtime::run` (the deferred
//! open rides on the first write and the end on the last, so K idempotent steps cost K
//! commits); `--api journal` drives it by hand instead (open, K step results, complete: K + 2
//! commits), for comparison.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use durably::Journal;
use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};

use crate::args::{ApiArg, EffectArg, IdsArg};
use crate::context::Context;
use crate::error::Result;
use crate::report::Outcome;
use crate::scenarios::{STEP_NAME, WriterSnapshot, batching_note, open_running, step};
use crate::stats::Samples;

/// The workflow kind the runtime path registers.
const KIND: &str = "bench";

/// What one execution is: its steps and their kind.
type Shape = (u32, EffectArg);

/// Runs the configured executions and reports steps per second.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let concurrency = context.concurrency.unwrap_or(1).max(1);
    let (executions, steps, effect) = (
        context.workflow_executions,
        context.workflow_steps,
        context.workflow_effect,
    );
    let journal = context.journal(&dir.join("journal.db"))?;
    let step_latencies = Arc::new(Mutex::new(Samples::with_capacity(
        (executions * u64::from(steps)) as usize,
    )));
    let runtime = match context.workflow_api {
        ApiArg::Runtime => Some(runtime(&journal, Arc::clone(&step_latencies)).await?),
        ApiArg::Journal => None,
    };
    let stats_before = WriterSnapshot::take(&journal);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    let ids = context.execution_ids;
    for _ in 0..concurrency {
        let (journal, runtime, next) = (journal.clone(), runtime.clone(), Arc::clone(&next));
        let latencies = Arc::clone(&step_latencies);
        tasks.push(tokio::spawn(async move {
            let shape = (steps, effect);
            match runtime {
                Some(runtime) => runtime_worker(&runtime, &next, ids, executions, shape).await,
                None => worker(&journal, &next, ids, (executions, shape), &latencies).await,
            }
        }));
    }
    let mut whole = Samples::with_capacity(executions as usize);
    for task in tasks {
        whole.merge(&task.await??);
    }
    let elapsed = start.elapsed();
    let commits = journal
        .writer_stats()
        .commits
        .saturating_sub(stats_before.commits());
    let latencies = std::mem::take(
        &mut *step_latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let executions_per_s = executions as f64 / elapsed.as_secs_f64();
    let notes = vec![
        format!(
            "{executions} executions x {steps} {effect:?} steps through the {:?} API, \
             concurrency {concurrency}: {executions_per_s:.0} executions/s, {:.1} commits per \
             execution, execution p50 {:.0} µs p99 {:.0} µs",
            context.workflow_api,
            commits as f64 / executions as f64,
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

/// A runtime serving [`KIND`]: a workflow of the steps its input asks for, each step's call
/// timed into `latencies`.
async fn runtime(journal: &Journal, latencies: Arc<Mutex<Samples>>) -> Result<Runtime> {
    Ok(Runtime::builder(journal.clone())
        .register(
            KIND,
            1,
            move |context: WorkflowContext, (steps, effect): (u32, String)| {
                let latencies = Arc::clone(&latencies);
                async move {
                    let effect = match effect.as_str() {
                        "pure" => EffectArg::Pure,
                        "guarded" => EffectArg::Guarded,
                        _ => EffectArg::Idempotent,
                    };
                    workflow(context, (steps, effect), &latencies).await
                }
            },
        )
        .start()
        .await?)
}

async fn workflow(
    context: WorkflowContext,
    (steps, effect): Shape,
    latencies: &Mutex<Samples>,
) -> Result<u32, WorkflowError> {
    let mut timed = Samples::with_capacity(steps as usize);
    for _ in 0..steps {
        let began = Instant::now();
        match effect {
            EffectArg::Pure => {
                context.pure(STEP_NAME, || async { Ok(1_u32) }).await?;
            }
            EffectArg::Idempotent => {
                context
                    .idempotent(STEP_NAME, |_key| async { Ok(1_u32) })
                    .await?;
            }
            EffectArg::Guarded => {
                let done = context
                    .guarded(STEP_NAME, durably::Policy::Fail, |_key| async { Ok(1_u32) })
                    .await?;
                if done.is_skipped() {
                    return Err(WorkflowError::new("a benchmark step was skipped"));
                }
            }
        }
        timed.record(began.elapsed());
    }
    latencies
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .merge(&timed);
    Ok(steps)
}

async fn runtime_worker(
    runtime: &Runtime,
    next: &AtomicU64,
    ids: IdsArg,
    executions: u64,
    (steps, effect): Shape,
) -> Result<Samples> {
    let mut execution_latencies = Samples::default();
    let effect = match effect {
        EffectArg::Pure => "pure",
        EffectArg::Idempotent => "idempotent",
        EffectArg::Guarded => "guarded",
    };
    let input = (steps, effect.to_owned());
    while next.fetch_add(1, Ordering::Relaxed) < executions {
        let began = Instant::now();
        let _: u32 = runtime
            .run(KIND, ids.new_id(), &input, StartOptions::default())
            .await?;
        execution_latencies.record(began.elapsed());
    }
    Ok(execution_latencies)
}

async fn worker(
    journal: &Journal,
    next: &AtomicU64,
    ids: IdsArg,
    (executions, (steps, effect)): (u64, Shape),
    latencies: &Mutex<Samples>,
) -> Result<Samples> {
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
    latencies
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .merge(&step_latencies);
    Ok(execution_latencies)
}
