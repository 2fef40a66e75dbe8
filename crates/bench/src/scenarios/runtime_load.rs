//! What the runtime scenarios (`queue`, `recovery`, `parked`) share: the registered workflow
//! they run, a runtime configured the same way for each, and the load of producer tasks that
//! start workflows and await their results.
//!
//! The workflow runs `steps` steps of one kind whose closures only return a small value, so
//! what is measured is the runtime and the journal under it. Each step whose closure ran is
//! timed from the step call to its return; replayed steps (a resumed workflow's recorded
//! ones) are not, since they never reach the disk.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use durably::runtime::{Runtime, RuntimeBuilder, StartOptions, WorkflowContext, WorkflowError};
use durably::{Guarded, Journal, Policy, StepError};
use tokio::sync::Barrier;

use crate::args::IdsArg;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::scenarios::{STEP_NAME, WriterSnapshot, batching_note, count};
use crate::stats::Samples;

/// The workflow kind every runtime scenario registers.
pub const KIND: &str = "bench";

/// The runtime's limit on executions running at once in this process, as the issue's
/// reference figure (`workflows` at concurrency 64) has it.
pub const CONCURRENCY: u32 = 64;

/// Tasks that start workflows at once.
pub const PRODUCERS: usize = 64;

/// A workflow's input: how many steps it runs, and whether they are guarded (else
/// idempotent).
pub type Input = (u32, bool);

/// How many workflows of how many steps of which kind.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Workflows to start.
    pub workflows: u32,
    /// Steps each.
    pub steps: u32,
    /// Guarded steps (intent, closure, result) instead of idempotent ones (one commit).
    pub guarded: bool,
}

impl Load {
    /// Every step of every workflow.
    pub fn total_steps(self) -> u64 {
        u64::from(self.workflows) * u64::from(self.steps)
    }

    /// The name of the step kind, for notes.
    pub fn effect(self) -> &'static str {
        if self.guarded {
            "guarded"
        } else {
            "idempotent"
        }
    }
}

/// The latencies of the steps the workflow ran, shared by all its executions.
#[derive(Debug, Clone, Default)]
pub struct StepSamples(Arc<Mutex<Samples>>);

impl StepSamples {
    fn record(&self, latency: Duration) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(latency);
    }

    /// Takes the samples recorded so far.
    pub fn take(&self) -> Samples {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A runtime on `journal` serving [`KIND`] at [`CONCURRENCY`], recording its steps'
/// latencies in `samples`. With a `gate`, every run waits at it before its first step.
pub fn builder(
    journal: Journal,
    samples: &StepSamples,
    gate: Option<Arc<Barrier>>,
) -> RuntimeBuilder {
    let samples = samples.clone();
    Runtime::builder(journal)
        .concurrency_max(CONCURRENCY)
        .register(KIND, 1, move |context, input: Input| {
            run_steps(context, input, samples.clone(), gate.clone())
        })
}

/// The workflow: `steps` steps of the chosen kind, then the count as its output.
async fn run_steps(
    context: WorkflowContext,
    (steps, guarded): Input,
    samples: StepSamples,
    gate: Option<Arc<Barrier>>,
) -> Result<u32, WorkflowError> {
    if let Some(gate) = gate {
        gate.wait().await;
    }
    for _ in 0..steps {
        let ran = AtomicBool::new(false);
        let body = |_key| {
            ran.store(true, Ordering::Relaxed);
            async { Ok::<u32, StepError>(1) }
        };
        let began = Instant::now();
        if guarded {
            if let Guarded::Skipped(skipped) =
                context.guarded(STEP_NAME, Policy::Fail, body).await?
            {
                return Err(WorkflowError::new(skipped.to_string()));
            }
        } else {
            context.idempotent(STEP_NAME, body).await?;
        }
        if ran.load(Ordering::Relaxed) {
            samples.record(began.elapsed());
        }
    }
    Ok(steps)
}

/// Runs `load` on `runtime` from [`PRODUCERS`] tasks, each starting its share of the workflows
/// (into `queue`, if given) and then awaiting their results in start order. Returns the time
/// from the first start to the last result.
pub async fn drive(
    runtime: &Runtime,
    load: Load,
    queue: Option<&'static str>,
    ids: IdsArg,
) -> Result<Duration> {
    let next = Arc::new(AtomicU32::new(0));
    let began = Instant::now();
    let mut producers = Vec::with_capacity(PRODUCERS);
    for _ in 0..PRODUCERS {
        let (runtime, next) = (runtime.clone(), Arc::clone(&next));
        producers.push(tokio::spawn(async move {
            produce(&runtime, &next, load, queue, ids).await
        }));
    }
    for producer in producers {
        producer.await??;
    }
    Ok(began.elapsed())
}

async fn produce(
    runtime: &Runtime,
    next: &AtomicU32,
    load: Load,
    queue: Option<&'static str>,
    ids: IdsArg,
) -> Result<()> {
    let mut handles = Vec::new();
    while next.fetch_add(1, Ordering::Relaxed) < load.workflows {
        let options = match queue {
            Some(queue) => StartOptions::default().queue(queue),
            None => StartOptions::default(),
        };
        let input: Input = (load.steps, load.guarded);
        handles.push(
            runtime
                .start::<_, u32>(KIND, ids.new_id(), &input, options)
                .await?,
        );
    }
    for handle in handles {
        let ran = handle.result().await?;
        if ran != load.steps {
            return Err(BenchError::Unexpected(format!(
                "workflow {} ran {ran} of {} steps",
                handle.id(),
                load.steps
            )));
        }
    }
    Ok(())
}

/// How often [`Occupancy`] counts the running executions.
const OCCUPANCY_INTERVAL: Duration = Duration::from_millis(10);

/// How many executions are `running` on a journal, on average over a stretch of time: below
/// [`CONCURRENCY`], slots stood empty between one run's end and the next claim.
pub struct Occupancy {
    stop: Arc<AtomicBool>,
    /// The sum of the counts and how many were taken.
    task: tokio::task::JoinHandle<Result<(u64, u64)>>,
}

impl Occupancy {
    /// Starts counting, every [`OCCUPANCY_INTERVAL`] (one seek on the status index each).
    pub fn start(journal: &Journal) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (journal, stopped) = (journal.clone(), Arc::clone(&stop));
        let task = tokio::spawn(async move {
            let (mut sum, mut taken) = (0_u64, 0_u64);
            while !stopped.load(Ordering::Relaxed) {
                let running = count(
                    &journal,
                    "SELECT count(*) FROM executions WHERE status = 'running'",
                )?;
                (sum, taken) = (sum + running, taken + 1);
                tokio::time::sleep(OCCUPANCY_INTERVAL).await;
            }
            Ok((sum, taken))
        });
        Self { stop, task }
    }

    /// Stops counting and returns the mean count.
    pub async fn mean(self) -> Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let (sum, taken) = self.task.await??;
        Ok(sum as f64 / taken.max(1) as f64)
    }
}

/// What [`reference`] measured.
#[derive(Debug, Clone)]
pub struct Reference {
    /// Steps per second.
    pub steps_per_s: f64,
    /// Executions running at once, on average.
    pub mean_running: f64,
    /// The writer's batching over the run ([`batching_note`]).
    pub batching: String,
}

/// The reference figure of the runtime scenarios, the issue's "`workflows` at concurrency
/// 64": `load` on a fresh journal at `path`, through a runtime at [`CONCURRENCY`], as
/// `workflows --concurrency 64` runs it: [`PRODUCERS`] tasks each calling `Runtime::run` for
/// one workflow after another (the execution's row and lock ride on its first write, its end
/// on its last, and the task runs it itself: no claim, no pass).
pub async fn reference(context: &Context, path: &Path, load: Load) -> Result<Reference> {
    let journal = context.journal(path)?;
    let runtime = builder(journal.clone(), &StepSamples::default(), None)
        .start()
        .await?;
    let (writer_before, occupancy) = (WriterSnapshot::take(&journal), Occupancy::start(&journal));
    let next = Arc::new(AtomicU32::new(0));
    let began = Instant::now();
    let mut runners = Vec::with_capacity(PRODUCERS);
    for _ in 0..PRODUCERS {
        let (runtime, next, ids) = (runtime.clone(), Arc::clone(&next), context.execution_ids);
        runners.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < load.workflows {
                let input: Input = (load.steps, load.guarded);
                let ran: u32 = runtime
                    .run(KIND, ids.new_id(), &input, StartOptions::default())
                    .await?;
                if ran != load.steps {
                    return Err(BenchError::Unexpected(format!(
                        "a workflow ran {ran} of {} steps",
                        load.steps
                    )));
                }
            }
            Ok(())
        }));
    }
    for runner in runners {
        runner.await??;
    }
    let elapsed = began.elapsed();
    let mean_running = occupancy.mean().await?;
    let batching = batching_note(&journal, writer_before);
    runtime.shutdown();
    Ok(Reference {
        steps_per_s: load.total_steps() as f64 / elapsed.as_secs_f64(),
        mean_running,
        batching,
    })
}
