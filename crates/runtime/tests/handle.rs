//! A `WorkflowHandle` reads an execution's status and awaits its result from any process: the
//! result of an execution finished by another connection to the file arrives through the
//! watcher, with its output decoded, or as a typed failure,
//! cancellation or output-type error that leaves the journal untouched.
//!
//! Waiting is proved without sleeping: the result future is polled once while the execution
//! runs (it must be pending), then the execution ends, then the same future is awaited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::pin::pin;
use std::task::{Context, Waker};

use durably_journal::{Journal, Status};
use durably_runtime::{Client, Error, WorkflowHandle};
use durably_testkit::TestDb;

async fn client() -> (TestDb, Journal, Client) {
    let db = TestDb::new();
    let journal = db.open();
    let client = Client::new(journal.clone()).await.unwrap();
    (db, journal, client)
}

/// Polls `result` once: it must be waiting.
fn assert_waiting<T: std::fmt::Debug>(
    result: std::pin::Pin<&mut impl Future<Output = durably_runtime::Result<T>>>,
) {
    let polled = result.poll(&mut Context::from_waker(Waker::noop()));
    assert!(
        polled.is_pending(),
        "finished before the execution ended: {polled:?}"
    );
}

/// A result awaited while the execution runs arrives when it completes. The completion is
/// committed by the journal's writer connection, which is not the watcher's: to the watcher
/// it is a commit by another connection, as another process's would be.
#[tokio::test]
async fn a_result_arrives_when_the_execution_completes() {
    let (_db, journal, client) = client().await;
    let (id, execution) = support::runtime_execution(&journal).await;
    let handle: WorkflowHandle<String> = client.handle(id);
    assert_eq!(handle.status().unwrap(), Status::Running);

    let mut result = pin!(handle.result());
    assert_waiting(result.as_mut());
    execution.complete(&"approved").await.unwrap();
    assert_eq!(result.await.unwrap(), "approved");
    assert_eq!(handle.status().unwrap(), Status::Completed);
}

/// A failed execution's result is `WorkflowFailed` carrying its error; a cancelled one's is
/// `Cancelled` with the reason.
#[tokio::test]
async fn failures_and_cancellations_are_typed() {
    let (_db, journal, client) = client().await;
    let (failed, execution) = support::runtime_execution(&journal).await;
    execution.fail(&"card declined").await.unwrap();
    match client.handle::<String>(failed).result().await {
        Err(Error::WorkflowFailed {
            execution_id,
            error,
        }) => {
            assert_eq!(execution_id, failed);
            assert_eq!(error.unwrap().decode::<String>().unwrap(), "card declined");
        }
        other => panic!("expected WorkflowFailed, got {other:?}"),
    }

    let (cancelled, execution) = support::runtime_execution(&journal).await;
    drop(execution);
    let handle = client.handle::<String>(cancelled);
    let mut result = pin!(handle.result());
    assert_waiting(result.as_mut());
    journal
        .operator()
        .cancel(cancelled, "order withdrawn")
        .await
        .unwrap();
    match result.await {
        Err(Error::Cancelled {
            execution_id,
            reason,
        }) => {
            assert_eq!(execution_id, cancelled);
            assert_eq!(reason, "order withdrawn");
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
}

/// An output that does not decode as the handle's type is `OutputType`; an unknown id is
/// `NotFound`. Neither writes anything.
#[tokio::test]
async fn wrong_output_types_and_unknown_ids() {
    let (_db, journal, client) = client().await;
    let (id, execution) = support::runtime_execution(&journal).await;
    execution.complete(&"not a number").await.unwrap();
    let writes = journal.writer_stats();
    match client.handle::<u64>(id).result().await {
        Err(Error::OutputType {
            execution_id,
            expected,
            ..
        }) => {
            assert_eq!(execution_id, id);
            assert_eq!(expected, "u64");
        }
        other => panic!("expected OutputType, got {other:?}"),
    }
    let nobody = durably_journal::new_execution_id();
    let handle = client.handle::<u64>(nobody);
    assert!(matches!(handle.status(), Err(Error::NotFound(found)) if found == nobody));
    assert!(matches!(handle.result().await, Err(Error::NotFound(found)) if found == nobody));
    assert_eq!(journal.writer_stats(), writes);
}
