//! One file per scenario, and the step helpers they share.

pub mod concurrent;
pub mod multiprocess;
pub mod replay;
pub mod scale;
pub mod scheduler;
pub mod seq;
pub mod workflows;

use durably_journal::{Execution, Guarded, Journal, Opened, Policy, StepError};
use uuid::Uuid;

use crate::args::EffectArg;
use crate::error::{BenchError, Result};

/// The name every benchmark step has.
pub const STEP_NAME: &str = "step";

/// Opens a new execution and insists it is running.
pub async fn open_running(journal: &Journal, id: Uuid) -> Result<Execution> {
    match journal.open_execution(id, "bench", "bench", &0_u32).await? {
        Opened::Running(execution) => Ok(execution),
        Opened::Finished(finished) => Err(BenchError::Unexpected(format!(
            "execution {} was already finished",
            finished.execution_id
        ))),
    }
}

/// Runs one step of the given kind whose closure does nothing but return a small value.
pub async fn step(execution: &mut Execution, effect: EffectArg) -> Result<u32> {
    match effect {
        EffectArg::Pure => Ok(execution
            .pure(STEP_NAME, || async { Ok::<u32, StepError>(1) })
            .await?),
        EffectArg::Idempotent => Ok(execution
            .idempotent(STEP_NAME, |_key| async { Ok::<u32, StepError>(1) })
            .await?),
        EffectArg::Guarded => {
            match execution
                .guarded(STEP_NAME, Policy::Fail, |_key| async {
                    Ok::<u32, StepError>(1)
                })
                .await?
            {
                Guarded::Done(value) => Ok(value),
                Guarded::Skipped(skipped) => Err(BenchError::Unexpected(skipped.to_string())),
            }
        }
    }
}

/// Commits per request of the writer between two snapshots, as a note.
pub fn batching_note(journal: &Journal, before: durably_journal::WriterStats) -> String {
    let after = journal.writer_stats();
    let commits = after.commits.saturating_sub(before.commits);
    let requests = after.requests.saturating_sub(before.requests);
    let per_commit = if commits > 0 {
        requests as f64 / commits as f64
    } else {
        0.0
    };
    format!("writer: {requests} requests in {commits} commits ({per_commit:.1} requests/commit)")
}
