//! The runtime's part of the failpoint matrix's workload, after the hand-driven part:
//!
//! 1. two runtimes on two journal instances of the file (two lock holders, as two processes
//!    would be), both serving kind [`RUNTIME_KIND`] with the limited queue [`QUEUE`];
//! 2. covering executions (every step kind and policy once) started through them, in the queue
//!    and with no queue, awaited to their end while the harness plays the operator (a `Fail`
//!    step a crash left ambiguous parks its execution for it);
//! 3. an execution held back by a far not-before time receives a message from the driver and
//!    is then cancelled while queued.
//!
//! Rerunning it after a crash starts nothing twice (starts are idempotent by id, the send's key
//! repeats, the cancel is refused once done) and lets recovery finish what the crash left.

use std::path::Path;
use std::sync::Arc;

use durably_journal::Durability;
use durably_runtime::{Client, StartOptions};

use super::BoxError;
use super::matrix::open_journal;
use super::plan::{ExecutionPlan, PlanInput, Shape};
use super::runtime_roles::{
    QUEUE, RUNTIME_INDEX_BASE, cancel_acked, drain, send_acked, start_runtime,
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
    for number in 0..RUNTIME_COVERING_EXECUTIONS {
        let input = covering(seed, number);
        let mut options = StartOptions::default();
        if number % 2 == 0 {
            options = options.queue(QUEUE);
        }
        let runtime = &runtimes[(number % 2) as usize];
        let id = ExecutionPlan::from_input(input).id;
        runtime
            .start::<_, RuntimeOutput>(RUNTIME_KIND, id, &input, options)
            .await?;
    }
    drain(workload, &runtimes[0]).await?;
    held_back(workload, &runtimes[0], seed).await?;
    for runtime in &runtimes {
        runtime.shutdown();
    }
    Ok(())
}

/// Starts an execution that no runtime may claim for a year, sends it a message, and cancels
/// it while it waits in its queue.
async fn held_back(workload: &Arc<Workload>, client: &Client, seed: u64) -> Result<(), BoxError> {
    let input = covering(seed, RUNTIME_COVERING_EXECUTIONS);
    let id = ExecutionPlan::from_input(input).id;
    let options = StartOptions::default()
        .queue(QUEUE)
        .not_before(chrono::Utc::now() + chrono::TimeDelta::days(HELD_BACK_DAYS));
    client
        .start::<_, RuntimeOutput>(RUNTIME_KIND, id, &input, options)
        .await?;
    send_acked(workload, client, id, "t0", "matrix-send").await?;
    cancel_acked(workload, id).await
}
