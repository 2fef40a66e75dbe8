//! A caller's hook and the journal's write it rides on survive a process crash together or not
//! at all. A crash after the hook ran and before the commit leaves neither the step's row nor
//! the hook's row (nor, for a release, the parked status, its event or the lock's release); a
//! crash right after the commit leaves both. A resumed run then records the step once, its
//! hook's row once, and never runs the hook of a replayed step.
//!
//! Method: a `journal_worker hooked` child runs `step_with` (or `release_to`) with a hook that
//! inserts a row into a side table of the journal's file, and aborts at the failpoint between
//! the hook and the COMMIT (`journal::before-hooked-result-commit`,
//! `journal::before-release-commit`) or right after it (`journal::after-result-commit`,
//! `journal::after-release-commit`). The test reads the file after the crash, runs a fresh
//! child without failpoints, and reads it again.

#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::journal::{Run, run};
use support::{Scratch, integrity, query_pairs};
use uuid::Uuid;

fn hooked(scratch: &Scratch, id: Uuid, mode: &str, failpoint: Option<&str>) -> Run {
    let db = scratch.database.to_str().unwrap();
    let env: Vec<(&str, &str)> = failpoint
        .map(|value| ("FAILPOINTS", value))
        .into_iter()
        .collect();
    run(&["hooked", db, &id.to_string(), mode], &env)
}

fn crash(scratch: &Scratch, id: Uuid, mode: &str, failpoint: &str) {
    let crashed = hooked(scratch, id, mode, Some(failpoint));
    assert!(
        crashed.aborted(),
        "the child did not crash at {failpoint}: {crashed:?}"
    );
    assert!(
        crashed.lines.is_empty(),
        "the crashed child answered: {crashed:?}"
    );
}

/// (name, state) of each step, in seq order.
fn steps(scratch: &Scratch, id: Uuid) -> Vec<(String, String)> {
    query_pairs(
        &scratch.database,
        &format!("SELECT name, state FROM steps WHERE execution_id = '{id}' ORDER BY seq"),
    )
}

/// The side table's notes, with their seq (-1 for none).
fn side(scratch: &Scratch) -> Vec<(i64, String)> {
    query_pairs(
        &scratch.database,
        "SELECT coalesce(seq, -1), note FROM side ORDER BY rowid",
    )
}

/// (status, number of `parked` events) of the execution, and whether its lock has a holder.
fn parking(scratch: &Scratch, id: Uuid) -> (String, i64, bool) {
    let (status, parked): (String, i64) = query_pairs(
        &scratch.database,
        &format!(
            "SELECT status, (SELECT count(*) FROM events WHERE execution_id = '{id}'
                             AND kind = 'parked')
             FROM executions WHERE execution_id = '{id}'"
        ),
    )
    .remove(0);
    let held: Vec<(String, i64)> = query_pairs(
        &scratch.database,
        &format!("SELECT resource, instance_id IS NOT NULL FROM locks WHERE resource = '{id}'"),
    );
    (
        status,
        parked,
        held.first().is_some_and(|(_, held)| *held == 1),
    )
}

#[test]
fn a_crash_between_the_hook_and_the_commit_leaves_neither_row() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash(
        &scratch,
        id,
        "step",
        "journal::before-hooked-result-commit=return",
    );
    assert_eq!(
        steps(&scratch, id),
        [("prepare".to_owned(), "completed".to_owned())]
    );
    assert!(
        side(&scratch).is_empty(),
        "the hook's row outlived its step's crash"
    );

    let answer = hooked(&scratch, id, "step", None).answer().clone();
    assert_eq!(answer["outcome"], "done", "{answer}");
    assert_eq!(steps(&scratch, id).len(), 2);
    assert_eq!(side(&scratch), [(1, "consumed".to_owned())]);
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn a_crash_after_the_commit_keeps_both_rows_and_replay_runs_no_hook() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    // `prepare`'s result is the first result commit, `consume`'s the second.
    crash(
        &scratch,
        id,
        "step",
        "journal::after-result-commit=1*off->return",
    );
    assert_eq!(steps(&scratch, id).len(), 2);
    assert_eq!(side(&scratch), [(1, "consumed".to_owned())]);

    let answer = hooked(&scratch, id, "step", None).answer().clone();
    assert_eq!(answer, serde_json::json!({ "outcome": "done", "value": 5 }));
    assert_eq!(
        side(&scratch),
        [(1, "consumed".to_owned())],
        "replay ran the hook again"
    );
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn a_crash_inside_a_release_leaves_the_execution_running_and_resumable() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash(
        &scratch,
        id,
        "release",
        "journal::before-release-commit=return",
    );
    let (status, parked, _) = parking(&scratch, id);
    assert_eq!((status.as_str(), parked), ("running", 0));
    assert!(
        side(&scratch).is_empty(),
        "the hook's row outlived the release's crash"
    );

    let answer = hooked(&scratch, id, "release", None).answer().clone();
    assert_eq!(answer["outcome"], "released", "{answer}");
    assert_eq!(parking(&scratch, id), ("waiting".to_owned(), 1, false));
    assert_eq!(side(&scratch), [(-1, "parked".to_owned())]);
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn a_crash_after_a_release_commit_leaves_it_parked_and_unlocked() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    crash(
        &scratch,
        id,
        "release",
        "journal::after-release-commit=return",
    );
    assert_eq!(parking(&scratch, id), ("waiting".to_owned(), 1, false));
    assert_eq!(side(&scratch), [(-1, "parked".to_owned())]);

    let answer = hooked(&scratch, id, "release", None).answer().clone();
    assert_eq!(answer["kind"], "other", "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains("waiting"),
        "{answer}"
    );
    assert_eq!(integrity(&scratch.database), "ok");
}
