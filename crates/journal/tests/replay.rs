//! Replay: a reopened execution returns every recorded step outcome (values and journaled
//! errors) without calling a closure, and a code change that renames or re-kinds a step is
//! refused with `NonDeterminism` naming both the recorded and the called step.
//!
//! Method: run an execution to a point, drop its handle (a crash as far as the journal can
//! tell), reopen it in a fresh `Journal` on the same file, call the same steps with closures
//! that count their calls, and compare every value with what the first run produced.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use durably_journal::{Durability, Error, Execution, Guarded, Journal, Opened, Policy, StepError};
use serde_json::{Value, json};
use support::{Scratch, barrier, start};
use uuid::Uuid;

const STEPS: u32 = 1_000;

/// A value per step with strings that need escaping, extreme integers and nesting, so a lossy
/// round trip through the journal would show.
fn value_of(seq: u32) -> Value {
    json!({
        "seq": seq,
        "text": format!("step {seq}: \"quoted\", tab\t, newline\n, unicode \u{1F980} \u{0}"),
        "extremes": [i64::MIN, u64::MAX, 0, -1],
        "nested": { "list": (0..seq % 5).collect::<Vec<_>>(), "none": null, "flag": seq.is_multiple_of(2) },
    })
}

/// Runs step `seq` as pure, idempotent or guarded in turn; `calls` counts closure calls.
async fn run_step(execution: &mut Execution, seq: u32, calls: &AtomicU32) -> Value {
    let name = format!("step-{seq}");
    let value = value_of(seq);
    match seq % 3 {
        0 => execution
            .pure(&name, || {
                calls.fetch_add(1, Ordering::SeqCst);
                let value = value.clone();
                async move { Ok(value) }
            })
            .await
            .unwrap(),
        1 => execution
            .idempotent(&name, |_key| {
                calls.fetch_add(1, Ordering::SeqCst);
                let value = value.clone();
                async move { Ok(value) }
            })
            .await
            .unwrap(),
        _ => {
            let outcome = execution
                .guarded(&name, Policy::Fail, |_key| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let value = value.clone();
                    async move { Ok::<_, StepError>(value) }
                })
                .await
                .unwrap();
            match outcome {
                Guarded::Done(value) => value,
                Guarded::Skipped(skipped) => panic!("nothing was ambiguous: {skipped}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_step_execution_replays_every_result_unchanged_without_calling_a_closure() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let first_calls = AtomicU32::new(0);
    let mut first_values = Vec::new();
    {
        // What is tested is replay, not power loss: skip the fsync of each of the ~1,300 commits.
        let journal = scratch
            .builder()
            .durability(Durability::ProcessCrash)
            .open()
            .unwrap();
        let mut execution = start(&journal, id).await;
        for seq in 0..STEPS {
            first_values.push(run_step(&mut execution, seq, &first_calls).await);
        }
        drop(execution);
        barrier(&journal).await;
    }
    assert_eq!(first_calls.load(Ordering::SeqCst), STEPS);

    let journal = scratch.open();
    let Opened::Running(mut execution) = journal.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("a dropped execution is resumable, not finished");
    };
    assert!(execution.is_resume());
    let replay_calls = AtomicU32::new(0);
    for (seq, expected) in (0..STEPS).zip(&first_values) {
        let replayed = run_step(&mut execution, seq, &replay_calls).await;
        assert_eq!(&replayed, expected, "step {seq} replayed a different value");
        assert_eq!(replayed, value_of(seq));
    }
    assert_eq!(
        replay_calls.load(Ordering::SeqCst),
        0,
        "replay called a closure"
    );
    assert_eq!(execution.next_seq(), STEPS);

    // The first step after the recorded ones runs for real.
    let fresh = run_step(&mut execution, STEPS, &replay_calls).await;
    assert_eq!(fresh, value_of(STEPS));
    assert_eq!(replay_calls.load(Ordering::SeqCst), 1);
    execution.complete(&"done").await.unwrap();
    assert_eq!(journal.steps(id).unwrap().len(), STEPS as usize + 1);
}

#[tokio::test]
async fn a_closure_error_is_journaled_and_replayed_without_calling_the_closure() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let calls = AtomicU32::new(0);
    let failing = |calls: &AtomicU32| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Err::<u32, _>(StepError::fatal("the card was declined")) }
    };
    {
        let journal = scratch.open();
        let execution = start(&journal, id).await;
        let error = execution
            .pure("charge", || failing(&calls))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, Error::StepFailed { seq: 0, error, .. } if error.message == "the card was declined"),
            "{error:?}"
        );
        // A journaled failure does not stop the execution: the next step gets the next seq.
        assert_eq!(execution.next_seq(), 1);
    }
    let journal = scratch.open();
    barrier(&journal).await;
    let Opened::Running(execution) = journal.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("resumable");
    };
    let error = execution
        .pure("charge", || failing(&calls))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::StepFailed { seq: 0, error, .. } if error.message == "the card was declined" && !error.retryable),
        "{error:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the failed step ran again on replay"
    );
    let steps = journal.steps(id).unwrap();
    assert_eq!(steps[0].state, durably_journal::StepState::Failed);
}

async fn record_two_steps(journal: &Journal, id: Uuid) {
    let execution = start(journal, id).await;
    let _: u32 = execution
        .pure("fetch order", || async { Ok(1) })
        .await
        .unwrap();
    let _: u32 = execution
        .pure("charge card", || async { Ok(2) })
        .await
        .unwrap();
    drop(execution);
    barrier(journal).await;
}

async fn reopen(journal: &Journal, id: Uuid) -> Execution {
    match journal.open_execution(id, "test", "", &"").await.unwrap() {
        Opened::Running(execution) => execution,
        Opened::Finished(finished) => panic!("unexpectedly finished: {finished:?}"),
    }
}

#[tokio::test]
async fn replay_with_a_renamed_step_is_non_determinism_naming_both_names() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    record_two_steps(&journal, id).await;

    let execution = reopen(&journal, id).await;
    let calls = AtomicU32::new(0);
    let first: u32 = execution
        .pure("fetch order", || async { Ok(99) })
        .await
        .unwrap();
    assert_eq!(first, 1, "the recorded value, not the new closure's");
    let error = execution
        .pure("charge credit card", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(3_u32) }
        })
        .await
        .unwrap_err();
    let Error::NonDeterminism {
        seq,
        recorded,
        called,
        ..
    } = &error
    else {
        panic!("expected NonDeterminism, got {error:?}");
    };
    assert_eq!(*seq, 1);
    assert!(recorded.contains("\"charge card\""), "{recorded}");
    assert!(called.contains("\"charge credit card\""), "{called}");
    let message = error.to_string();
    assert!(
        message.contains("charge card") && message.contains("charge credit card"),
        "{message}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a mismatched step must not run"
    );

    // The handle stops there, and the journal is unchanged.
    let again = execution.pure("charge card", || async { Ok(2_u32) }).await;
    assert!(
        matches!(again, Err(Error::Halted { seq: 1, .. })),
        "{again:?}"
    );
    drop(execution);
    barrier(&journal).await;
    let names: Vec<String> = journal
        .steps(id)
        .unwrap()
        .into_iter()
        .map(|step| step.name)
        .collect();
    assert_eq!(names, ["fetch order", "charge card"]);
}

#[tokio::test]
async fn replay_with_a_step_of_another_kind_is_non_determinism() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    record_two_steps(&journal, id).await;

    let execution = reopen(&journal, id).await;
    let error = execution
        .guarded("fetch order", Policy::Retry, |_key| async {
            Ok::<u32, StepError>(1)
        })
        .await
        .unwrap_err();
    let Error::NonDeterminism {
        seq: 0,
        recorded,
        called,
        ..
    } = &error
    else {
        panic!("expected NonDeterminism at seq 0, got {error:?}");
    };
    assert!(recorded.starts_with("pure"), "{recorded}");
    assert!(called.starts_with("guarded"), "{called}");
}
