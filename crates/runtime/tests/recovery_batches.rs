//! Recovery in batches (plan §4.3): a runtime recovers any number of interrupted executions a
//! page of 512 at a time, moves only its own kinds' executions started through the runtime
//! (hand-driven ones of the same kind and other kinds are left alone, the latter reported),
//! and a crash between two batches leaves the journal consistent: each execution is either
//! requeued with its failed run counted, or untouched, and the next runtime finishes the job
//! counting no run twice.
//!
//! Method: 1,200 interrupted executions (what the sweep leaves of a crashed runtime's runs:
//! the execution row, its `runtime_executions` row and its released lock) are written by SQL
//! in one transaction, three pages' worth, with hand-driven executions and executions of an
//! unknown kind mixed in. The crash is real: this test binary runs again as a child process
//! with the `runtime::after-recovery-batch` failpoint set, which aborts it once the first
//! batch has committed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::Journal;
use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
use support::Scratch;
use uuid::Uuid;

/// Interrupted executions in the fixture: more than two pages of 512.
const INTERRUPTED: usize = 1_200;
const _: () = assert!(INTERRUPTED > 2 * PAGE_ROWS, "the fixture spans three pages");

/// The rows of one recovery page, as the runtime reads them.
const PAGE_ROWS: usize = 512;

/// Set in the crash test's child process to the journal's target.
const CHILD_ENV: &str = "DURABLY_RUNTIME_RECOVERY_CHILD";

async fn approve(_context: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    Ok("approved".to_owned())
}

/// Who an interrupted execution of the fixture belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Started through the runtime, of the kind the runtimes here serve.
    Served,
    /// Of the served kind, but driven by hand: no `runtime_executions` row.
    Hand,
    /// Started through the runtime, of a kind no runtime here serves.
    Unknown,
}

/// The owner of the fixture's `index`-th execution, in creation order.
fn owner(index: usize) -> Owner {
    match index % 100 {
        7 => Owner::Hand,
        13 => Owner::Unknown,
        _ => Owner::Served,
    }
}

/// Writes the fixture and returns the ids with their owners, in creation order.
async fn interrupted_fixture(journal: &Journal) -> Vec<(Uuid, Owner)> {
    let _tables = durably_runtime::Client::new(journal.clone()).await.unwrap();
    let fixture: Vec<(Uuid, Owner)> = (0..INTERRUPTED)
        .map(|index| (durably_journal::new_execution_id(), owner(index)))
        .collect();
    let rows = fixture.clone();
    journal
        .write(move |conn| {
            let at = "2026-12-01T10:00:00.000Z";
            for (id, owner) in rows {
                let (id, kind) = (
                    id.to_string(),
                    if owner == Owner::Unknown {
                        "refund"
                    } else {
                        "approval"
                    },
                );
                conn.execute(
                    "INSERT INTO executions (execution_id, kind, name, status, input, opens,
                                             created_at, updated_at)
                     VALUES (?1, ?2, ?2, 'interrupted', 'null', 1, ?3, ?3)",
                    durably_db::params![id, kind, at],
                )?;
                conn.execute(
                    "INSERT INTO locks (resource, epoch, released_at) VALUES (?1, 1, ?2)",
                    durably_db::params![id, at],
                )?;
                if owner != Owner::Hand {
                    conn.execute(
                        "INSERT INTO runtime_executions (execution_id, version) VALUES (?1, 1)",
                        [&id],
                    )?;
                }
            }
            Ok(())
        })
        .await
        .unwrap();
    fixture
}

/// A scratch journal with the fixture; `None` in the crash test's child process, whose only
/// work is the child test.
async fn scratch_with_fixture() -> Option<(Scratch, Vec<(Uuid, Owner)>)> {
    if std::env::var(CHILD_ENV).is_ok() {
        return None;
    }
    let scratch = Scratch::new();
    let fixture = interrupted_fixture(&scratch.journal).await;
    Some((scratch, fixture))
}

/// How many of the fixture's executions belong to `owner`.
fn count(fixture: &[(Uuid, Owner)], owner: Owner) -> usize {
    fixture.iter().filter(|(_, o)| *o == owner).count()
}

/// (status, resume_failures) of execution `id`; failures are `None` for a hand-driven one.
fn state(journal: &Journal, id: Uuid) -> (String, Option<i64>) {
    journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT e.status, r.resume_failures FROM executions AS e
                 LEFT JOIN runtime_executions AS r USING (execution_id)
                 WHERE e.execution_id = ?1",
                [id.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .unwrap()
}

/// Starts a runtime serving `approval`, checks what its recovery reports, and waits for every
/// served execution to end; then checks that each one's failed run was counted exactly once
/// and that the others were not touched.
async fn recover_the_rest(journal: &Journal, fixture: &[(Uuid, Owner)], requeued: usize) {
    let runtime = Runtime::builder(journal.clone())
        .register("approval", 1, approve)
        .start()
        .await
        .unwrap();
    let report = runtime.recovery_report();
    assert_eq!(report.requeued, requeued, "{report:?}");
    assert_eq!(report.stuck, 0, "{report:?}");
    let unknown = count(fixture, Owner::Unknown);
    assert_eq!(report.unknown_kinds, [("refund".to_owned(), unknown)]);
    for (id, owner) in fixture {
        match owner {
            Owner::Served => {
                let output = runtime.handle::<String>(*id).result().await.unwrap();
                assert_eq!(output, "approved");
                assert_eq!(state(journal, *id), ("completed".to_owned(), Some(1)));
            }
            Owner::Hand => assert_eq!(state(journal, *id), ("interrupted".to_owned(), None)),
            Owner::Unknown => {
                assert_eq!(state(journal, *id), ("interrupted".to_owned(), Some(0)));
            }
        }
    }
    runtime.shutdown();
}

/// A runtime recovers three pages of interrupted executions: every served one runs to its
/// end, the hand-driven ones and the unknown kind's are left interrupted, and the unknown
/// kind is reported with its count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_recovers_more_than_one_page() {
    let Some((scratch, fixture)) = scratch_with_fixture().await else {
        return;
    };
    recover_the_rest(&scratch.journal, &fixture, count(&fixture, Owner::Served)).await;
}

#[cfg(feature = "failpoints")]
mod crash {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    use super::*;

    /// The signal `abort()` raises.
    const SIGABRT: i32 = 6;

    /// The child: starts a runtime, whose recovery aborts after its first batch commits.
    #[tokio::test]
    async fn crash_child() {
        let Ok(path) = std::env::var(CHILD_ENV) else {
            return;
        };
        fail::cfg("runtime::after-recovery-batch", "return").unwrap();
        let journal = Journal::open(path).unwrap();
        let started = Runtime::builder(journal)
            .register("approval", 1, approve)
            .start()
            .await;
        panic!("the failpoint did not abort the recovery: {started:?}");
    }

    /// A crash after the first batch: that batch's executions are requeued with one failed
    /// run counted, every other one is untouched; a new runtime recovers the rest and
    /// counts no run twice, and the file is intact.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crash_between_batches_leaves_a_consistent_journal() {
        let Some((scratch, fixture)) = scratch_with_fixture().await else {
            return;
        };
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash::crash_child", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_ENV, scratch.db.target())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(SIGABRT), "{status}");

        let mut first_batch = 0;
        for (index, (id, owner)) in fixture.iter().enumerate() {
            let expected = match owner {
                Owner::Served if index < PAGE_ROWS => ("queued".to_owned(), Some(1)),
                Owner::Served | Owner::Unknown => ("interrupted".to_owned(), Some(0)),
                Owner::Hand => ("interrupted".to_owned(), None),
            };
            first_batch += usize::from(expected.0 == "queued");
            assert_eq!(state(&scratch.journal, *id), expected, "execution {index}");
        }
        let rest = count(&fixture, Owner::Served) - first_batch;
        recover_the_rest(&scratch.journal, &fixture, rest).await;
        scratch.db.assert_sqlite_integrity();
    }
}
