//! The `upgrade` example, as a user runs it: a process on the old code starts a run that
//! parks waiting for an approval and exits; a process on the patched code then finishes it and
//! a run of its own. The parked run answers `patched` false where it had passed the point on
//! the old code (no fraud check) and true where it had not (the receipt); the new run answers
//! true to both. The journal records each answer once, and `durably patches` reads them.
//!
//! It runs on the backend `DURABLY_TEST_BACKEND` names: on PostgreSQL the example and `durably
//! --db` are given the same URL (see `common::example`).
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example upgrade`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::example::{Site, execution_id, line_with, pairs};

#[test]
fn a_run_parked_on_old_code_finishes_on_the_patched_code() {
    let db = Site::new();

    let old = db.run("upgrade", &["old"]);
    let parked = execution_id(line_with(&old, "parked on the old code"));

    let new = db.run("upgrade", &["new"]);
    let line = |needle: &str| line_with(&new, needle);
    let resumed = line("(parked on the old code)");
    assert!(resumed.contains(&parked), "{resumed}");
    assert!(
        resumed.ends_with("fraud-check patched=false, receipt-email patched=true"),
        "{resumed}"
    );
    let started = line("(started on the new code)");
    assert!(
        started.ends_with("fraud-check patched=true, receipt-email patched=true"),
        "{started}"
    );

    let answers: Vec<(String, i64)> = pairs(
        &db,
        "SELECT patch_id, answer FROM runtime_patches WHERE execution_id = ?1 ORDER BY 1",
        &parked,
    );
    assert_eq!(
        answers,
        [
            ("fraud-check".to_owned(), 0),
            ("receipt-email".to_owned(), 1)
        ]
    );
    let listed = db.durably(&["patches", "fraud-check"]);
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("the call can be removed"),
        "{listed:?}"
    );
}
