//! The `agent` example, as a user runs it: the agent's first model turn asks for an approval
//! and the execution parks; the process is killed with SIGKILL while parked and started
//! again; `durably send` delivers the approval from another process; the agent then refunds
//! through its reconciled tool call, sleeps on its durable timer, replies, and the example
//! exits. The journal then holds one completed execution whose every guarded step (the four
//! model turns and the refund) ran its closure once and whose effect the fake providers'
//! ledgers record once, whose timer and message were each recorded once, and a third start
//! finds it finished.
//!
//! It runs on the backend `DURABLY_TEST_BACKEND` names: on PostgreSQL the example and `durably
//! --db` are given the same URL (see `common::example`).
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example agent`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::example::{
    Site, assert_each_effect_once, consumed_messages, execution_id, guarded_steps,
    kill_while_parked, ledger, line_with, status, value,
};

#[test]
fn the_agent_survives_a_kill_while_parked_and_runs_each_effect_once() {
    let db = Site::new();

    let id = kill_while_parked(&db, "agent", "waits for the approval");

    let mut second = db.start("agent", &[]);
    let waits = second.line_containing("waits for the approval");
    assert_eq!(
        execution_id(&waits),
        id,
        "a restart finds the same execution"
    );
    second.line_containing("durably --db");
    let decision = r#"{"approved": true, "by": "alice"}"#;
    let sent = db.durably(&["send", &id, "approval", decision]);
    assert!(sent.status.success(), "{sent:?}");
    let done = second.line_containing("completed");
    assert!(
        done.ends_with("refunded 2050 cents to ada@example.com; it has settled"),
        "{done}"
    );
    let report = second.finish();
    assert!(
        report.iter().all(|line| line.ends_with("served 1 time(s)")),
        "{report:#?}"
    );
    assert_eq!(report.len(), 5, "{report:#?}");

    assert_eq!(status(&db, &id), "completed");
    let steps = guarded_steps(&db, &id);
    let names: Vec<&str> = steps.iter().map(|step| step.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "model turn 0",
            "model turn 1",
            "refund",
            "model turn 2",
            "model turn 3"
        ]
    );
    // Killed while parked, nothing was in flight: no closure started twice.
    assert!(steps.iter().all(|step| step.attempts == 1), "{steps:#?}");
    assert_each_effect_once(&db, &id, |name| {
        if name == "refund" {
            "payments"
        } else {
            "model"
        }
    });
    assert_eq!(ledger(&db, "model").len(), 4);
    assert_eq!(ledger(&db, "payments").len(), 1);

    let timers: u32 = value(
        &db,
        "SELECT count(*) FROM steps WHERE execution_id = ?1 \
         AND name = 'durably:sleep/settlement' AND state = 'completed'",
        &id,
    );
    assert_eq!(timers, 1);
    assert_eq!(consumed_messages(&db, &id), 1);

    // A third start finds the execution finished and replays nothing.
    let third = db.run("agent", &[]);
    let again = line_with(&third, "completed");
    assert!(again.ends_with("it has settled"), "{again}");
    assert_eq!(ledger(&db, "model").values().sum::<usize>(), 4);
    assert_eq!(ledger(&db, "payments").values().sum::<usize>(), 1);
}
