//! Regression tests for bugs a review of the journal found, each named after its bug.
//!
//! Method: each test drives the public API into the situation the bug needed (an open whose
//! caller stopped waiting, a panicking request, a completion after an ambiguous step, a step
//! future dropped half way, an unrecordable guarded result, a zero lease) and asserts what a
//! user relies on instead.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durably_journal::{Error, Guarded, Journal, Opened, Policy, StepError};
use support::{
    Scratch, barrier, leave_guarded_step_ambiguous, pure_steps, refuse_stale_then_accept_fresh,
    start,
};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_lock_of_an_abandoned_open_is_reclaimed_by_the_next_open() {
    let scratch = Scratch::new();
    // One writer on PostgreSQL too (SQLite has only one), so that the gate below holds the
    // writer the open must go through.
    let journal = scratch.builder().pg_writers(1).open().unwrap();
    let id = Uuid::new_v4();
    // Hold the writer so the open is queued but cannot commit before its caller gives up.
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let gate = tokio::spawn({
        let journal = journal.clone();
        async move {
            journal
                .write(move |_| {
                    entered_tx.send(()).ok();
                    release_rx.recv().ok();
                    Ok(())
                })
                .await
        }
    });
    tokio::task::spawn_blocking(move || entered_rx.recv())
        .await
        .unwrap()
        .unwrap();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(50),
        journal.open_execution(id, "test", "", &"input"),
    )
    .await;
    assert!(abandoned.is_err(), "the open must still be queued");
    release_tx.send(()).unwrap();
    gate.await.unwrap().unwrap();
    barrier(&journal).await;
    let held = journal.lock_holders().unwrap();
    assert_eq!(held.len(), 1, "the abandoned open committed its lock");

    let execution = start(&journal, id).await;
    assert_eq!(
        execution.fencing_token().0,
        2,
        "the leaked lock was taken back by compare-and-swap"
    );
    let events = journal.events(id).unwrap();
    assert!(
        events
            .iter()
            .any(|event| event.kind == "takeover" && event.detail.as_json().contains("leaked")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_second_handle_in_the_same_journal_is_refused_not_reclaimed() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let first = start(&journal, id).await;
    let error = journal
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Locked { pid, .. } if *pid == i64::from(std::process::id())),
        "{error:?}"
    );
    // The operator respects the live handle too: it asks it to stop instead of cancelling.
    let outcome = journal.operator().cancel(id, "no").await.unwrap();
    assert!(
        matches!(outcome, durably_journal::CancelOutcome::Requested { .. }),
        "{outcome:?}"
    );
    drop(first);
    barrier(&journal).await;
    let outcome = journal.operator().cancel(id, "now").await.unwrap();
    assert!(
        matches!(outcome, durably_journal::CancelOutcome::Cancelled { .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn panic_inside_a_request_fails_that_request_and_the_writer_lives_on() {
    let scratch = Scratch::new();
    // One writer on PostgreSQL too, so that the writes after the panic go through the writer
    // that met it.
    let journal = scratch.builder().pg_writers(1).open().unwrap();
    let error = journal
        .write(|_| -> durably_journal::Result<()> { panic!("a buggy request") })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::CommitFailed { .. }), "{error:?}");
    let execution = start(&journal, Uuid::new_v4()).await;
    let value: u32 = execution.pure("after", || async { Ok(7) }).await.unwrap();
    assert_eq!(value, 7);
    execution.complete(&value).await.unwrap();
}

/// Leaves a guarded step in the ambiguous window by dropping its future after the intent.
async fn ambiguous_step(journal: &Journal, id: Uuid) {
    let mut execution = start(journal, id).await;
    leave_guarded_step_ambiguous(&mut execution).await;
    let error = execution.pure("next", || async { Ok(1_u32) }).await;
    assert!(
        matches!(error, Err(Error::Halted { seq: 0, .. })),
        "a dropped step future halts the handle: {error:?}"
    );
}

#[tokio::test]
async fn complete_after_an_ambiguous_step_is_refused() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    ambiguous_step(&journal, id).await;
    barrier(&journal).await;
    let Opened::Running(execution) = journal
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap()
    else {
        panic!("resumable");
    };
    let error = execution
        .guarded("charge", Policy::Fail, |_key| async {
            Ok::<u32, StepError>(0)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Ambiguous { seq: 0, .. }),
        "{error:?}"
    );
    let error = execution.complete(&"done").await.unwrap_err();
    assert!(matches!(error, Error::Halted { seq: 0, .. }), "{error:?}");
    barrier(&journal).await;
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::AwaitingOperator,
        "the step is left to an operator"
    );
    assert_eq!(
        journal.steps(id).unwrap()[0].state,
        durably_journal::StepState::Intent
    );
    let events = journal.events(id).unwrap();
    assert!(events.iter().any(|event| event.kind == "ambiguity_failed"));
}

/// The completion check reads only the steps this run did not reach; an ambiguous step among
/// them must still stop the execution from completing.
#[tokio::test]
async fn complete_is_refused_over_a_recorded_intent_this_run_never_reached() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    {
        let mut execution = start(&journal, id).await;
        pure_steps(&mut execution, 0..3).await;
        // Step 3 stays in the ambiguous window.
        leave_guarded_step_ambiguous(&mut execution).await;
    }
    barrier(&journal).await;

    // A shorter path through the program: two steps replayed, then complete.
    let mut execution = start(&journal, id).await;
    pure_steps(&mut execution, 0..2).await;
    let error = execution.complete(&"done").await.unwrap_err();
    assert!(
        matches!(&error, Error::Refused(message) if message.contains("step 3 is in the ambiguous window")),
        "{error:?}"
    );
    barrier(&journal).await;
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Running
    );
    assert_eq!(
        journal.steps(id).unwrap()[3].state,
        durably_journal::StepState::Intent
    );
}

#[tokio::test]
async fn unrecordable_guarded_result_is_journaled_as_failed_not_left_ambiguous() {
    let scratch = Scratch::new();
    let journal = scratch.builder().payload_bytes_max(256).open().unwrap();
    let id = Uuid::new_v4();
    let calls = AtomicU32::new(0);
    let run = |journal: Journal| {
        let calls = &calls;
        async move {
            let execution = start(&journal, id).await;
            execution
                .guarded("charge", Policy::Retry, |_key| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, StepError>("r".repeat(1024))
                })
                .await
        }
    };
    for _ in 0..3 {
        let outcome: Result<Guarded<String>, Error> = run(journal.clone()).await;
        let error = outcome.unwrap_err();
        assert!(
            matches!(&error, Error::StepFailed { error, .. } if error.message.contains("could not be journaled")),
            "{error:?}"
        );
        barrier(&journal).await;
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the effect ran again without a crash"
    );
    assert_eq!(
        journal.steps(id).unwrap()[0].state,
        durably_journal::StepState::Failed
    );
}

#[test]
fn zero_lease_is_refused_at_open() {
    let scratch = Scratch::new();
    let error = scratch.builder().lease_ms(0).open().unwrap_err();
    assert!(matches!(error, Error::InvalidConfig(_)), "{error:?}");
}

#[tokio::test]
async fn retention_of_a_huge_execution_is_split_into_row_bounded_transactions() {
    let scratch = Scratch::new();
    let clock = support::ManualClock::at(chrono::Utc::now());
    let journal = scratch
        .builder()
        .durability(durably_journal::Durability::ProcessCrash)
        .clock(clock.clone())
        .open()
        .unwrap();
    let huge = Uuid::new_v4();
    let execution = start(&journal, huge).await;
    let steps = durably_journal::GC_BATCH_ROWS_MAX * 2 + 500;
    for seq in 0..steps {
        let _: u64 = execution
            .pure(&format!("step {seq}"), || async move { Ok(seq) })
            .await
            .unwrap();
    }
    execution.complete(&"done").await.unwrap();
    let small = Uuid::new_v4();
    start(&journal, small)
        .await
        .complete(&"done")
        .await
        .unwrap();
    clock.advance(chrono::TimeDelta::days(10));

    let options = durably_journal::GcOptions {
        completed_older_than: Duration::from_hours(24),
        ..journal.operator().default_gc_options()
    };
    let before = journal.writer_stats().commits;
    let report = journal
        .operator()
        .collect_garbage(options, |_| {})
        .await
        .unwrap();
    assert_eq!(report.completed, 2);
    assert!(
        report.batches >= 3,
        "{steps} steps must not go in one transaction: {report:?}"
    );
    assert!(journal.writer_stats().commits - before >= 3);
    assert!(journal.get(huge).unwrap().is_none());
    assert!(journal.steps(huge).unwrap().is_empty());
    assert!(journal.get(small).unwrap().is_none());
}

/// Opens `id` and enters a guarded Retry step whose closure never returns (a crash inside the
/// effect), then drops everything. Returns what opening and running the step gave before that.
#[allow(clippy::unwrap_used)] // A test helper: an unexpected outcome fails the test.
async fn crash_inside_retry_step(journal: &Journal, id: Uuid, calls: &AtomicU32) -> Option<Error> {
    let Opened::Running(execution) = journal
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap()
    else {
        panic!("resumable");
    };
    let called = std::sync::Arc::new(tokio::sync::Notify::new());
    let step = execution.guarded("deliver", Policy::Retry, |_key| {
        let called = std::sync::Arc::clone(&called);
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            called.notify_one();
            std::future::pending::<()>().await;
            Ok::<u32, StepError>(0)
        }
    });
    tokio::select! {
        outcome = step => Some(outcome.unwrap_err()),
        () = called.notified() => None,
    }
}

#[tokio::test]
async fn poison_pill_retry_step_is_rerun_a_bounded_number_of_times() {
    let scratch = Scratch::new();
    let journal = scratch.builder().ambiguous_reruns_max(3).open().unwrap();
    let id = Uuid::new_v4();
    let calls = AtomicU32::new(0);
    for _ in 0..4 {
        assert!(
            crash_inside_retry_step(&journal, id, &calls)
                .await
                .is_none()
        );
        barrier(&journal).await;
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "the first run and three re-runs"
    );
    let error = crash_inside_retry_step(&journal, id, &calls).await;
    assert!(
        matches!(error, Some(Error::Ambiguous { seq: 0, .. })),
        "{error:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4, "no fourth re-run");
    let events = journal.events(id).unwrap();
    assert!(
        events.iter().any(|event| event.kind == "ambiguity_failed"
            && event.detail.as_json().contains("re-run limit"))
    );
}

#[tokio::test]
async fn no_intent_is_handed_out_while_a_live_process_may_be_running_it() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let mut execution = start(&journal, id).await;
    // The closure has started and not returned: its effect may happen at any moment, so a look
    // at the outside world now says nothing about what the intent will have done.
    leave_guarded_step_ambiguous(&mut execution).await;
    let error = journal.operator().seen_intent(id, 0).unwrap_err();
    assert!(
        matches!(&error, Error::Locked { pid, .. } if *pid == i64::from(std::process::id())),
        "{error:?}"
    );
    drop(execution);
    barrier(&journal).await;
    let seen = journal
        .operator()
        .seen_intent(id, 0)
        .unwrap()
        .expect("ambiguous");
    assert_eq!(seen.to_string(), "a1-r0");
}

#[tokio::test]
async fn a_retry_inside_the_run_changes_the_intent_an_operator_sees() {
    let scratch = Scratch::new();
    let journal = scratch
        .builder()
        .retry(durably_journal::RetryPolicy {
            attempts_max: 3,
            backoff_initial: Duration::ZERO,
            backoff_max: Duration::ZERO,
        })
        .open()
        .unwrap();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;
    let calls = AtomicU32::new(0);
    let second_call = std::sync::Arc::new(tokio::sync::Notify::new());
    let step = execution.guarded("charge", Policy::Fail, |_key| {
        let second_call = std::sync::Arc::clone(&second_call);
        let call = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if call == 0 {
                return Err(StepError::retryable("the provider timed out"));
            }
            second_call.notify_one();
            std::future::pending::<()>().await;
            Ok::<u32, StepError>(0)
        }
    });
    tokio::select! {
        _ = step => panic!("the step cannot finish"),
        () = second_call.notified() => {}
    }
    drop(execution);
    barrier(&journal).await;
    // The first attempt failed before its effect; the second may have had it. An operator's
    // check is about the second.
    assert_eq!(journal.steps(id).unwrap()[0].attempts, 2);
    let seen = journal
        .operator()
        .seen_intent(id, 0)
        .unwrap()
        .expect("ambiguous");
    assert_eq!(seen.to_string(), "a2-r0");
}

#[tokio::test]
async fn stale_operator_answer_is_refused_after_the_step_was_retried() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let calls = AtomicU32::new(0);
    assert!(
        crash_inside_retry_step(&journal, id, &calls)
            .await
            .is_none()
    );
    barrier(&journal).await;
    // The operator looks at the intent of the first attempt (and would check the outside
    // world)...
    let seen = journal
        .operator()
        .seen_intent(id, 0)
        .unwrap()
        .expect("ambiguous");
    assert_eq!(seen.to_string(), "a1-r0");
    // ...meanwhile the program restarts, Retry runs the effect again, and it crashes again.
    assert!(
        crash_inside_retry_step(&journal, id, &calls)
            .await
            .is_none()
    );
    barrier(&journal).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // What the operator checked was the first attempt's effect: "not done" about it says
    // nothing of the second one.
    refuse_stale_then_accept_fresh(&journal, id, seen, "then a1-r0, now a2-r0").await;
}

#[tokio::test]
async fn stale_operator_answer_is_refused_after_another_operator_resolved_and_the_step_reran() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    ambiguous_step(&journal, id).await;
    barrier(&journal).await;
    // Operator one looks at the intent (and would check the outside world)...
    let seen = journal
        .operator()
        .seen_intent(id, 0)
        .unwrap()
        .expect("ambiguous");
    // ...meanwhile operator two answers "not done", and the step runs again and crashes again.
    journal
        .operator()
        .resolve(id, 0, durably_journal::Resolution::NotDone)
        .await
        .unwrap();
    barrier(&journal).await;
    ambiguous_step(&journal, id).await;
    barrier(&journal).await;
    // Operator one's answer was about the old intent: it must not apply to the new one.
    refuse_stale_then_accept_fresh(&journal, id, seen, "then a1-r0, now a1-r1").await;
}

/// An operator's cancel of an execution that waits for a time or a topic (a queued one with a
/// not-before time, a parked one) failed on the row's CHECK, which keeps `due_at` and
/// `wait_topic` to queued and waiting executions: the cancel must clear them with the wait.
#[tokio::test]
async fn an_operator_cancels_an_execution_that_waits_for_a_time_or_a_topic() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    for (status, topic) in [("queued", None), ("waiting", Some("approval"))] {
        let id = durably_journal::new_execution_id();
        start(&journal, id).await.complete(&1).await.unwrap();
        journal
            .write(move |conn| {
                conn.execute(
                    "UPDATE executions SET status = ?2, finalized_at = NULL, output = NULL,
                                           due_at = '2999-01-01T00:00:00.000Z', wait_topic = ?3
                     WHERE execution_id = ?1",
                    durably_journal::durably_db::params![id.to_string(), status, topic],
                )?;
                Ok(())
            })
            .await
            .unwrap();
        journal.operator().cancel(id, "not needed").await.unwrap();
        let (status, due_at, wait_topic): (String, Option<String>, Option<String>) = journal
            .read(|conn| {
                Ok(conn.query_row(
                    "SELECT status, due_at, wait_topic FROM executions WHERE execution_id = ?1",
                    [id.to_string()],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )?)
            })
            .unwrap();
        assert_eq!(
            (status.as_str(), due_at, wait_topic),
            ("cancelled", None, None)
        );
    }
}
