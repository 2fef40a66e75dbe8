//! What these prove: `durably demo` runs end to end in well under 30 seconds, demonstrates
//! every policy with the effect counts its policies promise (it exits non-zero otherwise), and
//! refuses to overwrite a database the user named. Method: run the built binary once on a
//! scratch path, then check its output and the database it left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{assert_code, durably, stderr, stdout};

#[test]
fn the_demo_proves_each_policy_and_leaves_a_readable_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let started = Instant::now();
    let output = durably(&["demo", "--db", db.to_str().unwrap()]);
    assert_code(&output, 0);
    assert!(started.elapsed() < Duration::from_secs(30));
    let text = stdout(&output);
    for expected in [
        "the reconcile probe found the charge",
        "stopped: step 2 (charge) is ambiguous",
        "resolve",
        "SKIPPED under the Skip policy",
        "ambiguity_retried",
        "Scheduler",
        "Every invariant held",
        "sqlite3 ",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("| NO"), "{text}");
    let table: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("tick "))
        .collect();
    assert_eq!(table.len(), 5, "{text}");
    assert!(
        table.iter().all(|line| line.trim_end().ends_with("yes")),
        "{text}"
    );

    let conn = rusqlite::Connection::open(&db).unwrap();
    let completed: i64 = conn
        .query_row(
            "SELECT count(*) FROM executions WHERE status = 'completed'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(completed, 9, "4 checkouts and 5 fires");
    let stuck: i64 = conn
        .query_row("SELECT count(*) FROM ambiguous_steps", [], |row| row.get(0))
        .unwrap();
    assert_eq!(stuck, 1, "the execution left for the reader");

    let again = durably(&["demo", "--db", db.to_str().unwrap()]);
    assert_code(&again, 1);
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
}
