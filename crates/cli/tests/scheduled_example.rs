//! The `scheduled` example, run to its end twice as a user runs it. The first run registers
//! the daily job, backfills three fixed past days and triggers the upcoming slot; each fire
//! is an execution of the job's workflow whose id is the fire id (`fire_id(job, slot)`, which
//! the test computes itself for the backfilled slots). The second run finds every one of
//! those fires done and starts none of them again. After both runs, every fire in the ledger
//! completed, and the fake mailer served each fire's mail once.
//!
//! It runs on the backend `DURABLY_TEST_BACKEND` names: on PostgreSQL the example and `durably
//! --db` are given the same URL (see `common::example`).
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example scheduled`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use durably::scheduler::{JobId, Slot, fire_id};

use common::example::{Site, assert_each_effect_once, ledger, line_with, pairs};

/// The backfilled slots: 07:00 in Paris on 2026-01-01, -02 and -03 (06:00 UTC in winter).
const BACKFILLED_MS: [i64; 3] = [1_767_247_200_000, 1_767_333_600_000, 1_767_420_000_000];

#[test]
fn each_fire_of_the_daily_job_runs_once_across_two_runs() {
    let db = Site::new();
    let job = JobId::new("daily-digest").unwrap();
    let backfilled: Vec<String> = BACKFILLED_MS
        .into_iter()
        .map(|ms| fire_id(&job, Slot::from_millis(ms).unwrap()).to_string())
        .collect();

    let first = db.run("scheduled", &[]);
    line_with(&first, "registered");
    for id in &backfilled {
        let line = line_with(&first, id);
        assert!(line.contains("started now"), "{line}");
        assert!(line.ends_with("mailed 1 time(s)"), "{line}");
    }
    let started = first
        .iter()
        .filter(|line| line.contains("started now"))
        .count();
    assert!(started >= 4, "the backfill and the trigger: {first:#?}");

    let second = db.run("scheduled", &[]);
    line_with(&second, "known from an earlier run");
    for id in &backfilled {
        let line = line_with(&second, id);
        assert!(line.contains("found completed: not run again"), "{line}");
    }

    let fires: Vec<(String, String)> = pairs(
        &db,
        "SELECT f.execution_id, e.status FROM fires AS f JOIN executions AS e USING (execution_id)
         WHERE f.job = ?1",
        job.as_str(),
    );
    assert!(fires.len() >= 4, "{fires:?}");
    for id in &backfilled {
        assert!(
            fires.iter().any(|(fire, _)| fire == id),
            "{id} in {fires:?}"
        );
    }
    for (id, status) in &fires {
        assert_eq!(status, "completed", "fire {id}");
        assert_each_effect_once(&db, id, |_| "mailer");
    }
    assert_eq!(
        ledger(&db, "mailer").len(),
        fires.len(),
        "one mail per fire"
    );
}
