//! The versioning part of the failpoint matrix's workload: an execution of [`PATCHED_KIND`]
//! answers a patch on its first run (the marker and its answer commit together:
//! `runtime::after-patch-answer-commit`) and completes; it is then forked from seq 1 (all its
//! steps), copying the marker and its answer (`runtime::after-fork-commit`), and the fork
//! replays the marker and completes with the same answer. Neither makes an effect, so the
//! ledger has nothing of them; the checker finds them finished.
//!
//! Rerunning it after a crash starts nothing twice (the start is idempotent by id) and forks
//! only when no fork of the execution exists yet: a crash after the fork's commit leaves the
//! fork queued, and the rerun awaits it.

use std::time::Duration;

use durably_runtime::{ForkOptions, Runtime, RuntimeBuilder, StartOptions, WorkflowContext};
use uuid::Uuid;

use super::BoxError;
use super::plan::SeededRng;

/// The kind whose execution answers a patch and is forked; it has no plan.
pub const PATCHED_KIND: &str = "matrix-patched";
/// The patch it answers.
const PATCH: &str = "matrix-patch";
/// The seed stream of its id.
const PATCHED_STREAM: u64 = 0x00fa_7c4e;
/// How long the execution and its fork may take to end.
const END_WAIT: Duration = Duration::from_mins(1);

/// `builder`, also serving [`PATCHED_KIND`]: the patch (its marker is its one step, the
/// runtime's own, which the checker expects no effect of); it returns the patch's answer.
pub fn serving_patched(builder: RuntimeBuilder) -> RuntimeBuilder {
    builder.register(
        PATCHED_KIND,
        1,
        |context: WorkflowContext, (): ()| async move {
            Ok::<_, durably_runtime::WorkflowError>(context.patched(PATCH).await?)
        },
    )
}

/// Runs the execution, forks it once, and awaits every fork of it.
///
/// # Errors
/// An unexpected runtime error, or an execution that did not answer `true`.
pub async fn patch_and_fork(runtime: &Runtime, seed: u64) -> Result<(), BoxError> {
    let mut rng = SeededRng::new(seed, PATCHED_STREAM);
    let id = uuid::Builder::from_random_bytes(
        *Uuid::from_u64_pair(rng.next_u64(), rng.next_u64()).as_bytes(),
    )
    .into_uuid();
    let handle = runtime
        .start::<(), bool>(PATCHED_KIND, id, &(), StartOptions::default())
        .await?;
    if !tokio::time::timeout(END_WAIT, handle.result()).await?? {
        return Err(format!("execution {id} answered false to a patch on new code").into());
    }
    let mut forks = forks_of(runtime, id)?;
    if forks.is_empty() {
        forks.push(runtime.fork(id, ForkOptions::from_seq(1)).await?);
    }
    for fork in forks {
        let answer =
            tokio::time::timeout(END_WAIT, runtime.handle::<bool>(fork).result()).await??;
        if !answer {
            return Err(format!("fork {fork} of {id} flipped its patch's answer").into());
        }
    }
    Ok(())
}

/// The forks of execution `id`.
fn forks_of(runtime: &Runtime, id: Uuid) -> Result<Vec<Uuid>, BoxError> {
    let ids: Vec<String> = runtime.journal().read(|conn| {
        let mut statement =
            conn.prepare("SELECT execution_id FROM runtime_executions WHERE forked_from = ?1")?;
        let rows = statement.query_map([id.to_string()], |row| row.get(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })?;
    Ok(ids.iter().map(|id| id.parse()).collect::<Result<_, _>>()?)
}
