//! Guarantee: the torture checker notices each kind of violation it reports, so a clean torture
//! run means something.
//!
//! Method: run the failpoint matrix's workload once to completion (a clean run the checker
//! passes), then damage a copy of the run the way each bug would — an effect appended twice, an
//! acknowledged step missing from the journal, an effect of an unknown step, an execution left
//! running, a lock left held, an execution run while it awaited an operator — and check that the matching figure, and only a failing verdict,
//! comes out.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use durably_tests::torture::checker::{Report, check};
use durably_tests::torture::ledger::LEDGER_FILE;
use durably_tests::torture::workload::DATABASE_FILE;
use rusqlite::Connection;

const WORKER: &str = env!("CARGO_BIN_EXE_torture_worker");

fn clean_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(WORKER)
        .arg("matrix")
        .arg("--dir")
        .arg(dir.path())
        .args(["--seed", "5", "--durability", "process-crash"])
        .env_remove("FAILPOINTS")
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let report = check(dir.path()).unwrap();
    assert!(report.passed(), "{report:?}");
    dir
}

fn ledger_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(LEDGER_FILE))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn append_line(dir: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .append(true)
        .open(dir.join(LEDGER_FILE))
        .unwrap();
    writeln!(file, "{line}").unwrap();
}

fn damaged(damage: impl FnOnce(&Path, &Connection)) -> Report {
    let dir = clean_run();
    let conn = Connection::open(dir.path().join(DATABASE_FILE)).unwrap();
    damage(dir.path(), &conn);
    drop(conn);
    let report = check(dir.path()).unwrap();
    assert!(!report.passed(), "the damage went unnoticed: {report:?}");
    report
}

#[test]
fn a_guarded_effect_appended_twice_is_duplicated() {
    let report = damaged(|dir, _| {
        let line = ledger_lines(dir)
            .into_iter()
            .find(|line| line.contains(" guarded skip "))
            .unwrap();
        append_line(dir, &line);
    });
    assert!(report.duplicated >= 1, "{report:?}");
}

#[test]
fn an_acknowledged_step_missing_from_the_journal_is_lost() {
    let report = damaged(|_, conn| {
        conn.execute(
            "DELETE FROM steps WHERE (execution_id, seq) IN
               (SELECT execution_id, seq FROM steps WHERE state = 'completed' LIMIT 1)",
            [],
        )
        .unwrap();
    });
    assert!(report.lost >= 1, "{report:?}");
    assert!(
        report.unexpected >= 1,
        "its effect is now unknown too: {report:?}"
    );
}

#[test]
fn an_effect_of_no_step_is_unexpected() {
    let report = damaged(|dir, _| {
        let line = ledger_lines(dir).into_iter().next().unwrap();
        // Same record with a different key: rebuild it so its checksum holds.
        let body = &line[1..line.rfind(" #").unwrap()];
        let mut fields: Vec<&str> = body.split(' ').collect();
        fields[3] = "00000000-0000-8000-8000-000000000000";
        let ledger =
            durably_tests::torture::ledger::RecordFile::open(&dir.join(LEDGER_FILE)).unwrap();
        ledger.append(&fields).unwrap();
    });
    assert_eq!(report.unexpected, 1, "{report:?}");
}

#[test]
fn an_execution_left_running_is_stuck_and_a_held_lock_leaked() {
    let report = damaged(|_, conn| {
        conn.execute_batch(
            "UPDATE executions SET status = 'running', finalized_at = NULL
               WHERE execution_id = (SELECT execution_id FROM executions LIMIT 1);
             UPDATE locks SET instance_id = 'x', pid = 1, start_time = 1, boot_id = 'b',
                              pid_ns = 1, hostname = 'h', acquired_at = 'a', heartbeat_at = 'a'
               WHERE resource = (SELECT resource FROM locks LIMIT 1);",
        )
        .unwrap();
    });
    assert!(report.stuck >= 1, "{report:?}");
    assert_eq!(report.leaked_locks, 1, "{report:?}");
}

#[test]
fn a_run_of_an_execution_awaiting_an_operator_is_reopened() {
    let report = damaged(|_, conn| {
        conn.execute_batch(
            "INSERT INTO events (at, execution_id, seq, kind, detail)
             SELECT '2026-12-01T10:00:00.000Z', execution_id, 0, kind, '{}'
             FROM (SELECT execution_id FROM executions LIMIT 1),
                  (SELECT 'ambiguity_failed' AS kind UNION ALL SELECT 'ambiguity_retried')
             ORDER BY kind;",
        )
        .unwrap();
    });
    assert_eq!(report.reopened, 1, "{report:?}");
}
