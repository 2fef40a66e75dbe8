//! One run of a workflow on an open execution, and how it ends.

use durably_journal::Execution;
use serde_json::json;

use crate::cancel::RunWatch;
use crate::context::{Stop, WorkflowContext};
use crate::error::{Error, Result};
use crate::registry::Workflow;
use crate::store;

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Ran {
    /// The workflow returned its output, recorded as the execution's.
    Completed,
    /// The workflow returned its error, recorded as the execution's.
    Failed,
    /// The stored input does not decode as the workflow's input type (a start from a process
    /// that could not check it): the execution failed with `{"bad_input": reason}`.
    BadInput,
    /// The run was asked to stop (a cancel request, its deadline): the execution is
    /// `cancelled`.
    Cancelled,
    /// A pure or idempotent step ran past its timeout: the execution failed with reason
    /// `step_timeout`, resumable.
    TimedOut,
    /// A step error stopped the execution (lock lost, non-determinism, an ambiguous step left
    /// to an operator, storage, a guarded step past its timeout): nothing was finalized and
    /// the lock is released, so the execution is resumed or parked by whoever accounts for
    /// failed runs.
    Halted(String),
}

/// Runs `workflow` (registered at `version`) on `execution` and ends it: completed or failed
/// with what the workflow returned, in the transaction that releases the lock; `cancelled`
/// when the run was asked to stop, whatever the workflow returned.
pub(crate) async fn run(
    execution: Execution,
    version: u32,
    workflow: &Workflow,
    watch: &RunWatch,
) -> Result<Ran> {
    let input: serde_json::Value = execution.input()?;
    let (context, slot) = WorkflowContext::new(execution, version, watch);
    let outcome = match workflow.start(context, input) {
        Ok(running) => Some(running.await),
        Err(_) => None,
    };
    let mut slot = slot.lock().await;
    let execution = slot.execution.take().ok_or_else(|| {
        Error::Journal(durably_journal::Error::Inconsistent(
            "a workflow's execution was taken before its task ended it".to_owned(),
        ))
    })?;
    // A cancel wins over every other ending: the operator or the deadline said to stop.
    let stopped = slot.stopped.take();
    if let Some(reason) = watch.signal().reason() {
        return watch.finish_cancelled(execution, &reason).await;
    }
    match stopped {
        Some(Stop::Cancelled(reason)) => return watch.finish_cancelled(execution, &reason).await,
        Some(Stop::TimedOut(timeout)) => return timeout.end(execution).await,
        Some(Stop::Halted(reason)) => {
            // Dropping the handle releases the lock and leaves the execution to be resumed.
            drop(execution);
            return Ok(Ran::Halted(reason));
        }
        None => {}
    }
    let id = execution.id();
    let clear_deadline = move |conn: &rusqlite::Connection| store::set_deadline(conn, id, None);
    match outcome {
        Some(Ok(output)) => {
            let completed = execution.complete_with(&output, clear_deadline).await;
            watch.unless_cancelled(completed, Ran::Completed).await
        }
        Some(Err(error)) => {
            execution.fail_with(&error, clear_deadline).await?;
            Ok(Ran::Failed)
        }
        None => {
            // The decoding error quotes the input: only its type's expectation is recorded.
            let bad_input = json!({ "bad_input": format!("the input does not decode as {}", workflow.input_type()) });
            execution.fail_with(&bad_input, clear_deadline).await?;
            Ok(Ran::BadInput)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use durably_journal::{Journal, Opened, Status, StepError};

    use super::*;
    use crate::error::WorkflowError;
    use crate::registry::Registry;

    async fn double(mut context: WorkflowContext, n: u32) -> Result<u64, WorkflowError> {
        let doubled = context
            .pure("double", || async move { Ok(u64::from(n) * 2) })
            .await?;
        if doubled == 0 {
            context
                .pure("refuse zero", || async {
                    Err::<(), _>(StepError::fatal("zero"))
                })
                .await?;
        }
        Ok(doubled)
    }

    async fn run_on(journal: &Journal, input: &serde_json::Value) -> (uuid::Uuid, Ran) {
        let client = crate::Client::new(journal.clone()).await.unwrap();
        let clock: std::sync::Arc<dyn crate::Clock> = std::sync::Arc::new(crate::SystemClock);
        let mut registry = Registry::default();
        registry.register("double", 1, double);
        let (_, workflow) = registry.latest("double").unwrap();
        let id = durably_journal::new_execution_id();
        let Opened::Running(execution) = journal
            .open_execution(id, "double", "", input)
            .await
            .unwrap()
        else {
            unreachable!("a new execution is never finished");
        };
        let watch = RunWatch::start(&client, &clock, &std::sync::Arc::default(), id);
        (id, run(execution, 1, workflow, &watch).await.unwrap())
    }

    /// A workflow's output is recorded as the execution's; its error (here a step's recorded
    /// failure passed on with `?`) fails the execution; an input of another type fails it as
    /// bad input without running the workflow.
    #[tokio::test]
    async fn runs_end_in_the_workflows_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path().join("journal.db")).unwrap();

        let (id, ran) = run_on(&journal, &serde_json::json!(21)).await;
        assert!(matches!(ran, Ran::Completed), "{ran:?}");
        let record = journal.get(id).unwrap().unwrap();
        assert_eq!(record.output.unwrap().decode::<u64>().unwrap(), 42);

        let (id, ran) = run_on(&journal, &serde_json::json!(0)).await;
        assert!(matches!(ran, Ran::Failed), "{ran:?}");
        let record = journal.get(id).unwrap().unwrap();
        assert_eq!(record.status, Status::Failed);
        let error: WorkflowError = record.error.unwrap().decode().unwrap();
        assert!(error.message.contains("zero"), "{error:?}");

        let (id, ran) = run_on(&journal, &serde_json::json!("twenty-one")).await;
        assert!(matches!(ran, Ran::BadInput), "{ran:?}");
        let record = journal.get(id).unwrap().unwrap();
        assert_eq!(record.status, Status::Failed);
        assert!(record.error.unwrap().as_json().contains("bad_input"));
        assert!(
            journal.steps(id).unwrap().is_empty(),
            "the workflow ran on bad input"
        );
    }
}
