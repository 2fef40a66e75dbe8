//! A crash at any of the writes that `Runtime::run` adds loses only work that may run again:
//! the deferred open (`journal::after-lock-commit`), a write-behind flush
//! (`journal::after-deferred-flush-commit`) and the finalize that rides on the last step
//! (`runtime::after-finalize-commit`). After a restart the execution completes with the
//! outcomes the journal recorded; every effect saw only durable inputs (W1: an idempotent or
//! guarded closure never ran on a pure result that a crash could replace with another), the
//! guarded effect ran once, and closures before the open ran with token 0, after it with the
//! lock's.
//!
//! Method: a `runtime_worker` child runs the workflow (reserve, draw a random number, notify
//! and charge with it, summarize) with the failpoint set to abort; a fresh child then runs
//! the same id to its end. Effects append `<step> <id> <key> <token> <value>` to a ledger the
//! engine never writes; the test compares the ledger with the journal's recorded steps.
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::runtime::{effects, output, run, step_results};
use support::{Scratch, integrity};
use uuid::Uuid;

/// Runs the workflow with `failpoint` set, which must abort it, then again to its end.
fn crash_then_finish(failpoint: &str) -> (Scratch, Uuid, Value) {
    let scratch = Scratch::new();
    let id = Uuid::now_v7();
    let crashed = run(&scratch, id, &[("FAILPOINTS", failpoint)]);
    assert!(
        crashed.aborted(),
        "{failpoint} did not abort the run: {crashed:?}"
    );
    assert!(
        crashed.lines.iter().all(|line| line["outcome"].is_null()),
        "the crashed run answered: {crashed:?}"
    );
    let finished = run(&scratch, id, &[]);
    let output = output(&finished);
    (scratch, id, output)
}

/// What every crash must leave once the execution is finished.
fn assert_only_repeatable_work_was_lost(scratch: &Scratch, id: Uuid, output: &Value) {
    let steps = step_results(&scratch.database, id);
    let names: Vec<&str> = steps.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["reserve", "draw", "notify", "charge", "summarize"]);
    let draw: u64 = steps[1].1.parse().unwrap();
    assert_eq!(
        output["draw"], draw,
        "the output disagrees with the journal"
    );
    assert_eq!(output["reserved_by"].to_string(), steps[0].1);

    let ledger = effects(&scratch.ledger, id);
    let of = |step: &str| ledger.iter().filter(|e| e.step == step).collect::<Vec<_>>();
    for effect in of("notify").into_iter().chain(of("charge")) {
        assert_eq!(
            effect.value, draw,
            "an effect ran on a draw the journal lost: {effect:?}"
        );
        assert!(
            effect.token > 0,
            "an effect after the open ran without the lock: {effect:?}"
        );
    }
    assert_eq!(
        of("charge").len(),
        1,
        "the guarded effect repeated: {ledger:?}"
    );
    assert!(!of("notify").is_empty());
    let reserves = of("reserve");
    assert_eq!(
        reserves[0].token, 0,
        "the first closure ran before the open: token 0"
    );
    assert!(reserves.iter().all(|e| e.key == reserves[0].key));
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn a_crash_after_the_deferred_open_loses_nothing_durable() {
    let (scratch, id, output) = crash_then_finish("journal::after-lock-commit=return");
    assert_only_repeatable_work_was_lost(&scratch, id, &output);
}

#[test]
fn a_crash_after_the_first_flush_loses_nothing_durable() {
    let (scratch, id, output) = crash_then_finish("journal::after-deferred-flush-commit=return");
    assert_only_repeatable_work_was_lost(&scratch, id, &output);
}

#[test]
fn a_crash_after_the_flush_of_a_guarded_result_runs_the_charge_once() {
    let (scratch, id, output) =
        crash_then_finish("journal::after-deferred-flush-commit=1*off->return");
    assert_only_repeatable_work_was_lost(&scratch, id, &output);
}

#[test]
fn a_crash_after_the_finalize_keeps_the_outcome() {
    let (scratch, id, output) = crash_then_finish("runtime::after-finalize-commit=return");
    assert_only_repeatable_work_was_lost(&scratch, id, &output);
    let ledger = effects(&scratch.ledger, id);
    assert_eq!(
        ledger.len(),
        3,
        "the finished execution ran again: {ledger:?}"
    );
}
