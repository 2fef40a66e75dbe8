//! `recovery`: a runtime process is SIGKILLed with 10,000 workflows of 10 idempotent steps
//! half done (1,000 with `--quick`), and a new runtime in this process finishes them. One op
//! is a step the new runtime records; the time runs from the sweep that
//! `RuntimeBuilder::start` begins with to the last workflow's result, so it holds the sweep of
//! the dead process's locks, the recovery pass that requeues its executions, and the claims
//! and runs that finish them.
//!
//! The killed process is this binary with the hidden `recovery-worker` subcommand: a runtime
//! allowed to run every workflow at once, whose runs wait at a gate until all are running,
//! so that they advance side by side and the kill finds each about half done, as the issue
//! describes. It is killed once half the steps are journaled (polled on the `steps` table). This process opened the journal while the worker was alive, so the sweep at its
//! open reclaimed nothing and the whole recovery happens in the timed window. The sweep is
//! called just before `RuntimeBuilder::start` (whose own sweep then finds nothing), so that
//! its share can be timed.
//!
//! The reference is `workflows` at concurrency 64: the same runtime (concurrency 64) running
//! 2,000 fresh workflows of 10 idempotent steps (500 with `--quick`) with `Runtime::run` from
//! 64 tasks, on a fresh journal, measured just before and just after; the issue asks recovery
//! for at least 0.8 of their mean steps per second.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use durably::runtime::{StartOptions, WorkflowHandle};
use durably::{Durability, Journal};
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::args::RecoveryWorkerArgs;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::scenarios::runtime_load::{
    self, CONCURRENCY, KIND, Load, Occupancy, PRODUCERS, StepSamples,
};
use crate::scenarios::{WriterSnapshot, batching_note, child, count, execution_ids};
use crate::stats::Samples;

/// Steps per workflow.
const STEPS: u32 = 10;

/// How often the harness counts the killed process's journaled steps.
const POLL: Duration = Duration::from_millis(2);

/// The target: recovered steps per second over the reference's.
const TARGET_RATIO: f64 = 0.8;

/// What the worker prints once every workflow is started.
const STARTED: &str = "started";

/// What the recovering runtime did, and how long each part took.
struct Recovered {
    /// The orphan sweep.
    sweep: Duration,
    /// The rest of `RuntimeBuilder::start`: the recovery pass, mostly.
    start: Duration,
    /// Claims and runs, to the last result.
    runs: Duration,
    /// Dead locks reclaimed, and running executions found with no holder.
    swept: (usize, usize),
    /// Executions the recovery pass requeued.
    requeued: usize,
    /// Executions running at once during the runs, on average.
    mean_running: f64,
    /// The writer's batching over the claims and runs (the sweep's and the recovery pass's
    /// few large transactions left out, so it compares with the references').
    batching: String,
    /// The latencies of the steps it ran.
    latencies: Samples,
}

impl Recovered {
    /// From the sweep to the last result.
    fn elapsed(&self) -> Duration {
        self.sweep + self.start + self.runs
    }

    /// `part` as a percentage of the whole.
    fn share(&self, part: Duration) -> f64 {
        100.0 * part.as_secs_f64() / self.elapsed().as_secs_f64()
    }
}

/// Measures the reference, kills a runtime process half way and recovers its work, then
/// measures the reference again.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let (workflows, reference_workflows) = if context.quick {
        (1_000, 500)
    } else {
        (10_000, 2_000)
    };
    let load = Load {
        workflows: reference_workflows,
        steps: STEPS,
        guarded: false,
    };
    let before = runtime_load::reference(context, &dir.join("reference-before.db"), load).await?;
    let (journal, at_kill) = run_and_kill(context, &dir.join("journal.db"), workflows).await?;
    let unfinished = unfinished(&journal)?;
    let recorded_before = recorded_steps(&journal)?;
    let recovered = recover(&journal, &unfinished).await?;
    let total = u64::from(workflows) * u64::from(STEPS);
    let recorded_after = recorded_steps(&journal)?;
    if recorded_after != total {
        return Err(BenchError::Unexpected(format!(
            "{recorded_after} steps recorded after recovery, not {total}"
        )));
    }
    let ops = recorded_after - recorded_before;
    // Fresh workflows of the shape recovery left: as many, with the steps each had left.
    let shape = Load {
        workflows: unfinished.len() as u32,
        steps: (ops as f64 / unfinished.len().max(1) as f64).round() as u32,
        guarded: false,
    };
    let after = runtime_load::reference(context, &dir.join("reference-after.db"), load).await?;
    let reference = f64::midpoint(before.steps_per_s, after.steps_per_s);
    let shaped = runtime_load::reference(context, &dir.join("shape.db"), shape).await?;
    let rate = |time: Duration| ops as f64 / time.as_secs_f64();
    let ratio = rate(recovered.elapsed()) / reference;
    let verdict = if ratio >= TARGET_RATIO {
        "meets"
    } else {
        "MISSES"
    };
    let notes = vec![
        format!(
            "{workflows} workflows x {STEPS} idempotent steps, all running at once in a runtime \
             process SIGKILLed at {at_kill} journaled steps; {} workflows unfinished \
             ({recorded_before} steps recorded), {ops} steps left, finished by a runtime at \
             concurrency {CONCURRENCY} in {:.2} s",
            unfinished.len(),
            recovered.elapsed().as_secs_f64()
        ),
        format!(
            "time: the orphan sweep {:.0} ms ({:.1} %: {} dead locks, {} running executions \
             with no holder), the rest of RuntimeBuilder::start {:.0} ms ({:.1} %: the recovery \
             pass requeued {}), claims and runs to the last result {:.0} ms ({:.1} %)",
            recovered.sweep.as_secs_f64() * 1e3,
            recovered.share(recovered.sweep),
            recovered.swept.0,
            recovered.swept.1,
            recovered.start.as_secs_f64() * 1e3,
            recovered.share(recovered.start),
            recovered.requeued,
            recovered.runs.as_secs_f64() * 1e3,
            recovered.share(recovered.runs),
        ),
        format!(
            "reference, `workflows` at concurrency {CONCURRENCY}: the same runtime running {} \
             fresh workflows x {STEPS} idempotent steps with Runtime::run from {PRODUCERS} \
             tasks on a fresh journal: {:.0} steps/s before, {:.0} after; recovery ran at \
             {ratio:.2} of their mean, which {verdict} the {TARGET_RATIO} target",
            load.workflows, before.steps_per_s, after.steps_per_s
        ),
        format!(
            "claims and runs alone: {:.0} steps/s, {:.2} of the references' mean; executions \
             running at once, on average: {:.1} there, {:.1} in the first reference",
            rate(recovered.runs),
            rate(recovered.runs) / reference,
            recovered.mean_running,
            before.mean_running
        ),
        format!("the claims and runs' {}", recovered.batching),
        format!("the first reference's {}", before.batching),
        format!(
            "fresh workflows of the shape recovery finished ({} x {} steps) run the same way \
             as the reference: {:.0} steps/s, {:.1} running at once on average; {}",
            shape.workflows, shape.steps, shaped.steps_per_s, shaped.mean_running, shaped.batching
        ),
    ];
    Ok(Outcome {
        ops,
        elapsed: recovered.elapsed(),
        latencies: recovered.latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

/// The executions the killed process left unfinished, in creation order.
fn unfinished(journal: &Journal) -> Result<Vec<Uuid>> {
    execution_ids(
        journal,
        "SELECT execution_id FROM executions WHERE status != 'completed' ORDER BY id",
    )
}

/// The recovery: the orphan sweep, a runtime's start, and every `unfinished` workflow's
/// result, each part timed.
async fn recover(journal: &Journal, unfinished: &[Uuid]) -> Result<Recovered> {
    let samples = StepSamples::default();
    let began = Instant::now();
    let swept = journal.operator().sweep(false).await?;
    let sweep = began.elapsed();
    let began = Instant::now();
    let runtime = runtime_load::builder(journal.clone(), &samples, None)
        .start()
        .await?;
    let start = began.elapsed();
    let writer_before = WriterSnapshot::take(journal);
    let (began, occupancy) = (Instant::now(), Occupancy::start(journal));
    for id in unfinished {
        let handle: WorkflowHandle<u32> = runtime.handle(*id);
        if handle.result().await? != STEPS {
            return Err(BenchError::Unexpected(format!(
                "recovered workflow {id} did not run its {STEPS} steps"
            )));
        }
    }
    let runs = began.elapsed();
    let recovered = Recovered {
        sweep,
        start,
        runs,
        swept: (swept.reclaimed.len(), swept.unlocked.len()),
        requeued: runtime.recovery_report().requeued,
        mean_running: occupancy.mean().await?,
        batching: batching_note(journal, writer_before),
        latencies: samples.take(),
    };
    runtime.shutdown();
    Ok(recovered)
}

/// Runs the worker on a new journal at `path` until half its steps are journaled, then
/// SIGKILLs it. Returns this process's journal on the file, opened while the worker was
/// alive, and the steps journaled when the kill was sent.
async fn run_and_kill(context: &Context, path: &Path, workflows: u32) -> Result<(Journal, u64)> {
    let arguments = [
        "--workflows".to_owned(),
        workflows.to_string(),
        "--steps".to_owned(),
        STEPS.to_string(),
    ];
    let mut worker = child::spawn(context, "recovery-worker", path, &arguments)?;
    let stdout = worker.stdout.take();
    // Kept open until the worker is dead, so its prints never meet a closed pipe.
    let _stdout = tokio::task::spawn_blocking(move || wait_for_line(stdout, STARTED)).await??;
    let journal = context.journal(path)?;
    let half = u64::from(workflows) * u64::from(STEPS) / 2;
    let at_kill = loop {
        // Rows are only added: the highest id is the count, read in one seek.
        let journaled = count(&journal, "SELECT coalesce(max(id), 0) FROM steps")?;
        if journaled >= half {
            break journaled;
        }
        if let Some(status) = try_wait(&mut worker)? {
            return Err(BenchError::Worker(format!(
                "the runtime process exited with {status} before half its steps were journaled"
            )));
        }
        tokio::time::sleep(POLL).await;
    };
    kill(worker).await?;
    Ok((journal, at_kill))
}

/// Reads `stdout` until a line reads `expected`; hands the reader back.
fn wait_for_line(
    stdout: Option<std::process::ChildStdout>,
    expected: &str,
) -> Result<BufReader<std::process::ChildStdout>> {
    let stdout = stdout.ok_or_else(|| BenchError::Worker("no stdout".to_owned()))?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|source| BenchError::io("read a worker's output", "stdout", source))?;
        if read == 0 {
            return Err(BenchError::Worker(format!(
                "ended without printing {expected:?}"
            )));
        }
        if line.trim() == expected {
            return Ok(reader);
        }
    }
}

fn try_wait(worker: &mut Child) -> Result<Option<std::process::ExitStatus>> {
    worker
        .try_wait()
        .map_err(|source| BenchError::io("check on a worker", "the worker", source))
}

/// SIGKILLs `worker` and reaps it, so its pid is gone when the sweep judges its locks.
async fn kill(mut worker: Child) -> Result<()> {
    worker
        .kill()
        .map_err(|source| BenchError::io("kill a worker", "the worker", source))?;
    tokio::task::spawn_blocking(move || worker.wait())
        .await?
        .map_err(|source| BenchError::io("reap a worker", "the worker", source))?;
    Ok(())
}

/// Steps recorded in the journal.
fn recorded_steps(journal: &Journal) -> Result<u64> {
    count(journal, "SELECT count(*) FROM steps")
}

/// The runtime process: a runtime allowed to run every workflow at once, whose runs wait at a
/// gate until all of them are running, so that they advance side by side. It starts them,
/// prints [`STARTED`], and runs until it is killed (or, if it never is, until every result is
/// in).
pub async fn worker(args: &RecoveryWorkerArgs, durability: Durability) -> Result<()> {
    let journal = Journal::builder(&args.db).durability(durability).open()?;
    let gate = Arc::new(Barrier::new(args.workflows as usize));
    let runtime = runtime_load::builder(journal, &StepSamples::default(), Some(gate))
        .concurrency_max(args.workflows)
        .start()
        .await?;
    let next = Arc::new(AtomicU32::new(0));
    let mut producers = Vec::with_capacity(PRODUCERS);
    for _ in 0..PRODUCERS {
        let (runtime, next) = (runtime.clone(), Arc::clone(&next));
        let (workflows, input) = (args.workflows, (args.steps, false));
        producers.push(tokio::spawn(async move {
            let mut handles: Vec<WorkflowHandle<u32>> = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < workflows {
                let (id, options) = (durably::new_execution_id(), StartOptions::default());
                handles.push(runtime.start(KIND, id, &input, options).await?);
            }
            Ok::<_, BenchError>(handles)
        }));
    }
    let mut handles = Vec::with_capacity(args.workflows as usize);
    for producer in producers {
        handles.extend(producer.await??);
    }
    println!("{STARTED}");
    for handle in handles {
        handle.result().await?;
    }
    runtime.shutdown();
    Ok(())
}
