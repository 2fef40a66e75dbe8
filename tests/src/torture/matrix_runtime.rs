//! The runtime's part of the failpoint matrix's workload, after the hand-driven part:
//!
//! 1. two runtimes on two journal instances of the file (two lock holders, as two processes
//!    would be), both serving kind [`RUNTIME_KIND`] with the limited queue [`QUEUE`];
//! 2. an execution held back by a far not-before time receives a message from the driver and
//!    is then cancelled while queued;
//! 3. covering executions started through them, in the queue and with no queue: every step
//!    kind and policy once, a short and a parked timer, a message sent to itself and received,
//!    a receive of the driver's message (sent right after the start), a receive that times out
//!    while parked, a published event; awaited to their end while the harness plays the
//!    operator (a `Fail` step a crash left ambiguous parks its execution for it).
//!
//! Rerunning it after a crash starts nothing twice (starts are idempotent by id, the send's key
//! repeats, the cancel is refused once done) and lets recovery finish what the crash left.

use std::path::Path;
use std::sync::Arc;

use durably_journal::Durability;
use durably_runtime::{Client, StartOptions};
use uuid::Uuid;

use super::BoxError;
use super::matrix::open_journal;
use super::plan::{ExecutionPlan, PlanInput, Shape};
use super::runtime_roles::{
    QUEUE, RUNTIME_INDEX_BASE, cancel_acked, drain, send_acked, sent_topics, start_runtime,
};
use super::runtime_workflow::{RUNTIME_KIND, RuntimeOutput};
use super::workload::Workload;

/// Covering runtime executions: the even ones in [`QUEUE`], the odd ones in no queue.
pub const RUNTIME_COVERING_EXECUTIONS: u64 = 2;
/// How far in the future the held-back execution may start (it is cancelled long before).
const HELD_BACK_DAYS: i64 = 365;

fn covering(seed: u64, number: u64) -> PlanInput {
    PlanInput {
        seed,
        index: RUNTIME_INDEX_BASE + number,
        slot: 0,
        shape: Shape::RuntimeCovering,
    }
}

/// Runs the runtime's part of the matrix workload on `workload` (whose journal is one of the
/// two instances) in the run directory `dir`.
///
/// # Errors
/// An unexpected runtime or journal error.
pub async fn run(
    workload: &Arc<Workload>,
    dir: &Path,
    seed: u64,
    durability: Durability,
) -> Result<(), BoxError> {
    let other = Arc::new(Workload::new(open_journal(dir, durability, false)?, dir)?);
    let runtimes = [start_runtime(workload).await?, start_runtime(&other).await?];
    // First, so that a rerun after a crash ends it before it waits for every execution.
    held_back(workload, &runtimes[0], seed).await?;
    for number in 0..RUNTIME_COVERING_EXECUTIONS {
        let input = covering(seed, number);
        let mut options = StartOptions::default();
        if number % 2 == 0 {
            options = options.queue(QUEUE);
        }
        let runtime = &runtimes[(number % 2) as usize];
        start_and_send(workload, runtime, input, options).await?;
    }
    drain(workload, &runtimes[0]).await?;
    for runtime in &runtimes {
        runtime.shutdown();
    }
    Ok(())
}

/// Starts an execution that no runtime may claim for a year, sends it a message, and cancels
/// it while it waits in its queue.
async fn held_back(workload: &Arc<Workload>, client: &Client, seed: u64) -> Result<(), BoxError> {
    let input = covering(seed, RUNTIME_COVERING_EXECUTIONS);
    let options = StartOptions::default()
        .queue(QUEUE)
        .not_before(chrono::Utc::now() + chrono::TimeDelta::days(HELD_BACK_DAYS));
    let id = start_and_send(workload, client, input, options).await?;
    cancel_acked(workload, id).await
}

/// Starts the execution `input` describes and sends it a message on each topic its plan
/// receives the driver's messages on.
async fn start_and_send(
    workload: &Workload,
    client: &Client,
    input: PlanInput,
    options: StartOptions,
) -> Result<Uuid, BoxError> {
    let plan = ExecutionPlan::from_input(input);
    client
        .start::<_, RuntimeOutput>(RUNTIME_KIND, plan.id, &input, options)
        .await?;
    for topic in sent_topics(&plan) {
        let key = format!("matrix-{}-{topic}", input.index);
        send_acked(workload, client, plan.id, &topic, &key).await?;
    }
    Ok(plan.id)
}
