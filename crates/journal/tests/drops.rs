//! Guarantee: dropping execution handles is bounded and loses no release. Ten thousand handles
//! dropped while another connection holds the database's write lock start no thread per drop
//! (the process's thread count stays where it was), and once the lock is free every one of
//! their locks is released and the writer reports no failed commit.
//!
//! Method: one test alone in this binary, so the thread count (the entries of
//! `/proc/self/task`) is this test's. It opens 10,000 executions, takes SQLite's write lock on a
//! plain connection with `BEGIN IMMEDIATE`, and drops every handle; the writer is then stuck in
//! its first batch and every other release must queue behind it. The thread count is read
//! before and after the drops (a drop queues its release, or starts a thread, before it returns). Then the
//! blocker commits, and a write queued after the releases returns only once they have
//! committed (the writer's queue is first in, first out); the `locks` table must then have no
//! holder left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{Execution, Journal, Opened, rusqlite};
use support::Scratch;
use uuid::Uuid;

/// How many handles are dropped at once.
const HANDLES: usize = 10_000;

/// How many threads the drops may add: none are needed, a few are allowed for the runtime.
const THREADS_ADDED_MAX: usize = 4;

/// Long enough that the writer waits for the blocker instead of failing its batch with `Busy`.
const BUSY_TIMEOUT_MS: u64 = 120_000;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

async fn open_all(journal: &Journal) -> Vec<Execution> {
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..HANDLES {
        let journal = journal.clone();
        opening.spawn(async move {
            match journal
                .open_execution(Uuid::new_v4(), "drops", "dropped", &"input")
                .await
                .unwrap()
            {
                Opened::Running(execution) => execution,
                Opened::Finished(finished) => panic!("a new execution finished: {finished:?}"),
            }
        });
    }
    opening.join_all().await
}

#[tokio::test(flavor = "current_thread")]
async fn ten_thousand_drops_under_a_held_write_lock_are_bounded_and_all_released() {
    let scratch = Scratch::new();
    let journal = Journal::builder(scratch.path())
        .busy_timeout_ms(BUSY_TIMEOUT_MS)
        .ack_timeout(Duration::from_millis(BUSY_TIMEOUT_MS * 2))
        .open()
        .unwrap();
    let executions = open_all(&journal).await;
    let before = journal.writer_stats();

    let blocker = rusqlite::Connection::open(scratch.path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let threads_before = threads();
    drop(executions);
    let threads_after = threads();
    assert!(
        threads_after <= threads_before + THREADS_ADDED_MAX,
        "dropping {HANDLES} handles took the process from {threads_before} to {threads_after} \
         threads"
    );

    blocker.execute_batch("COMMIT").unwrap();
    // First in, first out: this returns once every release queued before it has committed.
    journal.write(|_| Ok(())).await.unwrap();
    let (held, rows): (i64, i64) = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FILTER (WHERE instance_id IS NOT NULL), count(*) FROM locks",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .unwrap();
    assert_eq!(
        (held, rows),
        (0, HANDLES as i64),
        "locks still held after the drops"
    );
    let after = journal.writer_stats();
    assert_eq!(after.commits_failed, before.commits_failed, "{after:?}");
    assert_eq!(
        after.requests - before.requests,
        HANDLES as u64 + 1,
        "{after:?}"
    );
}
