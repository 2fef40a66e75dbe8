//! `Runtime::run` starts an execution and runs it in the caller's task at one commit per
//! effect: the open rides on the first write and the end on the last (plan §6). It is
//! idempotent by id (an execution that exists is awaited, not run again), refuses kinds this
//! process does not serve without writing, hands queued work to the dispatcher, and two runs
//! of one id in one process run the workflow once.
//!
//! Method: workflows count their closure calls; commits are read from the journal writer's
//! statistics around each call (the idle dispatcher only reads). The race between processes
//! is in `tests/tests/runtime_run_race.rs` (real child processes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use durably_journal::Status;
use durably_runtime::{Error, QueueConfig, Runtime, StartOptions, WorkflowContext, WorkflowError};
use support::Scratch;
use tokio::sync::{Notify, Semaphore};

/// Where a workflow waits before its steps: it says it has arrived, then waits for a permit.
struct Gate {
    arrived: Notify,
    open: Semaphore,
}

impl Gate {
    fn closed() -> Self {
        Self {
            arrived: Notify::new(),
            open: Semaphore::new(0),
        }
    }
}

/// Registers `steps` (input: how many idempotent steps; output: their count) and `none` (no
/// steps, returns its input); both count their calls in `calls`.
async fn runtime(scratch: &Scratch, calls: &Arc<AtomicU32>, gate: Option<Arc<Gate>>) -> Runtime {
    let (steps_calls, none_calls) = (Arc::clone(calls), Arc::clone(calls));
    Runtime::builder(scratch.journal.clone())
        .register("steps", 1, move |context: WorkflowContext, steps: u32| {
            let (calls, gate) = (Arc::clone(&steps_calls), gate.clone());
            async move {
                if let Some(gate) = gate {
                    gate.arrived.notify_one();
                    gate.open.acquire().await.unwrap().forget();
                }
                for step in 0..steps {
                    let calls = Arc::clone(&calls);
                    context
                        .idempotent(&format!("step {step}"), move |_key| {
                            calls.fetch_add(1, Ordering::SeqCst);
                            async move { Ok(step) }
                        })
                        .await?;
                }
                Ok::<_, WorkflowError>(steps)
            }
        })
        .register(
            "none",
            1,
            move |_context: WorkflowContext, value: String| {
                none_calls.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, WorkflowError>(value) }
            },
        )
        .queue(
            "q",
            QueueConfig {
                concurrency_max: Some(1),
                process_concurrency_max: None,
            },
        )
        .start()
        .await
        .unwrap()
}

/// A run of 10 idempotent steps costs 10 commits, a run of no step one; both return their
/// output and leave the execution completed with every step recorded.
#[tokio::test]
async fn a_run_costs_one_commit_per_effect_step() {
    let scratch = Scratch::new();
    let calls = Arc::new(AtomicU32::new(0));
    let runtime = runtime(&scratch, &calls, None).await;
    let commits = || scratch.journal.writer_stats().commits;

    let id = durably_journal::new_execution_id();
    let before = commits();
    let output: u32 = runtime
        .run("steps", id, &10_u32, StartOptions::default())
        .await
        .unwrap();
    assert_eq!((output, commits() - before), (10, 10));
    assert_eq!(scratch.journal.steps(id).unwrap().len(), 10);
    assert_eq!(
        runtime.handle::<u32>(id).status().unwrap(),
        Status::Completed
    );

    let id = durably_journal::new_execution_id();
    let before = commits();
    let output: String = runtime
        .run("none", id, &"hello".to_owned(), StartOptions::default())
        .await
        .unwrap();
    assert_eq!((output.as_str(), commits() - before), ("hello", 1));
}

/// A second run of an id returns the recorded outcome and runs nothing; a run of another
/// kind under that id is refused; a kind this process does not register is refused before
/// anything is written.
#[tokio::test]
async fn a_run_is_idempotent_by_id_and_refuses_what_it_cannot_run() {
    let scratch = Scratch::new();
    let calls = Arc::new(AtomicU32::new(0));
    let runtime = runtime(&scratch, &calls, None).await;
    let id = durably_journal::new_execution_id();
    let first: u32 = runtime
        .run("steps", id, &3_u32, StartOptions::default())
        .await
        .unwrap();
    let again: u32 = runtime
        .run("steps", id, &3_u32, StartOptions::default())
        .await
        .unwrap();
    assert_eq!((first, again, calls.load(Ordering::SeqCst)), (3, 3, 3));

    let other = runtime
        .run::<_, String>("none", id, &"x".to_owned(), StartOptions::default())
        .await;
    assert!(matches!(other, Err(Error::IdConflict { .. })), "{other:?}");

    let before = scratch.snapshot();
    let unknown = runtime
        .run::<_, u32>(
            "elsewhere",
            durably_journal::new_execution_id(),
            &1_u32,
            StartOptions::default(),
        )
        .await;
    assert!(
        matches!(unknown, Err(Error::KindNotRegisteredHere { .. })),
        "{unknown:?}"
    );
    let wrong = runtime
        .run::<_, u32>(
            "steps",
            durably_journal::new_execution_id(),
            &"3",
            StartOptions::default(),
        )
        .await;
    assert!(matches!(wrong, Err(Error::WrongType { .. })), "{wrong:?}");
    assert_eq!(scratch.snapshot(), before);
}

/// A run into a queue is a start and a wait: the dispatcher runs it under the queue's limit.
#[tokio::test]
async fn a_queued_run_goes_through_the_dispatcher() {
    let scratch = Scratch::new();
    let calls = Arc::new(AtomicU32::new(0));
    let runtime = runtime(&scratch, &calls, None).await;
    let id = durably_journal::new_execution_id();
    let output: u32 = runtime
        .run("steps", id, &2_u32, StartOptions::default().queue("q"))
        .await
        .unwrap();
    assert_eq!(output, 2);
    let record = scratch.journal.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
}

/// Two runs of one id in one process: the second finds the first's handle and awaits its
/// outcome; the workflow runs once.
#[tokio::test]
async fn two_runs_of_one_id_in_one_process_run_it_once() {
    let scratch = Scratch::new();
    let calls = Arc::new(AtomicU32::new(0));
    let gate = Arc::new(Gate::closed());
    let runtime = runtime(&scratch, &calls, Some(Arc::clone(&gate))).await;
    let id = durably_journal::new_execution_id();
    let first = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .run::<_, u32>("steps", id, &4_u32, StartOptions::default())
                .await
        }
    });
    // The first run holds at its gate with its handle begun (nothing written yet).
    gate.arrived.notified().await;
    assert!(scratch.journal.get(id).unwrap().is_none());
    let second = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .run::<_, u32>("steps", id, &4_u32, StartOptions::default())
                .await
        }
    });
    gate.open.add_permits(2);
    assert_eq!(first.await.unwrap().unwrap(), 4);
    assert_eq!(second.await.unwrap().unwrap(), 4);
    assert_eq!(calls.load(Ordering::SeqCst), 4, "the workflow ran twice");
}

/// A workflow's error fails the execution, and the run returns it.
#[tokio::test]
async fn a_failed_workflow_fails_the_run() {
    let scratch = Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register("refuse", 1, |_context: WorkflowContext, _: u32| async {
            Err::<u32, _>(WorkflowError::new("refused"))
        })
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let failed = runtime
        .run::<_, u32>("refuse", id, &1_u32, StartOptions::default())
        .await;
    assert!(
        matches!(failed, Err(Error::WorkflowFailed { .. })),
        "{failed:?}"
    );
    assert_eq!(
        scratch.journal.get(id).unwrap().unwrap().status,
        Status::Failed
    );
}

/// A run whose first write is a step with rows of the runtime's own (a published event, a
/// message sent to itself) opens the execution in that write before those rows go in, and a
/// message a run sends itself before anything is written is not refused as sent to nobody:
/// the event is published and the message received, as when the execution was started.
#[tokio::test]
async fn a_run_whose_first_step_publishes_or_sends_to_itself_keeps_what_it_wrote() {
    let scratch = Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register(
            "first",
            1,
            |context: WorkflowContext, send_first: bool| async move {
                let id = context.id();
                if send_first {
                    context.send(id, "own", &"to myself").await?;
                }
                context.set_event("progress", &"first").await?;
                if !send_first {
                    context.send(id, "own", &"to myself").await?;
                }
                let own = context
                    .recv::<String>("own", std::time::Duration::ZERO)
                    .await?;
                Ok::<_, WorkflowError>(own)
            },
        )
        .start()
        .await
        .unwrap();
    for send_first in [true, false] {
        let id = durably_journal::new_execution_id();
        let own = runtime
            .run::<bool, Option<String>>("first", id, &send_first, StartOptions::default())
            .await
            .unwrap();
        assert_eq!(
            own.as_deref(),
            Some("to myself"),
            "send first: {send_first}"
        );
        let progress: Option<String> = runtime
            .get_event(id, "progress", std::time::Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(
            progress.as_deref(),
            Some("first"),
            "send first: {send_first}"
        );
    }
}
