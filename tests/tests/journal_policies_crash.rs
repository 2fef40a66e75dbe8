//! The ambiguity policies across a real process crash. A guarded step whose process dies after
//! its intent committed and before its result is the one ambiguous case; each policy must do
//! exactly what its author chose, and the closure-call counts prove it: Skip calls nothing and
//! says so (skipped outcome, `ambiguity_skipped` event); Retry calls once more with the same
//! idempotency key; Fail refuses with `Ambiguous` on the first reopen, which parks the
//! execution for an operator, and every later open is refused (`AwaitingOperator`) until an
//! operator resolves it (completed: the recorded value, no call; not-done: exactly one call);
//! Reconcile calls
//! nothing when the probe finds the effect and once when it does not.
//!
//! Method: a `journal_worker` child runs the step with the failpoint
//! `journal::after-intent-commit` set to abort the process; the test sees it die of SIGABRT.
//! Fresh children then reopen the execution. Every closure call appends a line with its
//! idempotency key to a ledger file that the engine never writes, and the test counts lines.

#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::{IdempotencyKey, Journal, Resolution, event_kind};
use serde_json::json;
use support::journal::{Run, run};
use support::{Scratch, integrity};
use uuid::Uuid;

const CRASH_AFTER_INTENT: (&str, &str) = ("FAILPOINTS", "journal::after-intent-commit=return");
/// Every step passes `journal::after-effect`: let the pure step `prepare` pass, crash in
/// `charge`.
const CRASH_AFTER_EFFECT: (&str, &str) = ("FAILPOINTS", "journal::after-effect=1*off->return");

fn guarded(scratch: &Scratch, id: Uuid, policy: &str, env: &[(&str, &str)]) -> Run {
    let (db, ledger, id) = (
        scratch.database.to_str().unwrap(),
        scratch.ledger.to_str().unwrap(),
        id.to_string(),
    );
    run(&["guarded", db, ledger, &id, policy], env)
}

/// Runs the step in a child that aborts after the intent of `charge` committed, and checks
/// that the journal was left in the ambiguous window with no call of the closure.
fn crash_after_intent(scratch: &Scratch, id: Uuid, policy: &str) {
    let crashed = guarded(scratch, id, policy, &[CRASH_AFTER_INTENT]);
    assert!(
        crashed.aborted(),
        "the child did not crash at the failpoint: {crashed:?}"
    );
    assert!(
        crashed.lines.is_empty(),
        "the crashed child answered: {crashed:?}"
    );
    let id = id.to_string();
    assert_eq!(scratch.ledger_lines("prepare", &id).len(), 1);
    assert_eq!(
        scratch.ledger_lines("charge", &id).len(),
        0,
        "the effect ran before the crash"
    );
    let journal = Journal::open(&scratch.database).unwrap();
    let steps = journal.steps(id.parse().unwrap()).unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(
        (steps[1].name.as_str(), steps[1].state.as_str()),
        ("charge", "intent")
    );
}

fn key_of(id: Uuid) -> String {
    IdempotencyKey::derive(id, 1, "charge").to_string()
}

#[test]
fn skip_calls_nothing_more_and_reports_the_step_skipped_with_an_audit_event() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash_after_intent(&scratch, id, "skip");

    let answer = guarded(&scratch, id, "skip", &[]).answer().clone();
    assert_eq!(answer["outcome"], "skipped", "{answer}");
    assert_eq!(answer["key"], key_of(id));
    assert!(
        scratch.ledger_lines("charge", &id.to_string()).is_empty(),
        "Skip ran the effect"
    );
    assert_eq!(
        scratch.ledger_lines("prepare", &id.to_string()).len(),
        1,
        "replay re-ran prepare"
    );

    let journal = Journal::open(&scratch.database).unwrap();
    let steps = journal.steps(id).unwrap();
    assert_eq!(steps[1].state, durably_journal::StepState::Skipped);
    let skipped_events = journal
        .events(id)
        .unwrap()
        .into_iter()
        .filter(|event| event.kind == event_kind::AMBIGUITY_SKIPPED && event.seq == Some(1))
        .count();
    assert_eq!(skipped_events, 1);
    // The worker failed the execution on the skip; reopening runs nothing.
    let again = guarded(&scratch, id, "skip", &[]).answer().clone();
    assert_eq!(
        (again["outcome"].as_str(), again["status"].as_str()),
        (Some("finished"), Some("failed"))
    );
    assert!(scratch.ledger_lines("charge", &id.to_string()).is_empty());
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn retry_calls_exactly_once_more_with_the_same_key() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash_after_intent(&scratch, id, "retry");

    let answer = guarded(&scratch, id, "retry", &[]).answer().clone();
    assert_eq!(answer["outcome"], "done", "{answer}");
    let calls = scratch.ledger_lines("charge", &id.to_string());
    assert_eq!(
        calls,
        [format!("charge {id} {}", key_of(id))],
        "not exactly one call with the key"
    );

    let journal = Journal::open(&scratch.database).unwrap();
    let steps = journal.steps(id).unwrap();
    assert_eq!(steps[1].state, durably_journal::StepState::Completed);
    assert_eq!(steps[1].idempotency_key.to_string(), key_of(id));
    assert_eq!(steps[1].attempts, 2, "the intent's attempt and the retry");
    assert!(
        journal
            .events(id)
            .unwrap()
            .iter()
            .any(|event| event.kind == event_kind::AMBIGUITY_RETRIED)
    );
    // Finished: a further run calls nothing.
    let again = guarded(&scratch, id, "retry", &[]).answer().clone();
    assert_eq!(again["outcome"], "finished");
    assert_eq!(scratch.ledger_lines("charge", &id.to_string()).len(), 1);
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn retry_after_the_effect_ran_repeats_it_once_with_the_same_key() {
    // The crash comes after the closure returned but before its result committed: the effect
    // happened once, and Retry makes it happen exactly once more, under the same key, so the
    // remote side can deduplicate.
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let crashed = guarded(&scratch, id, "retry", &[CRASH_AFTER_EFFECT]);
    assert!(crashed.aborted(), "{crashed:?}");
    assert_eq!(scratch.ledger_lines("charge", &id.to_string()).len(), 1);

    let answer = guarded(&scratch, id, "retry", &[]).answer().clone();
    assert_eq!(answer["outcome"], "done", "{answer}");
    let line = format!("charge {id} {}", key_of(id));
    assert_eq!(
        scratch.ledger_lines("charge", &id.to_string()),
        [line.clone(), line]
    );
}

#[test]
fn fail_is_ambiguous_on_every_reopen_until_an_operator_records_the_value() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash_after_intent(&scratch, id, "fail");

    for (reopen, kind) in [
        (1, "ambiguous"),
        (2, "awaiting_operator"),
        (3, "awaiting_operator"),
    ] {
        let answer = guarded(&scratch, id, "fail", &[]).answer().clone();
        assert_eq!(
            (answer["outcome"].as_str(), answer["kind"].as_str()),
            (Some("error"), Some(kind)),
            "reopen {reopen}: {answer}"
        );
        assert!(
            answer["message"].as_str().unwrap().contains("operator"),
            "{answer}"
        );
        assert!(
            scratch.ledger_lines("charge", &id.to_string()).is_empty(),
            "Fail ran the effect"
        );
    }
    let journal = Journal::open(&scratch.database).unwrap();
    assert_eq!(
        journal.steps(id).unwrap()[1].state,
        durably_journal::StepState::Intent,
        "Fail must leave the intent"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(journal.operator().resolve(
            id,
            1,
            Resolution::Completed(json!("settled by hand")),
        ))
        .unwrap();

    let answer = guarded(&scratch, id, "fail", &[]).answer().clone();
    assert_eq!(
        answer,
        json!({ "outcome": "done", "value": "settled by hand" })
    );
    assert!(
        scratch.ledger_lines("charge", &id.to_string()).is_empty(),
        "a resolved step ran"
    );
    let events = journal.events(id).unwrap();
    assert!(
        events
            .iter()
            .any(|event| event.kind == event_kind::OPERATOR_RESOLVED && event.seq == Some(1))
    );
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn fail_then_not_done_runs_the_step_exactly_once() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash_after_intent(&scratch, id, "fail");
    let answer = guarded(&scratch, id, "fail", &[]).answer().clone();
    assert_eq!(answer["kind"], "ambiguous", "{answer}");

    let journal = Journal::open(&scratch.database).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(journal.operator().resolve(id, 1, Resolution::NotDone))
        .unwrap();
    // Resolving twice is refused: the step is no longer ambiguous.
    assert!(
        runtime
            .block_on(journal.operator().resolve(id, 1, Resolution::NotDone))
            .is_err()
    );

    let answer = guarded(&scratch, id, "fail", &[]).answer().clone();
    assert_eq!(answer["outcome"], "done", "{answer}");
    assert_eq!(
        scratch.ledger_lines("charge", &id.to_string()),
        [format!("charge {id} {}", key_of(id))],
        "not-done must run the step exactly once, with the same key"
    );
    assert_eq!(
        journal.steps(id).unwrap()[1].state,
        durably_journal::StepState::Completed
    );
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn reconcile_calls_nothing_when_the_probe_finds_the_effect() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash_after_intent(&scratch, id, "reconcile-some");

    let answer = guarded(&scratch, id, "reconcile-some", &[])
        .answer()
        .clone();
    let expected = format!("found by the probe with key {}", key_of(id));
    assert_eq!(answer, json!({ "outcome": "done", "value": expected }));
    assert!(
        scratch.ledger_lines("charge", &id.to_string()).is_empty(),
        "the probe found it"
    );
    let journal = Journal::open(&scratch.database).unwrap();
    let steps = journal.steps(id).unwrap();
    assert_eq!(steps[1].state, durably_journal::StepState::Completed);
    assert_eq!(
        steps[1]
            .result
            .as_ref()
            .map(durably_journal::Payload::as_json),
        Some(serde_json::to_string(&expected).unwrap().as_str())
    );
    assert!(
        journal
            .events(id)
            .unwrap()
            .iter()
            .any(|event| event.kind == event_kind::AMBIGUITY_RECONCILED)
    );
}

#[test]
fn reconcile_calls_once_when_the_probe_does_not_find_the_effect() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash_after_intent(&scratch, id, "reconcile-none");

    let answer = guarded(&scratch, id, "reconcile-none", &[])
        .answer()
        .clone();
    assert_eq!(answer["outcome"], "done", "{answer}");
    assert_eq!(
        scratch.ledger_lines("charge", &id.to_string()),
        [format!("charge {id} {}", key_of(id))]
    );
    assert_eq!(integrity(&scratch.database), "ok");
}
