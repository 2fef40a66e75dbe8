//! One run of a workflow on an open execution, and how it ends.
//!
//! Runs write behind ([`Execution::defer_results`]): step results ride on the run's next
//! write, and the end (completed or failed) rides on the last step's, so a workflow of N
//! idempotent steps costs N commits.

use durably_journal::Execution;
use serde_json::json;
use tracing::Instrument;

use crate::cancel::RunWatch;
use crate::context::{Stop, WorkflowContext};
use crate::error::{Error, Result};
use crate::handover::{Ending, HandOver, end};
use crate::registry::Workflow;
use crate::store;

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Ran {
    /// The workflow returned its output, recorded as the execution's.
    Completed(serde_json::Value),
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
    /// A guarded step ran past its timeout: the execution is back in its queue, the step's
    /// intent left to its policy.
    Requeued,
    /// A step error stopped the execution (lock lost, non-determinism, an ambiguous step left
    /// to an operator, storage): nothing was finalized and the lock is released, so the
    /// execution is resumed or parked by whoever accounts for failed runs.
    Halted(String),
    /// Replay met a recorded step other than the one the code calls: the execution is parked
    /// `stuck` with the diff, until an operator resumes it on fixed code.
    Diverged,
    /// The run's first write lost a deferred open's race: the execution is another run's, and
    /// this one wrote nothing.
    Raced,
    /// A wait parked the execution (`waiting`, its lock released): the workflow's future was
    /// dropped, and a later claim resumes it.
    Parked,
}

/// Runs `workflow` (registered at `version`) on `execution` and ends it: completed or failed
/// with what the workflow returned, in the transaction that releases the lock (and, with a
/// `hand_over`, claims the run's successor); parked by one of its waits; or `cancelled` when
/// the run was asked to stop, whatever the workflow returned. The workflow's code and the
/// end run inside the execution's span, so what they trace nests under the run.
pub(crate) async fn run(
    execution: Execution,
    version: u32,
    workflow: &Workflow,
    watch: &RunWatch,
    hand_over: Option<&HandOver>,
) -> Result<Ran> {
    let span = execution.span().clone();
    run_in_span(execution, version, workflow, watch, hand_over)
        .instrument(span)
        .await
}

async fn run_in_span(
    mut execution: Execution,
    version: u32,
    workflow: &Workflow,
    watch: &RunWatch,
    hand_over: Option<&HandOver>,
) -> Result<Ran> {
    execution.defer_results();
    let input: serde_json::Value = execution.input()?;
    let waits = std::sync::Arc::clone(watch.waits());
    let (context, slot, parked) =
        WorkflowContext::new(execution, version, waits, watch.signal().clone());
    let outcome = match workflow.start(context, input) {
        Ok(running) => tokio::select! {
            outcome = running => Some(outcome),
            // The park has released the execution; dropping the future ends the run here.
            () = parked.notified() => return Ok(Ran::Parked),
        },
        Err(_) => None,
    };
    // Exclusive: waits for every step still holding a lease (one the workflow spawned and
    // left running); a step called after this is refused.
    let execution = slot.execution.write().await.take().ok_or_else(|| {
        Error::Journal(durably_journal::Error::Inconsistent(
            "a workflow's execution was taken before its task ended it".to_owned(),
        ))
    })?;
    // A cancel wins over every other ending: the operator or the deadline said to stop.
    let ending = slot.take_ending();
    let stopped = ending.stopped;
    let now = durably_lock::Clock::now(watch.waits().clock.as_ref());
    #[cfg(feature = "failpoints")]
    let id = execution.id();
    if let Some(reason) = watch.signal().reason() {
        return watch.finish_cancelled(execution, &reason).await;
    }
    match stopped {
        Some(Stop::Cancelled(reason)) => return watch.finish_cancelled(execution, &reason).await,
        Some(Stop::TimedOut(timeout)) => {
            return match timeout.end(execution, now).await {
                // The failure was the run's first write (a deferred open), and another run of
                // the id opened it first: that run goes on, this one lost the race.
                Err(Error::Journal(durably_journal::Error::OpenRaced(_))) => Ok(Ran::Raced),
                ended => ended,
            };
        }
        Some(Stop::Halted(_)) if ending.raced => {
            drop(execution);
            return Ok(Ran::Raced);
        }
        Some(Stop::Halted(reason)) => return Ok(halt(execution, reason).await),
        Some(Stop::Diverged(detail)) => return crate::diverged::park(execution, detail).await,
        None => {}
    }
    let (ended, ran) = match outcome {
        Some(Ok(output)) => {
            let ended = end(execution, Ending::Completed, &output, hand_over, now).await;
            (ended, Ran::Completed(output))
        }
        Some(Err(error)) => {
            let ended = end(execution, Ending::Failed, &error, hand_over, now).await;
            (ended, Ran::Failed)
        }
        None => {
            // The decoding error quotes the input: only its type's expectation is recorded.
            let reason = format!("the input does not decode as {}", workflow.input_type());
            let error = json!({ "bad_input": reason });
            let ended = end(execution, Ending::Failed, &error, hand_over, now).await;
            (ended, Ran::BadInput)
        }
    };
    match ended {
        // The end was the run's first write (no step wrote before it), and it lost the race.
        Err(durably_journal::Error::OpenRaced(_)) => Ok(Ran::Raced),
        ended @ Err(durably_journal::Error::CancelRequested { .. }) => {
            watch.unless_cancelled(ended, ran).await
        }
        Err(error) => Err(error.into()),
        Ok(()) => {
            fail::fail_point!("runtime::after-finalize-commit", |_| std::process::abort());
            #[cfg(feature = "failpoints")]
            if crate::children::is_child(&watch.waits().client, id) {
                fail::fail_point!("runtime::after-child-end-commit", |_| std::process::abort());
            }
            Ok(ran)
        }
    }
}

/// The runtime's rows of the transaction that ends execution `id` at `now`: its deadline is
/// cleared (an ended execution's deadline would only wake the dispatcher for nothing), and its
/// family is told ([`crate::children::settle`]: its parent, its children if it was cancelled).
pub(crate) fn clear_deadline(
    id: uuid::Uuid,
    now: chrono::DateTime<chrono::Utc>,
) -> impl FnOnce(&durably_db::Connection) -> durably_journal::Result<()> + Send + 'static {
    move |conn| {
        store::set_deadline(conn, id, None)?;
        crate::children::settle(conn, id, now)
    }
}

/// Ends a run that a step error stopped, without ending its execution. What the run recorded
/// before it stopped stays recorded, so the failure accounting sees its progress; a flush that
/// fails (the lock is lost, the open raced, a cancel request) loses only steps that run again.
/// Dropping the handle then releases the lock and leaves the execution to be resumed.
async fn halt(execution: Execution, reason: String) -> Ran {
    if let Err(error) = execution.flush().await {
        tracing::debug!(execution_id = %execution.id(), %error, "a stopped run's steps were not kept");
    }
    drop(execution);
    Ran::Halted(reason)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use durably_journal::{Journal, Opened, Status, StepError};

    use super::*;
    use crate::error::WorkflowError;
    use crate::registry::Registry;

    async fn double(context: WorkflowContext, n: u32) -> Result<u64, WorkflowError> {
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
        let waits = std::sync::Arc::new(crate::waiting::Waits {
            client: crate::Client::new(journal.clone()).await.unwrap(),
            clock: std::sync::Arc::new(crate::SystemClock),
            park_after: crate::waiting::PARK_AFTER_DEFAULT,
        });
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
        let watch = RunWatch::start(&waits, &std::sync::Arc::default(), id);
        (id, run(execution, 1, workflow, &watch, None).await.unwrap())
    }

    /// A workflow's output is recorded as the execution's; its error (here a step's recorded
    /// failure passed on with `?`) fails the execution; an input of another type fails it as
    /// bad input without running the workflow.
    #[tokio::test]
    async fn runs_end_in_the_workflows_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path().join("journal.db")).unwrap();

        let (id, ran) = run_on(&journal, &serde_json::json!(21)).await;
        assert!(matches!(ran, Ran::Completed(_)), "{ran:?}");
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
