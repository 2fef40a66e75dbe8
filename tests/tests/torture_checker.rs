//! Guarantee: the torture checker notices each kind of violation it reports, so a clean torture
//! run means something.
//!
//! Method: run the failpoint matrix's workload once to completion (a clean run the checker
//! passes), then damage a copy of the run the way each bug would — an effect appended twice, an
//! acknowledged step missing from the journal, an effect of an unknown step, an execution left
//! running, a lock left held, an execution run or claimed while it awaited an operator, a
//! guarded effect made without a lock, a queue run over its limit, a run that gave its slot
//! back silently, a runtime execution ended otherwise than its plan or its cancel says or with
//! another published value, an effect after an acknowledged cancel, an acknowledged message
//! missing, a consumed message its receive does not hold, a receive that returned another
//! message than the journal holds, a step written before its timer woke, an effect after its
//! run saw it was asked to stop, a step row newer than a cancel request, a timeout cancel of
//! an execution started without a deadline, two children of one start step, a flipped patch
//! answer, a run told another patch answer than the journal holds, a parallel step's effect
//! appended twice or missing, an effect of a fork's copied step — and check that the matching
//! figure, and a failing verdict, comes out.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use durably_tests::torture::checker::{Report, check};
use durably_tests::torture::ledger::{self, LEDGER_FILE, RecordFile};
use durably_tests::torture::workload::DATABASE_FILE;
use rusqlite::Connection;

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");

fn clean_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(TORTURE)
        .args(["worker", "matrix"])
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

#[test]
fn a_sibling_settling_after_its_step_parked_is_not_a_reopen() {
    let dir = clean_run();
    let conn = Connection::open(dir.path().join(DATABASE_FILE)).unwrap();
    conn.execute_batch(
        "INSERT INTO events (at, execution_id, seq, kind, detail)
             SELECT '2026-12-01T10:00:00.000Z', execution_id, seq, kind, '{}'
             FROM (SELECT execution_id FROM executions LIMIT 1),
                  (SELECT 'ambiguity_failed' AS kind, 0 AS seq UNION ALL
                   SELECT 'ambiguity_reconciled', 1)
             ORDER BY kind;",
    )
    .unwrap();
    drop(conn);
    let report = check(dir.path()).unwrap();
    assert_eq!(report.reopened, 0, "{report:?}");
    assert!(report.passed(), "{report:?}");
}

/// Runs `sql`, which must change exactly one row of the journal.
fn change_one(conn: &Connection, sql: &str) {
    assert_eq!(conn.execute(sql, []).unwrap(), 1, "{sql}");
}

/// Rewrites the ledger with `change` applied to every record (checksums recomputed).
fn rewrite_ledger(dir: &Path, mut change: impl FnMut(&mut Vec<String>)) {
    let path = dir.join(LEDGER_FILE);
    let mut records = ledger::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let file = RecordFile::open(&path).unwrap();
    for record in &mut records {
        change(record);
        let fields: Vec<&str> = record.iter().map(String::as_str).collect();
        file.append(&fields).unwrap();
    }
}

/// The id of the planned runtime execution the matrix cancelled at once (the held-back one).
fn cancelled_runtime_execution(conn: &Connection) -> String {
    conn.query_row(
        "SELECT e.execution_id FROM executions e JOIN runtime_executions USING (execution_id)
         WHERE e.status = 'cancelled' AND e.kind = 'torture'
           AND e.error ->> '$.cancelled' = 'torture canceller'",
        [],
        |row| row.get(0),
    )
    .unwrap()
}

#[test]
fn a_guarded_effect_made_without_a_lock_is_duplicated() {
    let report = damaged(|dir, _| {
        let mut done = false;
        rewrite_ledger(dir, |record| {
            if !done && record[4] == "guarded" && record[9] != "-" {
                record[9] = "0".to_owned();
                done = true;
            }
        });
    });
    assert_eq!(report.duplicated, 1, "{report:?}");
}

#[test]
fn a_claim_while_awaiting_an_operator_is_reopened() {
    let report = damaged(|_, conn| {
        conn.execute_batch(
            "INSERT INTO events (at, execution_id, seq, kind, detail)
             SELECT '2026-12-01T10:00:00.000Z', execution_id, seq, kind, '{}'
             FROM (SELECT execution_id FROM executions LIMIT 1),
                  (SELECT 'ambiguity_failed' AS kind, 0 AS seq UNION ALL
                   SELECT 'claimed', NULL)
             ORDER BY kind;",
        )
        .unwrap();
    });
    assert_eq!(report.reopened, 1, "{report:?}");
}

#[test]
fn four_runs_at_once_in_a_queue_limited_to_three_are_over_limit() {
    let report = damaged(|_, conn| {
        conn.execute_batch(
            "CREATE TEMP TABLE four AS SELECT execution_id FROM executions LIMIT 4;
             INSERT INTO events (at, execution_id, kind, detail)
             SELECT '2026-12-01T10:00:00.000Z', execution_id, kind, '{\"queue\":\"q\"}'
             FROM four, (SELECT 'claimed' AS kind UNION ALL SELECT 'released')
             ORDER BY kind, execution_id;",
        )
        .unwrap();
    });
    assert_eq!(report.over_limit, 1, "{report:?}");
    assert_eq!(report.queue_peak, 4, "{report:?}");
}

#[test]
fn a_run_that_gives_its_slot_back_with_no_event_is_over_limit() {
    let report = damaged(|_, conn| {
        let deleted = conn
            .execute("DELETE FROM events WHERE kind = 'released'", [])
            .unwrap();
        assert!(deleted >= 1);
    });
    assert!(report.over_limit >= 1, "{report:?}");
}

#[test]
fn a_runtime_execution_completed_with_another_output_is_a_wrong_end() {
    let report = damaged(|_, conn| {
        change_one(
            conn,
            "UPDATE executions SET output = '{\"steps\":99}' WHERE execution_id =
                   (SELECT e.execution_id FROM executions e JOIN runtime_executions
                      USING (execution_id) WHERE e.status = 'completed' LIMIT 1)",
        );
    });
    assert_eq!(report.wrong_end, 1, "{report:?}");
}

#[test]
fn an_acknowledged_cancel_that_did_not_hold_is_a_wrong_end() {
    let report = damaged(|_, conn| {
        let id = cancelled_runtime_execution(conn);
        conn.execute(
            "UPDATE executions SET status = 'failed', error = '{\"message\":\"x\"}'
             WHERE execution_id = ?1",
            [&id],
        )
        .unwrap();
    });
    assert_eq!(report.wrong_end, 1, "{report:?}");
}

#[test]
fn an_effect_after_an_acknowledged_cancel_is_after_cancel() {
    let report = damaged(|dir, conn| {
        let id = cancelled_runtime_execution(conn);
        let ledger = RecordFile::open(&dir.join(LEDGER_FILE)).unwrap();
        let now = durably_tests::torture::ledger::monotonic_ns().to_string();
        let key = "00000000-0000-8000-8000-000000000001";
        ledger
            .append(&["E", &id, "1", key, "idempotent", "-", "1", &now, "v", "1"])
            .unwrap();
    });
    assert_eq!(report.after_cancel, 1, "{report:?}");
}

#[test]
fn an_acknowledged_message_missing_from_the_journal_is_a_bad_message() {
    let report = damaged(|_, conn| {
        // The held-back execution's message: acknowledged, never consumed.
        change_one(
            conn,
            "DELETE FROM messages
             WHERE idempotency_key LIKE 'matrix-%' AND consumed_seq IS NULL",
        );
    });
    assert_eq!(report.bad_messages, 1, "{report:?}");
}

#[test]
fn a_step_written_before_its_timer_woke_is_an_early_wake() {
    let report = damaged(|_, conn| {
        change_one(
            conn,
            "UPDATE steps SET result = json_set(result, '$.wake_at', '2999-01-01T00:00:00.000Z')
             WHERE id = (SELECT min(id) FROM steps WHERE name LIKE 'durably:sleep/%')",
        );
    });
    assert!(report.early_wakes >= 1, "{report:?}");
}

#[test]
fn a_consumed_message_its_receive_does_not_hold_is_a_bad_message() {
    let report = damaged(|_, conn| {
        change_one(
            conn,
            "UPDATE messages SET consumed_seq = NULL, consumed_at = NULL
             WHERE id = (SELECT min(id) FROM messages WHERE consumed_seq IS NOT NULL)",
        );
    });
    assert_eq!(report.bad_messages, 1, "{report:?}");
}

#[test]
fn a_receive_that_returned_another_message_than_the_journal_holds_is_a_bad_message() {
    let report = damaged(|dir, conn| {
        let (id, seq): (String, i64) = conn
            .query_row(
                "SELECT execution_id, seq FROM steps WHERE name LIKE 'durably:recv/%' LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        let acks = dir.join(durably_tests::torture::ledger::ACKS_DIR);
        let log = RecordFile::open(&acks.join("damage.log")).unwrap();
        log.append(&["M", &id, &seq.to_string(), "another-message", "1", "1"])
            .unwrap();
    });
    assert_eq!(report.bad_messages, 1, "{report:?}");
}

#[test]
fn a_completed_execution_that_published_another_value_is_a_wrong_end() {
    let report = damaged(|_, conn| {
        change_one(
            conn,
            "UPDATE workflow_events SET value = '\"another\"'
             WHERE (execution_id, key) = (SELECT execution_id, key FROM workflow_events)",
        );
    });
    assert_eq!(report.wrong_end, 1, "{report:?}");
}

#[test]
fn an_effect_after_its_run_saw_a_stop_is_after_cancel() {
    let report = damaged(|dir, conn| {
        let id: String = conn
            .query_row(
                "SELECT e.execution_id FROM executions e JOIN runtime_executions USING (execution_id)
                 WHERE e.status = 'completed' AND e.kind = 'torture' LIMIT 1",
                [],
                |row| row.get(0),
            )
            .unwrap();
        let acks = dir.join(durably_tests::torture::ledger::ACKS_DIR);
        let log = RecordFile::open(&acks.join("damage.log")).unwrap();
        // Seen stopped at its first step, before any of its effects.
        log.append(&["O", &id, "0", "1", "0"]).unwrap();
    });
    assert!(report.after_cancel >= 1, "{report:?}");
}

#[test]
fn a_step_row_newer_than_a_cancel_request_is_after_cancel() {
    let report = damaged(|_, conn| {
        change_one(
            conn,
            "UPDATE events SET detail = json_set(detail, '$.last_step_id', 0),
                               execution_id = (
                                   SELECT execution_id FROM steps
                                   WHERE execution_id NOT IN (
                                       SELECT execution_id FROM events WHERE kind = 'resumed')
                                   ORDER BY id DESC LIMIT 1)
             WHERE kind = 'cancel_requested'",
        );
    });
    assert_eq!(report.after_cancel, 1, "{report:?}");
}

#[test]
fn a_timeout_of_an_execution_started_without_a_deadline_is_a_wrong_end() {
    let report = damaged(|_, conn| {
        let id = cancelled_runtime_execution(conn);
        conn.execute(
            "UPDATE executions SET error = '{\"cancelled\":\"timeout\"}' WHERE execution_id = ?1",
            [&id],
        )
        .unwrap();
    });
    assert_eq!(report.wrong_end, 1, "{report:?}");
}

/// A child of a start step, and the start step of a sibling, as `(child, parent, seq)`.
fn two_children(conn: &Connection) -> [(String, String, i64); 2] {
    let mut statement = conn
        .prepare(
            "SELECT execution_id, parent_execution_id, parent_seq FROM runtime_executions
             WHERE parent_execution_id IN (SELECT parent_execution_id FROM runtime_executions
                                           GROUP BY parent_execution_id HAVING count(*) >= 2)
             ORDER BY parent_execution_id, parent_seq LIMIT 2",
        )
        .unwrap();
    let rows: Vec<(String, String, i64)> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    [rows[0].clone(), rows[1].clone()]
}

#[test]
fn two_children_of_one_start_step_are_child_dups() {
    let report = damaged(|_, conn| {
        let [(_, parent, seq), (second, ..)] = two_children(conn);
        // The second child now claims the first one's start step, which has two.
        change_one(
            conn,
            &format!(
                "UPDATE runtime_executions SET parent_seq = {seq}
                 WHERE execution_id = '{second}' AND parent_execution_id = '{parent}'"
            ),
        );
    });
    assert!(report.child_dups >= 2, "{report:?}");
}

#[test]
fn a_flipped_patch_answer_is_a_patch_flip() {
    let report = damaged(|_, conn| {
        change_one(
            conn,
            "UPDATE runtime_patches SET answer = 1 - answer
             WHERE execution_id = (SELECT execution_id FROM runtime_patches
                                   WHERE patch_id = 'p1' LIMIT 1)",
        );
    });
    assert!(report.patch_flips >= 1, "{report:?}");
}

#[test]
fn a_run_told_another_patch_answer_is_a_patch_flip() {
    let report = damaged(|dir, conn| {
        let (id, answer): (String, bool) = conn
            .query_row(
                "SELECT execution_id, answer FROM runtime_patches WHERE patch_id = 'p1' LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        let acks = dir.join(durably_tests::torture::ledger::ACKS_DIR);
        let log = RecordFile::open(&acks.join("damage.log")).unwrap();
        let told = if answer { "false" } else { "true" };
        log.append(&["P", &id, told, "1", "0"]).unwrap();
    });
    assert_eq!(report.patch_flips, 1, "{report:?}");
}

/// Whether ledger record `record` is the effect of a parallel guarded member under `policy`
/// (its value is `v<index>-<seq>.<member>`).
fn parallel_member(record: &[String], policy: &str) -> bool {
    record[4] == "guarded" && record[5] == policy && record[8].contains('.')
}

#[test]
fn a_parallel_steps_effect_appended_twice_is_duplicated() {
    let report = damaged(|dir, _| {
        let line = ledger::read(&dir.join(LEDGER_FILE))
            .unwrap()
            .into_iter()
            .find(|record| parallel_member(record, "skip"))
            .unwrap();
        let fields: Vec<&str> = line.iter().map(String::as_str).collect();
        RecordFile::open(&dir.join(LEDGER_FILE))
            .unwrap()
            .append(&fields)
            .unwrap();
    });
    assert!(report.duplicated >= 1, "{report:?}");
}

#[test]
fn a_parallel_steps_missing_effect_is_lost() {
    let report = damaged(|dir, _| {
        let path = dir.join(LEDGER_FILE);
        let mut records = ledger::read(&path).unwrap();
        let at = records
            .iter()
            .position(|record| parallel_member(record, "reconcile"))
            .unwrap();
        let key = records[at][3].clone();
        records.retain(|record| record[3] != key);
        std::fs::remove_file(&path).unwrap();
        let file = RecordFile::open(&path).unwrap();
        for record in &records {
            let fields: Vec<&str> = record.iter().map(String::as_str).collect();
            file.append(&fields).unwrap();
        }
    });
    assert!(report.lost >= 1, "{report:?}");
}

#[test]
fn an_effect_of_a_forks_copied_step_is_a_fork_rerun() {
    let report = damaged(|dir, conn| {
        let (fork, original, fork_seq): (String, String, i64) = conn
            .query_row(
                "SELECT r.execution_id, r.forked_from, r.fork_seq FROM runtime_executions r
                   JOIN executions e ON e.execution_id = r.forked_from
                 WHERE e.kind = 'torture' LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .unwrap();
        let mut copied = ledger::read(&dir.join(LEDGER_FILE))
            .unwrap()
            .into_iter()
            .find(|record| record[1] == original && record[2].parse::<i64>().unwrap() < fork_seq)
            .unwrap();
        // The fork's run made the copied step's effect again.
        copied[1] = fork;
        let fields: Vec<&str> = copied.iter().map(String::as_str).collect();
        RecordFile::open(&dir.join(LEDGER_FILE))
            .unwrap()
            .append(&fields)
            .unwrap();
    });
    assert!(report.fork_reruns >= 1, "{report:?}");
}

#[test]
fn an_old_runs_repeatable_effect_past_a_patch_answered_true_is_superseded_and_a_guarded_one_is_not()
{
    let dir = clean_run();
    let conn = Connection::open(dir.path().join(DATABASE_FILE)).unwrap();
    let (execution, marker): (String, i64) = conn
        .query_row(
            "SELECT execution_id, seq FROM steps WHERE name = 'durably:patch/p1' LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("the clean run has an execution that took the patched branch");
    drop(conn);
    // Where old code, which has no marker step, ran the step after the patch point.
    let seq = (marker + 1).to_string();
    let ledger = RecordFile::open(&dir.path().join(LEDGER_FILE)).unwrap();
    let pure_key = "00000000-0000-8000-8000-0000000000a1";
    ledger
        .append(&[
            "E", &execution, &seq, pure_key, "pure", "-", "1", "1", "x", "-",
        ])
        .unwrap();
    let report = check(dir.path()).unwrap();
    assert!(report.passed(), "{report:?}");

    let guarded_key = "00000000-0000-8000-8000-0000000000a2";
    ledger
        .append(&[
            "E",
            &execution,
            &seq,
            guarded_key,
            "guarded",
            "retry",
            "1",
            "1",
            "x",
            "1",
        ])
        .unwrap();
    let report = check(dir.path()).unwrap();
    assert_eq!(report.unexpected, 1, "{report:?}");
}
