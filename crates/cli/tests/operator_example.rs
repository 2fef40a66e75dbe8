//! The `operator` example, run to its end as a user runs it: its worker process is killed
//! with SIGKILL inside a `Policy::Fail` step's ambiguous window, after the fake bank served
//! the transfer; the resumed run parks the execution for an operator, and the example answers
//! through the library's operator API with the seen token it printed. The journal then holds
//! the execution completed, the step completed with the bank's receipt after one attempt, one
//! `ambiguity_failed` and one `operator_resolved` event for it; the bank's ledger holds the
//! transfer once; and the command the example prints as the equivalent `durably resolve`
//! names that step and token.
//!
//! It runs on the backend `DURABLY_TEST_BACKEND` names: on PostgreSQL the example and `durably
//! --db` are given the same URL (see `common::example`).
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example operator`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::example::{
    Site, assert_each_effect_once, execution_id, guarded_steps, ledger, line_with, status, value,
};

#[test]
fn an_ambiguous_transfer_is_resolved_with_its_token_and_completes_once() {
    let db = Site::new();

    let printed = db.run("operator", &[]);
    line_with(&printed, "killed worker process");
    let waiting = line_with(&printed, "awaits an operator");
    let id = execution_id(waiting);
    assert!(
        waiting.contains("step 1 (send transfer), policy fail"),
        "{waiting}"
    );
    let token = line_with(&printed, "seen token: ")
        .strip_prefix("seen token: ")
        .unwrap()
        .to_owned();
    assert_eq!(token, "a1-r0");
    let resolved = line_with(&printed, "resolved, as `durably");
    assert!(
        resolved.contains(&format!("resolve {id} 1 --seen {token} --completed ")),
        "{resolved}"
    );

    assert_eq!(status(&db, &id), "completed");
    let steps = guarded_steps(&db, &id);
    let [transfer] = steps.as_slice() else {
        panic!("{steps:#?}");
    };
    assert_eq!(
        transfer.attempts, 1,
        "the operator's answer ran nothing again"
    );
    assert_each_effect_once(&db, &id, |_| "bank");
    assert_eq!(ledger(&db, "bank").len(), 1);

    let events = |kind: &str| -> u32 {
        let sql = format!(
            "SELECT count(*) FROM events WHERE execution_id = ?1 AND seq = 1 AND kind = '{kind}'"
        );
        value(&db, &sql, &id)
    };
    assert_eq!(events("ambiguity_failed"), 1);
    assert_eq!(events("operator_resolved"), 1);
    let result: String = value(
        &db,
        "SELECT result FROM steps WHERE execution_id = ?1 AND seq = 1",
        &id,
    );
    let result: String = serde_json::from_str(&result).unwrap();
    assert_eq!(result, "125000 cents to ada@example.com for invoice 0");
}
