//! Test helper for the `scheduler_*` integration tests: one scheduler process running one
//! interval job until its stdin closes.
//!
//! Usage: `scheduler_worker <database> <ledger> <every-ms> <skip|retry> <block-first: 0|1>
//! <overlap: skip|allow>`.
//!
//! The job `tick` fires every `every-ms` on the grid through the Unix epoch, with catch-up
//! `All` (60 s window, cap 1000), so no slot is ever skipped as missed. Its body appends
//! `tick <slot-ms> <idempotency-key> <pid>` to the ledger file, opened with `O_APPEND`: the
//! independent record of effects that the tests check. With `block-first` 1, the first body
//! call of the process then appends its slot to `<ledger>.blocked` and blocks forever, so the
//! test can SIGKILL the process in the middle of a fire (with overlap `skip`, nothing else runs
//! meanwhile).
//!
//! On the end of stdin the loop shuts down gracefully, and the process exits.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durably_journal::Journal;
use durably_scheduler::{CatchUp, Job, Overlap, Policy, Scheduler, StepError};

type Outcome = Result<(), Box<dyn std::error::Error>>;

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
        .policy(policy)
        .body(move |context| {
            let (ledger, block) = (ledger.clone(), Arc::clone(&block));
            async move {
                let line = format!(
                    "tick {} {} {}\n",
                    context.slot.as_millis(),
                    context.idempotency_key,
                    std::process::id()
                );
                append(&ledger, &line).map_err(|error| StepError::fatal(error.to_string()))?;
                if block.swap(false, Ordering::SeqCst) {
                    let marker = format!("{}\n", context.slot.as_millis());
                    append(&format!("{ledger}.blocked"), &marker)
                        .map_err(|error| StepError::fatal(error.to_string()))?;
                    std::future::pending::<()>().await;
                }
                Ok(serde_json::Value::Null)
            }
        })
        .build()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let scheduler = Scheduler::builder(journal)
            .tick_max(Duration::from_millis(50))
            .shutdown_grace(Duration::from_secs(10))
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
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
