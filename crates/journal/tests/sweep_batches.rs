//! The crash-orphan sweep after a process that held thousands of executions died: it reclaims
//! them in transactions of at most `SWEEP_BATCH_LOCKS_MAX` locks, judges the dead process once
//! per pass and once per batch (not once per lock), writes one `orphan_reclaimed` event per
//! lock, and leaves a live holder's lock alone.
//!
//! Method: 10,000 running executions and their lock rows, held by a process the injected
//! process table reports gone, are written by SQL; one more lock is held by this very journal.
//! The sweep's commits are counted by the writer's statistics, its judgements by the process
//! table's lookups of the dead pid (on SQLite: on PostgreSQL a holder is judged by its
//! instance's advisory key, not by the process table).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use durably_journal::{Journal, SWEEP_BATCH_LOCKS_MAX, Status};
use durably_lock::{ProcFs, ProcessIdentity, ProcessStat, ProcessTable};
use support::{Scratch, start};

const DEAD_PID: i64 = 4_000_000;
const ORPHANS: u64 = 10_000;

/// The real process table, except that `DEAD_PID` does not exist; its lookups are counted.
#[derive(Debug, Default)]
struct CountingTable {
    real: ProcFs,
    dead_lookups: AtomicU64,
}

impl ProcessTable for CountingTable {
    fn own_identity(&self) -> durably_lock::Result<ProcessIdentity> {
        self.real.own_identity()
    }

    fn stat(&self, pid: i64) -> durably_lock::Result<Option<ProcessStat>> {
        if pid == DEAD_PID {
            self.dead_lookups.fetch_add(1, Ordering::SeqCst);
            return Ok(None);
        }
        self.real.stat(pid)
    }
}

/// How many orphans one write request inserts: on PostgreSQL each row is a round trip, and a
/// request must be acknowledged within the writer's timeout, on a loaded machine too.
const ORPHANS_PER_WRITE: u64 = 500;

/// Writes `ORPHANS` running executions whose locks a dead process of this host holds.
async fn write_orphans(journal: &Journal, own: ProcessIdentity) {
    let instance = uuid::Uuid::new_v4().to_string();
    for _ in 0..ORPHANS / ORPHANS_PER_WRITE {
        write_orphan_batch(journal, own.clone(), instance.clone()).await;
    }
}

/// Writes `ORPHANS_PER_WRITE` of the orphans, held by `instance`, in one write request.
async fn write_orphan_batch(journal: &Journal, own: ProcessIdentity, instance: String) {
    journal
        .write(move |conn| {
            let at = "2026-12-01T10:00:00.000Z";
            for _ in 0..ORPHANS_PER_WRITE {
                let id = durably_journal::new_execution_id().to_string();
                conn.execute(
                    "INSERT INTO executions (execution_id, kind, name, status, input, created_at,
                                             updated_at)
                     VALUES (?1, 'orphan', 'orphan', 'running', '{}', ?2, ?2)",
                    durably_journal::durably_db::params![id, at],
                )?;
                conn.execute(
                    "INSERT INTO locks (resource, epoch, instance_id, pid, start_time, boot_id,
                                        pid_ns, hostname, acquired_at, heartbeat_at)
                     VALUES (?1, 1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?7)",
                    durably_journal::durably_db::params![
                        id,
                        instance,
                        DEAD_PID,
                        own.boot_id,
                        own.pid_ns,
                        own.hostname,
                        at
                    ],
                )?;
            }
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn ten_thousand_dead_locks_take_one_judgement_and_a_transaction_per_batch() {
    let scratch = Scratch::new();
    let table = Arc::new(CountingTable::default());
    let journal = scratch
        .builder()
        .process_table(Arc::clone(&table) as Arc<dyn ProcessTable>)
        .sweep_on_open(false)
        .open()
        .unwrap();
    let live = start(&journal, durably_journal::new_execution_id()).await;
    write_orphans(&journal, table.real.own_identity().unwrap()).await;

    let commits_before = journal.writer_stats().commits;
    let report = journal.operator().sweep(false).await.unwrap();
    let commits = journal.writer_stats().commits - commits_before;

    let batches = ORPHANS.div_ceil(SWEEP_BATCH_LOCKS_MAX as u64);
    assert_eq!(report.reclaimed.len() as u64, ORPHANS);
    assert_eq!(
        commits,
        batches + 1,
        "one commit per batch, and one for the running executions with no holder"
    );
    // Only a SQLite holder is judged by the process table; a PostgreSQL holder is judged by
    // its instance's advisory key, from one read of the held keys per pass (the pass's judge),
    // which the test cannot count from outside.
    scratch.sqlite_only("the process table's lookups of the dead pid", |_| {
        assert_eq!(
            table.dead_lookups.load(Ordering::SeqCst),
            1 + batches,
            "the dead process is judged once for the listing and once under each batch's lock"
        );
    });
    let (interrupted, reclaimed_events, held) = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT (SELECT count(*) FROM executions WHERE status = 'interrupted'),
                        (SELECT count(*) FROM events WHERE kind = 'orphan_reclaimed'),
                        (SELECT count(*) FROM locks WHERE instance_id IS NOT NULL)",
                [],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                },
            )?)
        })
        .unwrap();
    assert_eq!(
        (interrupted, reclaimed_events),
        (ORPHANS as i64, ORPHANS as i64)
    );
    assert_eq!(held, 1, "the live holder keeps its lock");
    assert_eq!(
        journal.get(live.id()).unwrap().unwrap().status,
        Status::Running
    );

    let again = journal.operator().sweep(false).await.unwrap();
    assert!(again.reclaimed.is_empty() && again.unlocked.is_empty());
}
