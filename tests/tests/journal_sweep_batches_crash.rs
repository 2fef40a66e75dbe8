//! A crash between two batches of the crash-orphan sweep leaves every batch either reclaimed
//! whole or untouched, and the next open's sweep finishes the job: each dead lock is reclaimed
//! exactly once (one `orphan_reclaimed` event), and no lock stays held.
//!
//! Method: 600 running executions whose locks a process that has exited held (a reaped child's
//! pid, on this boot and host) are written by SQL; `journal_worker open` opens the file with
//! `journal::sweep-between-reclaims` set to abort after the second batch's commit; the file is
//! then read, and opened again without failpoints.
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use durably_journal::{Journal, SWEEP_BATCH_LOCKS_MAX};
use durably_lock::{ProcFs, ProcessTable};
use rusqlite::{Connection, params};
use support::Scratch;

const ORPHANS: i64 = 600;

/// (interrupted executions, `orphan_reclaimed` events, held locks).
fn counts(conn: &Connection) -> (i64, i64, i64) {
    conn.query_row(
        "SELECT (SELECT count(*) FROM executions WHERE status = 'interrupted'),
                (SELECT count(*) FROM events WHERE kind = 'orphan_reclaimed'),
                (SELECT count(*) FROM locks WHERE instance_id IS NOT NULL)",
        [],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )
    .unwrap()
}

#[test]
fn a_crash_between_sweep_batches_loses_no_reclaim_and_repeats_none() {
    let scratch = Scratch::new();
    drop(Journal::open(&scratch.database).unwrap());
    let mut exited = Command::new("true").spawn().unwrap();
    let dead_pid = i64::from(exited.id());
    exited.wait().unwrap();
    let own = ProcFs::default().own_identity().unwrap();
    {
        let mut conn = Connection::open(&scratch.database).unwrap();
        let transaction = conn.transaction().unwrap();
        let instance = uuid::Uuid::new_v4().to_string();
        let at = "2026-12-01T10:00:00.000Z";
        for _ in 0..ORPHANS {
            let id = durably_journal::new_execution_id().to_string();
            transaction
                .execute(
                    "INSERT INTO executions (execution_id, kind, name, status, input,
                                             created_at, updated_at)
                     VALUES (?1, 'orphan', 'orphan', 'running', '{}', ?2, ?2)",
                    params![id, at],
                )
                .unwrap();
            transaction
                .execute(
                    "INSERT INTO locks (resource, epoch, instance_id, pid, start_time, boot_id,
                                        pid_ns, hostname, acquired_at, heartbeat_at)
                     VALUES (?1, 1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?7)",
                    params![
                        id,
                        instance,
                        dead_pid,
                        own.boot_id,
                        own.pid_ns,
                        own.hostname,
                        at
                    ],
                )
                .unwrap();
        }
        transaction.commit().unwrap();
    }

    let status = Command::new(env!("CARGO_BIN_EXE_journal_worker"))
        .arg("open")
        .arg(&scratch.database)
        .env(
            "FAILPOINTS",
            "journal::sweep-between-reclaims=1*off->return",
        )
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status}");
    let two_batches = 2 * SWEEP_BATCH_LOCKS_MAX as i64;
    let conn = Connection::open(&scratch.database).unwrap();
    assert_eq!(
        counts(&conn),
        (two_batches, two_batches, ORPHANS - two_batches),
        "two whole batches reclaimed, the rest untouched"
    );

    drop(Journal::open(&scratch.database).unwrap());
    assert_eq!(counts(&conn), (ORPHANS, ORPHANS, 0));
    assert_eq!(support::integrity(&scratch.database), "ok");
}
