//! Cancellation in the journal (plan §4.6, R5): an execution nobody drives is cancelled at
//! once; one a live process holds gets a request, after which that holder's writes are refused
//! (nothing written) but a guarded step's result, `fail` and `finish_cancelled`, so no step row
//! commits after the request. A guarded step in flight finishes its protocol; an ambiguous
//! intent survives a cancel; under write-behind a refused write keeps the guarded results it
//! carries and drops the other pending rows; bad input writes nothing.
//!
//! Method: two journals on one file are two lock instances, as two processes would be: the
//! holder drives an execution through one, the operator cancels through the other and finds
//! the holder alive. Rows, events and the lock are read back through the journal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use durably_journal::lifecycle::{self, CANCEL_REASON_BYTES_MAX, Inserted, NewExecution};
use durably_journal::{
    CancelOutcome, Error, Execution, Guarded, Journal, Policy, Status, StepError, StepState,
};
use support::{Scratch, barrier, leave_guarded_step_ambiguous, pure_steps, start};
use uuid::Uuid;

/// The `cancel_requested` event's detail, and the largest step row id of the execution.
fn request_event_and_last_row(journal: &Journal, id: Uuid) -> (serde_json::Value, Option<i64>) {
    let events: Vec<_> = journal
        .events(id)
        .unwrap()
        .into_iter()
        .filter(|event| event.kind == "cancel_requested")
        .collect();
    assert_eq!(events.len(), 1, "one request event: {events:?}");
    let last_row = journal
        .read(|conn| lifecycle::newest_step_row(conn, id))
        .unwrap();
    (events[0].detail.to_value().unwrap(), last_row)
}

/// A holder and an operator: two journals on one file (two lock instances), and an execution
/// the holder opened and ran `steps` pure steps of.
async fn held(steps: u32) -> (Scratch, Journal, Journal, Uuid, Execution) {
    let scratch = Scratch::new();
    let (holder, operator) = (scratch.open(), scratch.open());
    let id = durably_journal::new_execution_id();
    let mut execution = start(&holder, id).await;
    pure_steps(&mut execution, 0..steps).await;
    (scratch, holder, operator, id, execution)
}

/// Checks R5 (no step row of `id` is newer than the one its request named) and ends the
/// execution `cancelled`.
async fn finish_after_request(operator: &Journal, id: Uuid, execution: Execution) {
    let (detail, last_row) = request_event_and_last_row(operator, id);
    assert_eq!(
        detail["last_step_id"].as_i64(),
        last_row,
        "a step row after the request"
    );
    execution
        .finish_cancelled("stop it", |_| Ok(()))
        .await
        .unwrap();
}

fn is_cancel_requested(error: &Error, id: Uuid) -> bool {
    matches!(error, Error::CancelRequested { execution_id, reason }
        if *execution_id == id && reason == "stop it")
}

/// A request to a live holder: every write of the holder after it is refused and writes
/// nothing, completing included; `finish_cancelled` ends the execution with the reason, and
/// no step row is newer than the one the request named.
#[tokio::test]
async fn a_live_holder_is_asked_and_its_writes_are_refused() {
    let (_scratch, holder, operator, id, execution) = held(2).await;

    let outcome = operator.operator().cancel(id, "stop it").await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::Requested {
            pid: i64::from(std::process::id())
        }
    );
    // A second request keeps the first: one event, the same reason.
    operator.operator().cancel(id, "again").await.unwrap();
    let record = operator.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::Running);
    assert_eq!(record.cancel_reason.as_deref(), Some("stop it"));
    assert!(record.cancel_requested_at.is_some());
    let (detail, last_row) = request_event_and_last_row(&operator, id);
    assert_eq!(detail["last_step_id"].as_i64(), last_row);
    assert_eq!(detail["reason"], "stop it");

    // A pure step's closure runs (it was called before the refusal), its result is refused.
    let error = execution
        .pure("after the request", || async { Ok(7_u32) })
        .await
        .unwrap_err();
    assert!(is_cancel_requested(&error, id), "{error:?}");
    assert_eq!(holder.steps(id).unwrap().len(), 2, "nothing was recorded");
    execution
        .finish_cancelled("stop it", |_| Ok(()))
        .await
        .unwrap();

    let record = operator.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::Cancelled);
    assert!(record.finalized_at.is_some());
    assert_eq!(
        record.error.unwrap().to_value().unwrap(),
        serde_json::json!({ "cancelled": "stop it" })
    );
    assert_eq!(request_event_and_last_row(&operator, id).1, last_row);
    let cancelled = operator.events(id).unwrap();
    let cancelled = cancelled.iter().find(|e| e.kind == "cancelled").unwrap();
    assert_eq!(cancelled.detail.to_value().unwrap()["was"], "running");
    // The lock was released with the finalize: a cancelled execution never reopens.
    let reopened = operator.open_execution(id, "test", "", &"input").await;
    assert!(matches!(reopened, Err(Error::Cancelled(_))), "{reopened:?}");
}

/// After a request a guarded step's intent is refused before its closure runs, and completing
/// is refused; failing is allowed.
#[tokio::test]
async fn the_next_intent_and_the_completion_are_refused_but_fail_is_not() {
    let (_scratch, holder, operator, id, execution) = held(1).await;
    operator.operator().cancel(id, "stop it").await.unwrap();

    let called = Arc::new(AtomicU32::new(0));
    let calls = Arc::clone(&called);
    let error = execution
        .guarded("charge", Policy::Retry, move |_key| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<u32, StepError>(1) }
        })
        .await
        .unwrap_err();
    assert!(is_cancel_requested(&error, id), "{error:?}");
    assert_eq!(called.load(Ordering::SeqCst), 0, "the effect never ran");
    assert_eq!(holder.steps(id).unwrap().len(), 1, "no intent was written");

    let id2 = durably_journal::new_execution_id();
    let execution2 = start(&holder, id2).await;
    operator.operator().cancel(id2, "stop it").await.unwrap();
    let error = execution2.complete(&"done").await.unwrap_err();
    assert!(is_cancel_requested(&error, id2), "{error:?}");
    barrier(&holder).await;
    assert_eq!(operator.get(id2).unwrap().unwrap().status, Status::Running);

    execution.fail(&"gave up").await.unwrap();
    assert_eq!(operator.get(id).unwrap().unwrap().status, Status::Failed);
}

/// A guarded step whose closure is running when the request commits finishes its protocol:
/// its result is recorded. A retryable failure of its attempt is recorded as its failed
/// result instead of being retried, since a next attempt would be a new effect.
#[tokio::test]
async fn a_guarded_step_in_flight_finishes_its_protocol() {
    let scratch = Scratch::new();
    let (holder, operator) = (scratch.open(), scratch.open());
    for retryable in [false, true] {
        let id = durably_journal::new_execution_id();
        let execution = start(&holder, id).await;
        let (entered, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let attempts = Arc::new(AtomicU32::new(0));
        let (signal, wait, count) = (
            Arc::clone(&entered),
            Arc::clone(&release),
            Arc::clone(&attempts),
        );
        let step = execution.guarded("charge", Policy::Retry, move |_key| {
            let (signal, wait) = (Arc::clone(&signal), Arc::clone(&wait));
            count.fetch_add(1, Ordering::SeqCst);
            async move {
                signal.notify_one();
                wait.notified().await;
                if retryable {
                    Err(StepError::retryable("the provider is busy"))
                } else {
                    Ok::<u32, StepError>(42)
                }
            }
        });
        let cancel = async {
            entered.notified().await;
            let outcome = operator.operator().cancel(id, "stop it").await.unwrap();
            assert!(matches!(outcome, CancelOutcome::Requested { .. }));
            release.notify_one();
        };
        let (result, ()) = tokio::join!(step, cancel);
        let steps = holder.steps(id).unwrap();
        assert_eq!(steps.len(), 1);
        if retryable {
            assert!(
                matches!(result, Err(Error::StepFailed { .. })),
                "{result:?}"
            );
            assert_eq!(steps[0].state, StepState::Failed);
        } else {
            assert!(matches!(result, Ok(Guarded::Done(42))), "{result:?}");
            assert_eq!(steps[0].state, StepState::Completed);
        }
        assert_eq!(attempts.load(Ordering::SeqCst), 1, "no second attempt");
        // The result updated the intent's row: no row is newer than the request's.
        finish_after_request(&operator, id, execution).await;
    }
}

/// Executions nobody drives are cancelled at once, whatever their status: queued, interrupted,
/// running with no holder, awaiting an operator (whose intent stays for the operator).
#[tokio::test]
async fn executions_nobody_drives_are_cancelled_at_once() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let operator = journal.operator();

    let queued = durably_journal::new_execution_id();
    let input = journal.encode_payload(&"input", "the input").unwrap();
    let now = chrono::Utc::now();
    let inserted = journal
        .write(move |conn| {
            let new = NewExecution {
                id: queued,
                kind: "test",
                name: "queued",
                input: &input,
                queue: None,
                priority: 0,
                due_at: None,
                detail: None,
            };
            lifecycle::insert_execution(conn, &new, now)
        })
        .await
        .unwrap();
    assert_eq!(inserted, Inserted::New);
    let interrupted = durably_journal::new_execution_id();
    drop(start(&journal, interrupted).await);
    barrier(&journal).await;
    journal.operator().sweep(false).await.unwrap();
    let awaiting = durably_journal::new_execution_id();
    let mut execution = start(&journal, awaiting).await;
    leave_guarded_step_ambiguous(&mut execution).await;
    drop(execution);
    barrier(&journal).await;
    let reopened = start_again(&journal, awaiting).await;
    assert!(
        matches!(reopened, Err(Error::Ambiguous { .. })),
        "{reopened:?}"
    );
    barrier(&journal).await;

    for (id, was) in [
        (queued, Status::Queued),
        (interrupted, Status::Interrupted),
        (awaiting, Status::AwaitingOperator),
    ] {
        let outcome = operator.cancel(id, "not needed").await.unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled { was }, "{id}");
        let record = journal.get(id).unwrap().unwrap();
        assert_eq!(record.status, Status::Cancelled);
        assert!(record.cancel_requested_at.is_none());
    }
    assert_eq!(
        journal.steps(awaiting).unwrap()[0].state,
        StepState::Intent,
        "the ambiguous intent survives the cancel"
    );
}

/// Reopens `id` and runs its guarded step under `Policy::Fail`.
async fn start_again(journal: &Journal, id: Uuid) -> Result<(), Error> {
    let execution = start(journal, id).await;
    execution
        .guarded("charge", Policy::Fail, |_key| async {
            Ok::<u32, StepError>(1)
        })
        .await
        .map(drop)
}

/// A running execution whose holder is gone (its handle dropped; the sweep has not run) is
/// cancelled at once too.
#[tokio::test]
async fn a_running_execution_with_no_holder_is_cancelled_at_once() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    drop(start(&journal, id).await);
    barrier(&journal).await;
    let outcome = journal.operator().cancel(id, "not needed").await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::Cancelled {
            was: Status::Running
        }
    );
}

/// Cancelling a finished or unknown execution, or with an oversized reason, is refused and
/// writes nothing.
#[tokio::test]
async fn bad_cancels_are_refused_and_write_nothing() {
    let scratch = Scratch::new();
    let (holder, operator) = (scratch.open(), scratch.open());
    let done = durably_journal::new_execution_id();
    start(&holder, done).await.complete(&"done").await.unwrap();
    let running = durably_journal::new_execution_id();
    let _execution = start(&holder, running).await;
    let events = || operator.events(done).unwrap().len() + operator.events(running).unwrap().len();
    let before = (events(), operator.get(running).unwrap());

    let error = operator.operator().cancel(done, "late").await.unwrap_err();
    assert!(matches!(error, Error::Refused(_)), "{error:?}");
    let nobody = durably_journal::new_execution_id();
    let error = operator.operator().cancel(nobody, "who").await.unwrap_err();
    assert!(
        matches!(error, Error::NotFound(id) if id == nobody),
        "{error:?}"
    );
    let long = "x".repeat(CANCEL_REASON_BYTES_MAX + 1);
    let error = operator
        .operator()
        .cancel(running, &long)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
    let hook = operator
        .operator()
        .cancel_with(running, "ok", |_| {
            Err(Error::Refused("the hook said no".to_owned()))
        })
        .await;
    assert!(matches!(hook, Err(Error::Refused(_))), "{hook:?}");
    assert_eq!((events(), operator.get(running).unwrap()), before);
}

/// Under write-behind, a write that meets a request keeps the guarded results it carries and
/// drops the other pending rows: a pure step's pending result is dropped with the refused
/// write of the next idempotent step (whose closure never runs), while a guarded step's
/// pending result is written by the refused intent of the next guarded step.
#[tokio::test]
async fn pending_rows_are_dropped_but_guarded_results_written() {
    let (_scratch, holder, operator, id, mut execution) = held(0).await;
    execution.defer_results();
    let value: u32 = execution.pure("p0", || async { Ok(7) }).await.unwrap();
    assert_eq!(value, 7);
    operator.operator().cancel(id, "stop it").await.unwrap();
    let called = Arc::new(AtomicU32::new(0));
    let calls = Arc::clone(&called);
    let error = execution
        .idempotent("i1", move |_key| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<u32, StepError>(1) }
        })
        .await
        .unwrap_err();
    assert!(is_cancel_requested(&error, id), "{error:?}");
    assert_eq!(called.load(Ordering::SeqCst), 0);
    assert!(
        holder.steps(id).unwrap().is_empty(),
        "p0's pending row was dropped"
    );
    execution
        .finish_cancelled("stop it", |_| Ok(()))
        .await
        .unwrap();

    let id = durably_journal::new_execution_id();
    let mut execution = start(&holder, id).await;
    execution.defer_results();
    let charged = execution
        .guarded("g0", Policy::Retry, |_key| async {
            Ok::<u32, StepError>(3)
        })
        .await
        .unwrap();
    assert!(matches!(charged, Guarded::Done(3)));
    assert_eq!(
        holder.steps(id).unwrap()[0].state,
        StepState::Intent,
        "the result waits"
    );
    operator.operator().cancel(id, "stop it").await.unwrap();
    let error = execution
        .guarded("g1", Policy::Retry, |_key| async {
            Ok::<u32, StepError>(4)
        })
        .await
        .unwrap_err();
    assert!(is_cancel_requested(&error, id), "{error:?}");
    let steps = holder.steps(id).unwrap();
    assert_eq!(steps.len(), 1, "g1's intent was refused");
    assert_eq!(
        steps[0].state,
        StepState::Completed,
        "g0's result was written"
    );
    finish_after_request(&operator, id, execution).await;
}
