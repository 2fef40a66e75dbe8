//! The demo's scheduler part: two scheduler processes fire the same slots of one job at the
//! same moment, and each slot runs once. Each process also runs a runtime serving the job's
//! workflow; the workflow appends a `tick` to the effect ledger under the fire id in an
//! idempotent step, then waits on a durable timer, so the ledger shows how many times each
//! slot really ran.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use durably::Journal;
use durably::runtime::{Runtime, WorkflowContext, WorkflowError};
use durably::scheduler::{Fire, FireOutcome, Job, JobId, Overlap, Scheduler, Slot, fire_id};

use super::child::demo_child;
use super::ledger::Ledger;
use super::{Demo, failed, narrate};
use crate::error::{CliError, Result};

/// The demo's job.
const JOB: &str = "nightly-report";
/// Slots each scheduler process fires.
const SLOTS: u32 = 5;
/// The job's interval: one slot a minute.
const EVERY: Duration = Duration::from_mins(1);
/// The workflow kind each fire starts.
const WORKFLOW: &str = "nightly-report";
/// How long the fire's workflow waits on its timer, so the two processes overlap.
const BODY_MS: u64 = 40;
/// How far ahead the parent sets the common start, so both children are up by then.
const START_DELAY_MS: i64 = 400;

/// The slots fired, with their fire ids.
pub struct Fires {
    /// The job id.
    pub job: String,
    /// Each slot (RFC 3339) with its fire id.
    pub slots: Vec<(String, String)>,
}

/// Arguments of `durably demo-scheduler` (hidden).
#[derive(Debug, Clone, Args)]
pub struct SchedulerArgs {
    /// The journal.
    #[arg(long)]
    pub journal: PathBuf,
    /// The effect ledger.
    #[arg(long)]
    pub ledger: PathBuf,
    /// The first slot, in Unix epoch milliseconds.
    #[arg(long)]
    pub first_slot_ms: i64,
    /// When to start firing, in Unix epoch milliseconds (both processes start together).
    #[arg(long)]
    pub start_at_ms: i64,
}

/// Starts two scheduler processes on the same slots and relays what each did.
///
/// # Errors
/// A child could not be started or failed.
pub fn run(demo: &Demo, number: usize) -> Result<Fires> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let every_ms = EVERY.as_millis() as i64;
    let first_slot_ms = (now_ms / every_ms - i64::from(SLOTS)) * every_ms;
    narrate(&format!(
        "\n{number}. Scheduler — two scheduler processes fire the same {SLOTS} slots of job \
         {JOB:?} (one a minute) at the same moment. Each fire starts an execution of a \
         registered workflow whose id is derived from (job, slot), recorded with the slot in one \
         transaction, so exactly one process starts it and a runtime runs it once."
    ))?;
    let start_at_ms = now_ms + START_DELAY_MS;
    let mut children = (0..2)
        .map(|_| spawn(demo, first_slot_ms, start_at_ms))
        .collect::<Result<Vec<_>>>()?;
    // Held until both have finished: `wait_with_output` closes a child's stdin, and a closed
    // stdin tells a demo child its demo is gone.
    let _lifelines: Vec<_> = children
        .iter_mut()
        .map(|child| child.stdin.take())
        .collect();
    for child in children {
        let output = child
            .wait_with_output()
            .map_err(|error| failed(format!("cannot wait for a scheduler: {error}")))?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(text) = line.strip_prefix("say ") {
                narrate(&format!("   {text}"))?;
            }
        }
        if !output.status.success() {
            return Err(failed(format!(
                "a demo scheduler process failed ({}): {}",
                output.status,
                crate::escape::escape(String::from_utf8_lossy(&output.stderr).trim())
            )));
        }
    }
    let job = JobId::new(JOB)?;
    let slots = (0..SLOTS)
        .map(|index| {
            let slot = Slot::from_millis(first_slot_ms + i64::from(index) * every_ms)?;
            Ok((slot.to_rfc3339(), fire_id(&job, slot).to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Fires {
        job: JOB.to_owned(),
        slots,
    })
}

fn spawn(demo: &Demo, first_slot_ms: i64, start_at_ms: i64) -> Result<std::process::Child> {
    demo_child()?
        .arg("demo-scheduler")
        .arg("--journal")
        .arg(&demo.db)
        .arg("--ledger")
        .arg(demo.ledger.path())
        .arg("--first-slot-ms")
        .arg(first_slot_ms.to_string())
        .arg("--start-at-ms")
        .arg(start_at_ms.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| failed(format!("cannot start a demo scheduler: {error}")))
}

/// The child: registers the job and fires each slot once, saying what happened.
///
/// # Errors
/// A journal or scheduler error.
pub fn worker(args: &SchedulerArgs) -> Result<ExitCode> {
    crate::db::runtime()?.block_on(fire_all(args))?;
    Ok(ExitCode::SUCCESS)
}

/// The job's workflow: a tick in the effect ledger under the fire id, then a durable timer.
async fn report(ctx: WorkflowContext, fire: Fire, ledger: Ledger) -> Result<String, WorkflowError> {
    let key = fire.execution_id().to_string();
    ctx.idempotent("tick", move |_| {
        let appended = ledger
            .append("tick", &key, &key)
            .map_err(|error| durably::StepError::retryable(error.message));
        async move { appended }
    })
    .await?;
    ctx.sleep("work", Duration::from_millis(BODY_MS)).await?;
    Ok("sent".to_owned())
}

async fn fire_all(args: &SchedulerArgs) -> Result<()> {
    let journal = Journal::builder(&args.journal)
        .sweep_on_open(false)
        .open()?;
    let ledger = Ledger::at(&args.ledger);
    let runtime = Runtime::builder(journal)
        .register(WORKFLOW, 1, move |ctx, fire: Fire| {
            report(ctx, fire, ledger.clone())
        })
        .start()
        .await
        .map_err(|error| failed(error.to_string()))?;
    let scheduler = Scheduler::new((*runtime).clone())
        .await
        .map_err(|error| scheduler_error(&error))?;
    let job = Job::builder(JOB)
        .interval(EVERY, 0)
        // Slots are independent: a slot may start while another slot's fire runs.
        .overlap(Overlap::Allow)
        .workflow(WORKFLOW)
        .build()?;
    let job_id = job.id().clone();
    scheduler
        .register(job)
        .await
        .map_err(|error| scheduler_error(&error))?;
    let wait_ms = args.start_at_ms - chrono::Utc::now().timestamp_millis();
    if let Ok(wait_ms) = u64::try_from(wait_ms) {
        tokio::time::sleep(Duration::from_millis(wait_ms.min(5_000))).await;
    }
    let pid = std::process::id();
    let mut fired = Vec::new();
    for index in 0..SLOTS {
        let slot_ms = args.first_slot_ms + i64::from(index) * EVERY.as_millis() as i64;
        let slot = Slot::from_millis(slot_ms)?;
        let outcome = scheduler
            .fire(&job_id, slot)
            .await
            .map_err(|error| scheduler_error(&error))?;
        let what = match &outcome {
            FireOutcome::Started { .. } => "started it".to_owned(),
            FireOutcome::Existing { state, .. } => {
                format!("found it already started by the other process ({state}); started nothing")
            }
            FireOutcome::Skipped { reason, .. } => format!("skipped it ({reason})"),
            _ => "did something new".to_owned(),
        };
        fired.push(outcome.execution_id());
        let _ = crate::output::print(&format!(
            "say scheduler pid {pid}, slot {}: {}\n",
            slot.to_rfc3339(),
            crate::escape::escape(&what)
        ));
    }
    // Both processes serve the workflow, so either may run a fire; each waits for all five.
    for id in fired {
        runtime
            .handle::<String>(id)
            .result()
            .await
            .map_err(|error| failed(error.to_string()))?;
    }
    Ok(())
}

fn scheduler_error(error: &durably::scheduler::Error) -> CliError {
    failed(error.to_string())
}
