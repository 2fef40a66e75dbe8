//! The README's approval walk-through, as a user runs it: the `approval` example parks waiting
//! for a decision, is killed with SIGKILL while parked, is started again, and finishes once
//! `durably send` delivers the approval from another process. The journal then holds one
//! completed execution whose refund ran once and whose message was consumed once.
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example approval`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::durably;

/// How long any one stage may take before the test fails instead of hanging.
const STAGE_MAX: Duration = Duration::from_mins(1);

/// The example's binary, beside this test's directory in the target tree.
fn example_binary() -> PathBuf {
    let test = std::env::current_exe().unwrap();
    let profile_dir = test.parent().and_then(Path::parent).unwrap();
    let binary = profile_dir.join("examples").join("approval");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build -p durably --example approval`",
        binary.display()
    );
    binary
}

/// A running example and the lines it prints.
struct Example {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Example {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(example_binary())
            .arg(db)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    /// Reads lines until one contains `needle`, and returns it.
    fn line_containing(&mut self, needle: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if line.contains(needle) {
                return line;
            }
        }
        panic!("the example ended without printing a line containing {needle:?}");
    }
}

/// The execution's status, read with plain SQL as an operator would.
fn status(db: &Path, id: &str) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row(
        "SELECT status FROM executions WHERE execution_id = ?1",
        [id],
        |row| row.get(0),
    )
    .unwrap()
}

/// Waits until the execution reads `wanted`, failing the test after [`STAGE_MAX`].
fn wait_for_status(db: &Path, id: &str, wanted: &str) {
    let deadline = Instant::now() + STAGE_MAX;
    loop {
        let now = status(db, id);
        if now == wanted {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "status stayed {now}, never {wanted}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn approval_survives_a_kill_while_parked_and_finishes_after_durably_send() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("approval.db");

    let mut first = Example::start(&db);
    let line = first.line_containing("awaiting approval");
    let id = line
        .strip_prefix("execution ")
        .and_then(|rest| rest.split(':').next())
        .unwrap()
        .to_owned();
    first.line_containing("durably --db");
    wait_for_status(&db, &id, "waiting");

    // Parked: the process holds nothing the journal depends on.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(status(&db, &id), "waiting");

    let mut second = Example::start(&db);
    second.line_containing("awaiting approval");
    second.line_containing("durably --db");

    let db_arg = db.to_str().unwrap();
    let decision = r#"{"approved": true, "by": "alice"}"#;
    let sent = durably(&["--db", db_arg, "send", &id, "approval", decision]);
    assert!(sent.status.success(), "{sent:?}");
    assert!(
        String::from_utf8_lossy(&sent.stdout).contains("sent message"),
        "{sent:?}"
    );

    let done = second.line_containing("completed");
    assert!(done.contains("refunded 2050 cents"), "{done}");
    let deadline = Instant::now() + STAGE_MAX;
    while second.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the example did not exit after completing"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(second.child.wait().unwrap().success());

    let conn = rusqlite::Connection::open(&db).unwrap();
    assert_eq!(status(&db, &id), "completed");
    let refunds: u32 = conn
        .query_row(
            "SELECT count(*) FROM steps WHERE execution_id = ?1 AND name = 'refund' \
             AND state = 'completed'",
            [&id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(refunds, 1);
    let consumed: u32 = conn
        .query_row(
            "SELECT count(*) FROM messages WHERE execution_id = ?1 AND consumed_seq IS NOT NULL",
            [&id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(consumed, 1);

    // A third start finds the execution finished and prints its outcome without waiting.
    let mut third = Example::start(&db);
    let again = third.line_containing("completed");
    assert!(again.contains("refunded 2050 cents"), "{again}");
    assert!(third.child.wait().unwrap().success());
}
