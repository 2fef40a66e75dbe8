//! A guarded step that no policy may decide (policy `Fail`, or `Retry` past
//! `ambiguous_reruns_max`) parks its execution `awaiting_operator`, in the transaction of its one
//! `ambiguity_failed` event: no open reopens it (so workers retrying it neither take its lock,
//! nor bump its epoch, nor write more events), the operator's `seen_intent` is never refused
//! `Locked` because of it, `Error::Ambiguous` says why, `Journal::awaiting_operator` lists the
//! step, and the operator's answer makes the execution resumable again.
//!
//! Method: a step is left in the ambiguous window by dropping its future once its intent is
//! durable (as a crash would); two journals on one file (two lock instances, as two processes)
//! then reopen it again and again, and the lock row, the events and the status are read back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::{
    AmbiguityReason, Error, Journal, Opened, Policy, PolicyKind, Resolution, Status, StepError,
};
use support::{Scratch, barrier, leave_guarded_step_ambiguous, start};
use uuid::Uuid;

/// The lock's epoch, and the events of `kind` for `id`.
fn epoch_and_events(journal: &Journal, id: Uuid, kind: &str) -> (i64, usize) {
    let epoch = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT epoch FROM locks WHERE resource = ?1",
                [id.to_string()],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    let events = journal.events(id).unwrap();
    (
        epoch,
        events.iter().filter(|event| event.kind == kind).count(),
    )
}

/// Reopens `id` and runs its guarded step `charge` under `policy`, never finishing it.
async fn rerun_charge(journal: &Journal, id: Uuid, policy: Policy) -> Result<(), Error> {
    let Opened::Running(execution) = journal
        .open_execution(id, "test", "a test", &"input")
        .await?
    else {
        panic!("{id} finished");
    };
    execution
        .guarded("charge", policy, |_key| async { Ok::<u32, StepError>(1) })
        .await
        .map(drop)
}

#[tokio::test]
async fn a_fail_step_parks_its_execution_until_the_operator_answers() {
    let scratch = Scratch::new();
    let (first, second) = (scratch.open(), scratch.open());
    let id = durably_journal::new_execution_id();
    {
        let mut execution = start(&first, id).await;
        leave_guarded_step_ambiguous(&mut execution).await;
    }
    barrier(&first).await;

    // The next run finds the intent; under Fail it is left to an operator.
    let execution = start(&first, id).await;
    let error = execution
        .guarded("charge", Policy::Fail, |_key| async {
            Ok::<u32, StepError>(1)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Ambiguous {
                seq: 0,
                reason: AmbiguityReason::PolicyFail,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("its policy asks for an operator"),
        "{error}"
    );
    assert_eq!(
        first.get(id).unwrap().unwrap().status,
        Status::AwaitingOperator
    );

    // While the halted handle still holds the lock, the operator may already look: the holder
    // cannot run the step any more.
    let seen = first.operator().seen_intent(id, 0).unwrap();
    assert!(seen.is_some());
    drop(execution);
    barrier(&first).await;

    let parked = epoch_and_events(&first, id, "ambiguity_failed");
    assert_eq!(parked.1, 1);
    for round in 0..20 {
        let journal = if round % 2 == 0 { &first } else { &second };
        let refused = rerun_charge(journal, id, Policy::Fail).await.unwrap_err();
        assert!(
            matches!(refused, Error::AwaitingOperator { execution_id, seq: 0 } if execution_id == id),
            "{refused:?}"
        );
        let seen_now = second.operator().seen_intent(id, 0).unwrap();
        assert_eq!(
            seen_now, seen,
            "nobody reran the step: the operator's view holds"
        );
    }
    assert_eq!(
        epoch_and_events(&first, id, "ambiguity_failed"),
        parked,
        "no open took the lock, bumped the epoch or wrote an event"
    );

    let waiting = second.awaiting_operator().unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        (
            waiting[0].execution_id,
            waiting[0].seq,
            waiting[0].step.as_str()
        ),
        (id, 0, "charge")
    );
    assert_eq!(waiting[0].policy, PolicyKind::Fail);
    assert_eq!(waiting[0].reason, AmbiguityReason::PolicyFail);

    second
        .operator()
        .resolve_seen(
            id,
            0,
            seen.unwrap(),
            Resolution::Completed(serde_json::json!(7)),
        )
        .await
        .unwrap();
    assert_eq!(first.get(id).unwrap().unwrap().status, Status::Interrupted);
    assert_eq!(first.get(id).unwrap().unwrap().status_detail, None);
    assert!(second.awaiting_operator().unwrap().is_empty());
    assert!(
        first
            .recoverable()
            .unwrap()
            .iter()
            .any(|record| record.execution_id == id),
        "a program's recovery finds it again"
    );

    let execution = start(&first, id).await;
    let charged = execution
        .guarded("charge", Policy::Fail, |_key| async {
            Ok::<u32, StepError>(1)
        })
        .await
        .unwrap();
    assert!(matches!(charged, durably_journal::Guarded::Done(7)));
    execution.complete(&"done").await.unwrap();
}

#[tokio::test]
async fn a_retry_step_past_its_rerun_limit_waits_for_an_operator_and_says_why() {
    let scratch = Scratch::new();
    let journal = scratch.builder().ambiguous_reruns_max(1).open().unwrap();
    let id = durably_journal::new_execution_id();
    // Two runs crash inside the step: the first run's, and the one re-run Retry allows.
    for _ in 0..2 {
        let execution = start(&journal, id).await;
        let called = std::sync::Arc::new(tokio::sync::Notify::new());
        let step = execution.guarded("charge", Policy::Retry, |_key| {
            let called = std::sync::Arc::clone(&called);
            async move {
                called.notify_one();
                std::future::pending::<()>().await;
                Ok::<u32, StepError>(0)
            }
        });
        tokio::select! {
            _ = step => panic!("the step cannot finish"),
            () = called.notified() => {}
        }
        drop(execution);
        barrier(&journal).await;
    }

    let error = rerun_charge(&journal, id, Policy::Retry).await.unwrap_err();
    let Error::Ambiguous { seq: 0, reason, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        *reason,
        AmbiguityReason::RerunsExhausted { reruns: 1, max: 1 }
    );
    assert!(
        error.to_string().contains("already re-run 1 times"),
        "{error}"
    );
    barrier(&journal).await;
    let record = journal.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::AwaitingOperator);
    let detail = record.status_detail.unwrap();
    assert_eq!(
        detail,
        serde_json::json!({
            "reason": "reruns_exhausted", "reruns": 1, "max": 1,
            "seq": 0, "step": "charge", "policy": "retry",
        })
    );
    let waiting = journal.awaiting_operator().unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].policy, PolicyKind::Retry);

    let refused = rerun_charge(&journal, id, Policy::Retry).await.unwrap_err();
    assert!(
        matches!(refused, Error::AwaitingOperator { seq: 0, .. }),
        "{refused:?}"
    );

    journal
        .operator()
        .resolve(id, 0, Resolution::NotDone)
        .await
        .unwrap();
    rerun_charge(&journal, id, Policy::Retry).await.unwrap();
}
