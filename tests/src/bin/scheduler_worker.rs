//! Test helper for the `scheduler_*` integration tests: one scheduler process running one
//! interval job, and a runtime serving the job's workflow, until its stdin closes.
//!
//! Usage: `scheduler_worker <database> <ledger> <every-ms> <skip|retry> <block-first: 0|1>
//! <overlap: skip|allow>`.
//!
//! The job `tick` fires every `every-ms` on the grid through the Unix epoch, with catch-up
//! `All` (60 s window, cap 1000), so no slot is ever skipped as missed. Each fire starts the
//! workflow `tick`, which any of the processes may run: a guarded step `effect` under the
//! given ambiguity policy, a durable timer, and a pure step. The guarded step appends
//! `tick <slot-ms> <idempotency-key> <pid>` to the ledger file, opened with `O_APPEND`: the
//! independent record of effects that the tests check. With `block-first` 1, the first effect
//! of the process then appends its slot to `<ledger>.blocked` and blocks forever, so the test
//! can SIGKILL the process in the middle of a fire's step (with overlap `skip`, nothing else
//! starts meanwhile).
//!
//! On the end of stdin the loop stops, the process waits (bounded) until every fire in the
//! ledger has ended, so fires started by a process that is leaving still finish, and exits.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durably_journal::{Journal, Policy, StepError};
use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
use durably_scheduler::{CatchUp, Fire, Job, Overlap, Scheduler};

type Outcome = Result<(), Box<dyn std::error::Error>>;

/// How long a leaving process waits for the fires in the ledger to end.
const DRAIN_MAX: Duration = Duration::from_secs(20);

fn append(path: &str, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(line.as_bytes())?;
    file.sync_data()
}

fn main() -> Outcome {
    let args: Vec<String> = std::env::args().collect();
    let [_, database, ledger, every_ms, policy, block_first, overlap] = &args[..] else {
        return Err(
            "usage: scheduler_worker <database> <ledger> <every-ms> <skip|retry> <0|1> \
                    <skip|allow>"
                .into(),
        );
    };
    let overlap = match overlap.as_str() {
        "skip" => Overlap::Skip,
        "allow" => Overlap::Allow,
        other => return Err(format!("unknown overlap {other:?}").into()),
    };
    let every = Duration::from_millis(every_ms.parse()?);
    let policy = match policy.as_str() {
        "skip" => Policy::Skip,
        "retry" => Policy::Retry,
        other => return Err(format!("unknown policy {other:?}").into()),
    };
    let block = Arc::new(AtomicBool::new(block_first == "1"));
    let ledger = ledger.clone();
    let journal = Journal::open(database)?;
    let job = Job::builder("tick")
        .interval(every, 0)
        .catch_up(CatchUp::All {
            window: Duration::from_mins(1),
            max: 1000,
        })
        .overlap(overlap)
        .workflow("tick")
        .build()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let workflow = move |ctx: WorkflowContext, fire: Fire| {
            tick(
                ctx,
                fire,
                policy.clone(),
                ledger.clone(),
                Arc::clone(&block),
            )
        };
        let runtime = Runtime::builder(journal)
            .register("tick", 1, workflow)
            .start()
            .await?;
        let scheduler = Scheduler::builder((*runtime).clone())
            .tick_max(Duration::from_millis(50))
            .build()
            .await?;
        let _ = scheduler.register(job).await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            let _ = stop.send(());
        });
        scheduler
            .run(async move {
                let _ = stopped.await;
            })
            .await;
        drain(&runtime).await?;
        runtime.shutdown();
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// The job's workflow: the effect as a guarded step, a durable timer, a pure step.
async fn tick(
    ctx: WorkflowContext,
    fire: Fire,
    policy: Policy,
    ledger: String,
    block: Arc<AtomicBool>,
) -> Result<i64, WorkflowError> {
    let slot = fire.slot.as_millis();
    let _ = ctx
        .guarded("effect", policy, move |key| {
            let (ledger, block) = (ledger.clone(), Arc::clone(&block));
            async move {
                let line = format!(
                    "tick {slot} {} {}\n",
                    key.idempotency_key(),
                    std::process::id()
                );
                append(&ledger, &line).map_err(|error| StepError::fatal(error.to_string()))?;
                if block.swap(false, Ordering::SeqCst) {
                    append(&format!("{ledger}.blocked"), &format!("{slot}\n"))
                        .map_err(|error| StepError::fatal(error.to_string()))?;
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
        .await?;
    ctx.sleep("settle", Duration::from_millis(5)).await?;
    let done = ctx.pure("done", || async move { Ok(slot) }).await?;
    Ok(done)
}

/// Waits, at most [`DRAIN_MAX`], until no fire in the ledger is unfinished.
async fn drain(runtime: &Runtime) -> Outcome {
    let deadline = tokio::time::Instant::now() + DRAIN_MAX;
    loop {
        let unfinished: i64 = runtime.journal().read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM fire_ledger WHERE state IN ('pending', 'running')",
                [],
                |row| row.get(0),
            )?)
        })?;
        if unfinished == 0 || tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
