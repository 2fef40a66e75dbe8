//! The README's approval walk-through, as a user runs it: the `approval` example parks waiting
//! for a decision, is killed with SIGKILL while parked, is started again, and finishes once
//! `durably send` delivers the approval from another process. The journal then holds one
//! completed execution whose refund ran once and whose message was consumed once.
//!
//! It runs on the backend `DURABLY_TEST_BACKEND` names: on PostgreSQL the example and `durably
//! --db` are given the same URL (see `common::example`).
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example approval` (with `--features
//! durably/postgres` for PostgreSQL).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::example::{Site, consumed_messages, kill_while_parked, status, value};

#[test]
fn approval_survives_a_kill_while_parked_and_finishes_after_durably_send() {
    let db = Site::new();

    let id = kill_while_parked(&db, "approval", "awaiting approval");

    let mut second = db.start("approval", &[]);
    second.line_containing("awaiting approval");
    second.line_containing("durably --db");

    let decision = r#"{"approved": true, "by": "alice"}"#;
    let sent = db.durably(&["send", &id, "approval", decision]);
    assert!(sent.status.success(), "{sent:?}");
    assert!(
        String::from_utf8_lossy(&sent.stdout).contains("sent message"),
        "{sent:?}"
    );

    let done = second.line_containing("completed");
    assert!(done.contains("refunded 2050 cents"), "{done}");
    second.finish();

    assert_eq!(status(&db, &id), "completed");
    let refunds: u32 = value(
        &db,
        "SELECT count(*) FROM steps WHERE execution_id = ?1 AND name = 'refund' \
         AND state = 'completed'",
        &id,
    );
    assert_eq!(refunds, 1);
    assert_eq!(consumed_messages(&db, &id), 1);

    // A third start finds the execution finished and prints its outcome without waiting.
    let mut third = db.start("approval", &[]);
    let again = third.line_containing("completed");
    assert!(again.contains("refunded 2050 cents"), "{again}");
    third.finish();
}
