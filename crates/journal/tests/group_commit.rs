//! Group commit: concurrent callers share commits without losing or mixing up a request, and a
//! request that fails inside a batch fails alone while its batch neighbours commit.
//!
//! Method: 64 executions driven by tokio tasks on a multi-thread runtime write steps at once;
//! every acknowledged step is then read back, and the writer's counters must show far fewer
//! commits than requests. For the failing request, the writer is held inside a gate request
//! while good and bad requests queue behind it, so they are known to share the next batch
//! (each request also records the commit count it ran under, which names its batch).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use durably_journal::{Durability, Error, Journal, durably_db, rusqlite};
use support::{Scratch, pure_steps, start};
use uuid::Uuid;

const EXECUTIONS: usize = 64;
const STEPS_PER_EXECUTION: u32 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn sixty_four_concurrent_executions_share_commits_and_lose_nothing() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let before = journal.writer_stats();
    let mut tasks = Vec::new();
    for task in 0..EXECUTIONS {
        let journal = journal.clone();
        tasks.push(tokio::spawn(async move {
            let id = Uuid::new_v4();
            let execution = start(&journal, id).await;
            for seq in 0..STEPS_PER_EXECUTION {
                let value = format!("task {task} step {seq}");
                let returned: String = execution
                    .pure(&format!("step {seq}"), || {
                        let value = value.clone();
                        async move { Ok(value) }
                    })
                    .await
                    .unwrap();
                assert_eq!(returned, value);
            }
            execution.complete(&task).await.unwrap();
            (task, id)
        }));
    }
    let mut finished = Vec::new();
    for task in tasks {
        finished.push(task.await.unwrap());
    }
    let after = journal.writer_stats();

    for (task, id) in &finished {
        let steps = journal.steps(*id).unwrap();
        assert_eq!(
            steps.len(),
            STEPS_PER_EXECUTION as usize,
            "execution of task {task}"
        );
        for (seq, step) in steps.iter().enumerate() {
            assert_eq!(step.seq as usize, seq);
            assert_eq!(step.state, durably_journal::StepState::Completed);
            let expected = serde_json::to_string(&format!("task {task} step {seq}")).unwrap();
            assert_eq!(
                step.result.as_ref().map(durably_journal::Payload::as_json),
                Some(expected.as_str())
            );
        }
        let record = journal.get(*id).unwrap().unwrap();
        assert_eq!(record.status, durably_journal::Status::Completed);
        assert_eq!(
            record
                .output
                .as_ref()
                .map(durably_journal::Payload::as_json),
            Some(task.to_string().as_str())
        );
    }

    // One open, the steps and one finalize per execution, every one acknowledged.
    let requests = after.requests - before.requests;
    let commits = after.commits - before.commits;
    let expected_requests = (EXECUTIONS * (STEPS_PER_EXECUTION as usize + 2)) as u64;
    assert_eq!(requests, expected_requests);
    assert_eq!(after.requests_failed, before.requests_failed);
    assert_eq!(after.commits_failed, before.commits_failed);
    let syncs = after.syncs - before.syncs;
    eprintln!("{requests} requests in {commits} commits, {syncs} WAL syncs");
    assert!(
        commits * 4 <= requests,
        "{commits} commits for {requests} requests: concurrent callers did not share commits"
    );
    assert!(
        (1..=commits).contains(&syncs),
        "{syncs} WAL syncs for {commits} commits"
    );
    drop(journal);
    scratch.assert_sqlite_integrity();
}

/// Under `Durability::Full` the writer syncs the WAL itself before it acknowledges (SQLite's
/// COMMIT then skips its own fsync), never more often than it commits; under `ProcessCrash`
/// nothing is synced at all.
#[tokio::test(flavor = "current_thread")]
async fn only_full_durability_syncs_the_wal_and_never_more_than_once_a_commit() {
    for durability in [Durability::Full, Durability::ProcessCrash] {
        let scratch = Scratch::new();
        let journal = Journal::builder(scratch.path())
            .durability(durability)
            .open()
            .unwrap();
        let mut execution = start(&journal, Uuid::new_v4()).await;
        pure_steps(&mut execution, 0..3).await;
        execution.complete(&()).await.unwrap();
        let stats = journal.writer_stats();
        match durability {
            Durability::Full => assert!(
                (1..=stats.commits).contains(&stats.syncs),
                "{durability:?}: {stats:?}"
            ),
            Durability::ProcessCrash => assert_eq!(stats.syncs, 0, "{stats:?}"),
        }
    }
}

/// Holds the writer inside one request until released, so that requests submitted meanwhile
/// all queue for the same next batch.
struct Gate {
    entered: std::sync::mpsc::Receiver<()>,
    release: std::sync::mpsc::Sender<()>,
    held: tokio::task::JoinHandle<()>,
}

impl Gate {
    async fn close(journal: &Journal) -> Self {
        let (entered_sender, entered) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let journal = journal.clone();
        let held = tokio::spawn(async move {
            journal
                .write(move |_| {
                    entered_sender.send(()).unwrap();
                    released.recv().unwrap();
                    Ok(())
                })
                .await
                .unwrap();
        });
        let gate = Self {
            entered,
            release,
            held,
        };
        // Yield to the runtime until the writer thread is inside the gate request.
        while gate.entered.try_recv().is_err() {
            tokio::task::yield_now().await;
        }
        gate
    }

    async fn open(self) {
        self.release.send(()).unwrap();
        self.held.await.unwrap();
    }
}

/// The batch a request ran in: every request of one batch sees the same commit counts.
fn batch_of(journal: &Journal) -> u64 {
    let stats = journal.writer_stats();
    stats.commits + stats.commits_failed
}

// A current-thread runtime makes the queueing deterministic: a task's first poll runs until its
// request is in the writer's queue (the queue has room, so submitting never waits), and the
// main task only runs again once every spawned task has been polled.
#[tokio::test(flavor = "current_thread")]
async fn a_failing_request_fails_alone_and_its_batch_neighbours_commit() {
    const GOOD: usize = 8;
    let scratch = Scratch::new();
    let journal = scratch.open();
    let victim = Uuid::new_v4();
    start(&journal, victim)
        .await
        .complete(&"done")
        .await
        .unwrap();
    let mut executions = Vec::new();
    for _ in 0..GOOD {
        let id = Uuid::new_v4();
        executions.push((id, start(&journal, id).await));
    }

    let gate = Gate::close(&journal).await;
    let before = journal.writer_stats();
    let submitted = Arc::new(AtomicUsize::new(0));
    let mut good = Vec::new();
    for (id, execution) in executions {
        let submitted = Arc::clone(&submitted);
        good.push(tokio::spawn(async move {
            submitted.fetch_add(1, Ordering::SeqCst);
            let value: String = execution
                .pure("good", || async move { Ok(format!("good {id}")) })
                .await
                .unwrap();
            assert_eq!(value, format!("good {id}"));
            (id, execution)
        }));
    }
    // A good raw request that notes its batch, to compare with the failing one's.
    let neighbour = {
        let (journal, submitted) = (journal.clone(), Arc::clone(&submitted));
        tokio::spawn(async move {
            submitted.fetch_add(1, Ordering::SeqCst);
            let batch_journal = journal.clone();
            journal
                .write(move |conn| {
                    conn.execute(
                        "INSERT INTO events (at, kind, detail) VALUES ('now', 'neighbour', '{}')",
                        [],
                    )?;
                    Ok(batch_of(&batch_journal))
                })
                .await
                .unwrap()
        })
    };
    // A duplicate primary key: the request's own statement fails inside its savepoint.
    let duplicate_batch = Arc::new(AtomicU64::new(u64::MAX));
    let duplicate = {
        let (journal, submitted) = (journal.clone(), Arc::clone(&submitted));
        let noted = Arc::clone(&duplicate_batch);
        tokio::spawn(async move {
            submitted.fetch_add(1, Ordering::SeqCst);
            let batch_journal = journal.clone();
            journal
                .write(move |conn| {
                    noted.store(batch_of(&batch_journal), Ordering::SeqCst);
                    conn.execute(
                        "INSERT INTO events (at, kind, detail) VALUES ('now', 'marker', '{}')",
                        [],
                    )?;
                    conn.execute(
                        "INSERT INTO executions (execution_id, kind, name, status, input, opens,
                                                 created_at, updated_at)
                         VALUES (?1, 'k', 'n', 'running', '1', 1, 'now', 'now')",
                        [victim.to_string()],
                    )?;
                    Ok(())
                })
                .await
        })
    };
    // An oversized step is refused before it is submitted, so it cannot harm the batch either.
    let oversized = {
        let (journal, submitted) = (journal.clone(), Arc::clone(&submitted));
        tokio::spawn(async move {
            submitted.fetch_add(1, Ordering::SeqCst);
            let id = Uuid::new_v4();
            let execution = start(&journal, id).await;
            let big = "x".repeat(journal.payload_bytes_max() + 1);
            let error = execution
                .pure("too big", || {
                    let big = big.clone();
                    async move { Ok(big) }
                })
                .await
                .unwrap_err();
            // Handed back alive: dropping it here would queue its lock release, a third commit
            // racing the count below.
            (id, error, execution)
        })
    };
    // Every request must be in the writer's queue, not merely on its way, before the gate
    // opens: eight steps, the neighbour, the duplicate and the oversized task's open.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while submitted.load(Ordering::SeqCst) < GOOD + 3
        || journal.writer_stats().queued < (GOOD + 3) as u64
    {
        assert!(
            std::time::Instant::now() < deadline,
            "requests never queued"
        );
        tokio::task::yield_now().await;
    }
    gate.open().await;

    let mut good_executions = Vec::new();
    for task in good {
        good_executions.push(task.await.unwrap());
    }
    let neighbour_batch = neighbour.await.unwrap();
    let duplicate = duplicate.await.unwrap();
    assert!(
        matches!(
            &duplicate,
            Err(Error::Storage(durably_db::Error::Sqlite(rusqlite::Error::SqliteFailure(failure, _))))
                if failure.code == rusqlite::ErrorCode::ConstraintViolation
        ),
        "{duplicate:?}"
    );
    let (oversized_id, oversized_error, oversized_execution) = oversized.await.unwrap();
    assert!(
        matches!(oversized_error, Error::PayloadTooLarge { .. }),
        "{oversized_error:?}"
    );
    let after = journal.writer_stats();
    // Two commits: the gate's batch, then one batch holding every request queued behind it.
    assert_eq!(after.commits - before.commits, 2, "{before:?} -> {after:?}");
    drop(oversized_execution);
    assert_eq!(neighbour_batch, before.commits + before.commits_failed + 1);
    assert_eq!(
        duplicate_batch.load(Ordering::SeqCst),
        neighbour_batch,
        "not one batch"
    );
    for (id, execution) in good_executions {
        execution.complete(&"ok").await.unwrap();
        let steps = journal.steps(id).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(
            steps[0]
                .result
                .as_ref()
                .map(durably_journal::Payload::as_json),
            Some(format!("\"good {id}\"").as_str())
        );
    }
    let neighbours: i64 = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM events WHERE kind = 'neighbour'",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(neighbours, 1);

    // The duplicate's savepoint was rolled back: its first insert is gone too.
    let markers: i64 = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM events WHERE kind = 'marker'",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(
        markers, 0,
        "a failed request's earlier statements must roll back"
    );
    assert!(
        journal.steps(oversized_id).unwrap().is_empty(),
        "nothing of the oversized step"
    );
    assert_eq!(
        journal.get(victim).unwrap().unwrap().status,
        durably_journal::Status::Completed
    );
    // Exactly one request failed, in a commit that succeeded: no batch was lost for it.
    assert_eq!(after.requests_failed - before.requests_failed, 1);
    assert_eq!(after.commits_failed, before.commits_failed);
    drop(journal);
    scratch.assert_sqlite_integrity();
}

/// Submits a raw request that inserts a marker event, noting whether it was acknowledged.
fn marker_request(journal: &Journal, marker: &'static str) -> tokio::task::JoinHandle<bool> {
    let journal = journal.clone();
    tokio::spawn(async move {
        journal
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO events (at, kind, detail) VALUES ('now', ?1, '{}')",
                    [marker],
                )?;
                Ok(())
            })
            .await
            .is_ok()
    })
}

// When a statement fails with SQLITE_FULL and has no statement journal to undo just itself,
// SQLite rolls back the whole transaction. The requests after it in the batch must then not be
// committed one by one outside the batch and reported failed, nor reported committed when they
// were not: every acknowledgement must match what is in the file.
#[tokio::test(flavor = "current_thread")]
async fn a_full_disk_inside_a_batch_never_contradicts_an_acknowledgement() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    journal
        .write(|conn| Ok(conn.execute_batch("CREATE TABLE filler (blob BLOB)")?))
        .await
        .unwrap();

    let gate = Gate::close(&journal).await;
    let stats_before = journal.writer_stats();
    let before = marker_request(&journal, "before");
    let full = {
        let journal = journal.clone();
        tokio::spawn(async move {
            journal
                .write(|conn| {
                    let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
                    conn.execute_batch(&format!("PRAGMA max_page_count = {}", pages + 2))?;
                    conn.execute("INSERT INTO filler (blob) VALUES (zeroblob(1000000))", [])?;
                    Ok(())
                })
                .await
        })
    };
    let after = marker_request(&journal, "after");
    // One turn of the current-thread runtime polls each spawned task until its request is
    // queued behind the gate.
    tokio::task::yield_now().await;
    gate.open().await;
    let (before, full, after) = (
        before.await.unwrap(),
        full.await.unwrap(),
        after.await.unwrap(),
    );
    assert!(matches!(full, Err(Error::DiskFull)), "{full:?}");
    // The three shared one batch, and SQLite rolled all of it back.
    let stats_after = journal.writer_stats();
    assert_eq!(
        stats_after.commits,
        stats_before.commits + 1,
        "only the gate's batch committed"
    );
    assert_eq!(stats_after.commits_failed, stats_before.commits_failed + 1);
    journal
        .write(|conn| Ok(conn.execute_batch("PRAGMA max_page_count = 1073741823")?))
        .await
        .unwrap();

    for (marker, acknowledged) in [("before", before), ("after", after)] {
        let present: bool = journal
            .read(|conn| {
                Ok(conn.query_row(
                    "SELECT count(*) > 0 FROM events WHERE kind = ?1",
                    [marker],
                    |row| row.get(0),
                )?)
            })
            .unwrap();
        assert_eq!(
            present, acknowledged,
            "request {marker:?}: acknowledged {acknowledged} but present {present}"
        );
    }
    drop(journal);
    scratch.assert_sqlite_integrity();
}
