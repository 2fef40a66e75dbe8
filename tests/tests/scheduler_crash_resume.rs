//! Guarantee: a scheduler process SIGKILLed in the middle of a fire (a workflow execution,
//! caught inside its guarded step) leaves a crashed execution; a restarted process's runtime
//! resumes it and the step's own ambiguity policy decides: under `Skip` the step is not run
//! again (an `ambiguity_skipped` audit event) and the workflow goes on to complete; under
//! `Retry` it is run again exactly once, with the same idempotency key. The slot is never
//! marked skipped for the crash, and later slots then fire normally, each once.
//!
//! Method: a `scheduler_worker` whose first effect appends to the independent ledger, marks
//! its slot in a `.blocked` file and blocks; the test waits for the mark, SIGKILLs the worker,
//! restarts one that does not block, and polls the database (bounded) until the blocked fire
//! has completed and two later slots have completed. The effect ledger, the `fire_ledger` view
//! and the `events` table are then checked.

mod support;

use support::{Scratch, wait_until};

/// Runs the kill-and-restart scenario; returns the scratch and the blocked slot.
fn killed_mid_body(policy: &str) -> (Scratch, i64) {
    let scratch = Scratch::new();
    let mut worker = scratch.worker(200, policy, true, "skip");
    wait_until("the body to block", || !scratch.blocked().is_empty());
    worker.kill();
    let blocked = scratch.blocked()[0];
    let restarted = scratch.worker(200, policy, false, "skip");
    let state_of_blocked = |scratch: &Scratch| -> String {
        scratch.query(
            "SELECT fire_ledger.state FROM fire_ledger JOIN fires USING (execution_id) WHERE slot_ms = ?1",
            [blocked],
        )
    };
    wait_until("the blocked fire to complete", || {
        state_of_blocked(&scratch) == "completed"
    });
    wait_until("two later slots", || {
        scratch.query::<i64>(
            "SELECT count(*) FROM fire_ledger JOIN fires USING (execution_id)
             WHERE fire_ledger.state = 'completed' AND slot_ms > ?1",
            [blocked],
        ) >= 2
    });
    restarted.finish();
    // Every slot other than the blocked one ran exactly once.
    for (slot, calls) in scratch.effects_by_slot() {
        if slot != blocked {
            assert_eq!(calls.len(), 1, "slot {slot}: {calls:?}");
        }
    }
    (scratch, blocked)
}

fn events_of_blocked(scratch: &Scratch, blocked: i64, kind: &str) -> i64 {
    scratch.query(
        "SELECT count(*) FROM events JOIN fires USING (execution_id)
         WHERE fires.slot_ms = ?1 AND events.kind = ?2",
        rusqlite::params![blocked, kind],
    )
}

#[test]
fn skip_does_not_run_the_interrupted_step_again() {
    let (scratch, blocked) = killed_mid_body("skip");
    let calls = &scratch.effects_by_slot()[&blocked];
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(events_of_blocked(&scratch, blocked, "ambiguity_skipped"), 1);
    // The blocked slot completed (waited for above); slots skipped meanwhile were skipped by
    // the overlap policy, never for the crash.
    let skipped_otherwise: i64 = scratch.query(
        "SELECT count(*) FROM fires
         WHERE state = 'skipped' AND (slot_ms = ?1 OR reason <> 'previous fire still running')",
        [blocked],
    );
    assert_eq!(skipped_otherwise, 0, "a crash never skips a slot");
}

#[test]
fn retry_runs_the_interrupted_step_once_more_with_the_same_key() {
    let (scratch, blocked) = killed_mid_body("retry");
    let calls = &scratch.effects_by_slot()[&blocked];
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].key, calls[1].key);
    assert_ne!(calls[0].pid, calls[1].pid);
    assert_eq!(events_of_blocked(&scratch, blocked, "ambiguity_retried"), 1);
}
