//! What these prove: `durably demo` runs end to end in well under 30 seconds, demonstrates
//! every policy with the effect counts its policies promise (it exits non-zero otherwise),
//! refuses to overwrite a database the user named, and, killed mid-run, leaves no child
//! process behind. Method: run the built binary on a scratch path, then check its output and
//! the database it left, or kill it and watch its child.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
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

/// A demo killed mid-run (SIGKILL: nothing of it runs after) takes its children with it. Its
/// first worker, which stops inside a guarded step and waits there for the demo to kill it,
/// ends by itself instead. A child that lived on would append to the effect ledger of the next
/// run on the same path, and that run would report effects that ran twice.
#[test]
fn a_killed_demo_leaves_no_child_running() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_durably"))
        .args(["demo", "--db", db.to_str().unwrap()])
        .env_remove("DURABLY_DB")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The demo relays its first worker's narration as "worker <pid>: ..." lines.
    let worker: u32 = BufReader::new(demo.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .find_map(|line| {
            let rest = line.trim_start().strip_prefix("worker ")?;
            rest.split(':').next()?.parse().ok()
        })
        .expect("the demo names its first worker");
    demo.kill().unwrap();
    demo.wait().unwrap();

    // Its parent gone, a worker ends within milliseconds. Unwatched, it would wait at its crash
    // point for 20 s (the worker's own bound) and then go on: the deadline is well inside that.
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(worker) {
        assert!(
            Instant::now() < deadline,
            "worker {worker} outlived its demo"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process runs: it exists and is not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state is the first field after the parenthesised command name.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}
