//! Executions run through `Runtime::run` in the failpoint matrix: the deferred open and
//! write-behind (rules W1–W5 of docs/design.md) under the same ledger and checker as the
//! hand-driven executions.
//!
//! Their plans are [`Shape::RuntimeRun`]: the covering plans with the `Fail` step under
//! `Retry` instead, since a run waits for its execution's end, and an execution awaiting an
//! operator has none until one answers. They run the runtime workload's workflow
//! ([`super::runtime_workflow`]), so acknowledgements follow what write-behind promises and
//! the checker's `lost` figure proves it: a step's outcome is acknowledged when the next
//! idempotent or guarded closure starts (W1 and W2: everything before it is durable by then),
//! and every outcome, with the end, once `run` has returned (W4: the end carries whatever was
//! pending). Never when a step call returns: its row may still be pending.

use std::sync::Arc;

use durably::runtime::{Runtime, StartOptions};
use durably_journal::Journal;

use super::BoxError;
use super::plan::{ExecutionPlan, PlanInput, Shape};
use super::runtime_roles::ack_result;
use super::runtime_workflow::{RUNTIME_VERSION, RuntimeOutput, workflow};
use super::workload::Workload;

/// The kind of the executions run through the runtime; the hand-driven passes and the
/// runtime workload's runtimes leave them alone.
pub const RUN_KIND: &str = "torture-run";
/// The first index of the run executions.
pub const RUN_FIRST: u64 = 200;
/// How many executions the matrix runs through the runtime.
pub const RUN_EXECUTIONS: u64 = 2;

/// The plan input of run execution `index`.
pub fn run_input(seed: u64, index: u64) -> PlanInput {
    PlanInput {
        seed,
        index,
        slot: 0,
        shape: Shape::RuntimeRun,
    }
}

/// A runtime on `journal` serving [`RUN_KIND`], whose workflow records effects and acks
/// through its own [`Workload`] on the same run directory.
///
/// # Errors
/// The runtime does not start, or the ledger cannot be opened.
pub async fn runtime(journal: &Journal, dir: &std::path::Path) -> Result<Runtime, BoxError> {
    let workload = Arc::new(Workload::new(journal.clone(), dir)?);
    Ok(Runtime::builder(journal.clone())
        .register(RUN_KIND, RUNTIME_VERSION, move |context, input| {
            workflow(Arc::clone(&workload), context, input)
        })
        .start()
        .await?)
}

/// Runs the run executions to their ends and acknowledges them.
///
/// # Errors
/// An engine error the workload never expects, or a ledger I/O error.
pub async fn run_all(runtime: &Runtime, workload: &Workload, seed: u64) -> Result<(), BoxError> {
    for index in RUN_FIRST..RUN_FIRST + RUN_EXECUTIONS {
        let input = run_input(seed, index);
        let id = ExecutionPlan::from_input(input).id;
        let ran = runtime
            .run::<PlanInput, RuntimeOutput>(RUN_KIND, id, &input, StartOptions::default())
            .await;
        ack_result(workload, id, ran)?;
    }
    Ok(())
}
