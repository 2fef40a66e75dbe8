//! Guarantee: each fault a journal meets in the field gives a typed error, loses nothing that
//! was acknowledged, and leaves a file that passes `PRAGMA integrity_check`: a full disk, a
//! read-only file, a garbage file, a foreign SQLite file, a schema from the future, a writer
//! held by another process past the busy timeout, an oversized payload (written or read back),
//! and the WAL file deleted while the journal is closed. Files that are not ours are left byte
//! for byte untouched, and no files appear beside them.
//!
//! Method: each test writes acknowledged steps first, provokes the fault through the public API
//! or by preparing the file, checks the error's variant, then checks the file: every
//! acknowledged step is there with its value, and `integrity_check` is ok. The faults are made
//! real, not simulated: the disk fills through `max_page_count` on the writer's connection until
//! a step is refused; the file is made read-only in process (`chattr +i` as root, whom
//! permission bits do not stop; permission bits otherwise) and, separately, for a
//! `journal_worker` child running as user `nobody`; the write lock is held by a
//! `journal_worker` child with `BEGIN IMMEDIATE`, and a guarded step then must not run its
//! effect. The WAL-deletion tests also pin what happens when the WAL of a journal that was
//! *not* closed cleanly is deleted: the commits that lived only in the WAL are gone, silently,
//! because SQLite cannot know they existed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use durably_journal::{
    Error, Execution, Journal, Opened, Policy, Resolution, SCHEMA_VERSION, StepError, StepRecord,
    rusqlite,
};
use support::journal::{Held, finish, worker, worker_as_nobody};
use support::{Scratch, directory_entries, integrity, is_root, runtime, sibling, spawn};
use uuid::Uuid;

/// Opens execution `id`, which must not be finished.
async fn start(journal: &Journal, id: Uuid) -> Execution {
    match journal
        .open_execution(id, "faults", "faults", &"input")
        .await
        .unwrap()
    {
        Opened::Running(execution) => execution,
        Opened::Finished(finished) => panic!("already finished: {finished:?}"),
    }
}

/// Waits until every write queued before it has committed (the writer is first in, first out),
/// so a release queued by dropping an execution is durable.
async fn barrier(journal: &Journal) {
    journal.write(|_| Ok(())).await.unwrap();
}

fn value(seq: u32) -> String {
    format!("acknowledged {seq}")
}

/// Runs `count` pure steps (from `first`) on `execution`; each returned, so each is acknowledged.
async fn acknowledge(execution: &mut Execution, first: u32, count: u32) {
    for seq in first..first + count {
        let returned: String = execution
            .pure(&format!("step {seq}"), || async move { Ok(value(seq)) })
            .await
            .unwrap();
        assert_eq!(returned, value(seq));
    }
}

/// Every one of the `count` acknowledged steps is present, in order, with its value.
fn assert_acknowledged(steps: &[StepRecord], count: u32) {
    assert!(
        steps.len() >= count as usize,
        "lost: {} of {count} steps",
        steps.len()
    );
    for (seq, step) in (0..count).zip(steps) {
        assert_eq!(
            (step.seq, step.name.as_str()),
            (seq, format!("step {seq}").as_str())
        );
        assert_eq!(step.state, durably_journal::StepState::Completed);
        let expected = serde_json::to_string(&value(seq)).unwrap();
        assert_eq!(
            step.result.as_ref().map(durably_journal::Payload::as_json),
            Some(expected.as_str()),
            "step {seq}"
        );
    }
}

/// A closed journal holding one execution with `count` acknowledged steps.
fn closed_journal_with_steps(path: &Path, count: u32) -> Uuid {
    let id = Uuid::new_v4();
    runtime().block_on(async {
        let journal = Journal::open(path).unwrap();
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, count).await;
        drop(execution);
        barrier(&journal).await;
    });
    id
}

/// How many step rows execution `id` has, read without the engine.
fn step_rows(path: &Path, id: Uuid) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row(
        "SELECT count(*) FROM steps WHERE execution_id = ?1",
        [id.to_string()],
        |row| row.get(0),
    )
    .unwrap()
}

/// Fills the disk with ever more steps until one is refused; every step that returned was
/// acknowledged, and exactly those are in the file afterwards, with their values. Then the
/// writer, given room again, carries on and the execution resumes from the last of them.
#[test]
fn a_full_disk_is_disk_full_and_loses_nothing_acknowledged() {
    let scratch = Scratch::new();
    runtime().block_on(async {
        let journal = Journal::open(&scratch.database).unwrap();
        let id = Uuid::new_v4();
        let execution = start(&journal, id).await;
        // max_page_count is a setting of one connection: set it on the writer's.
        journal
            .write(|conn| {
                let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
                conn.execute_batch(&format!("PRAGMA max_page_count = {}", pages + 40))?;
                Ok(())
            })
            .await
            .unwrap();
        let chunk = "z".repeat(12 * 1024);
        let mut acknowledged = 0_u32;
        let error = loop {
            assert!(acknowledged < 1_000, "the page cap never filled");
            let (name, value) = (
                format!("step {acknowledged}"),
                format!("{acknowledged}{chunk}"),
            );
            let step = execution.pure(&name, || {
                let value = value.clone();
                async move { Ok(value) }
            });
            match step.await {
                Ok(returned) => {
                    assert_eq!(returned, value);
                    acknowledged += 1;
                }
                Err(error) => break error,
            }
        };
        assert!(matches!(error, Error::DiskFull), "{error:?}");
        assert!(
            acknowledged > 0,
            "the cap left no room for the acknowledged steps"
        );
        // The writer carries on after a full disk: writes that fit still commit.
        journal
            .write(|conn| Ok(conn.execute_batch("PRAGMA max_page_count = 1073741823")?))
            .await
            .unwrap();
        drop(execution);
        barrier(&journal).await;
        let steps = journal.steps(id).unwrap();
        assert_eq!(
            steps.len(),
            acknowledged as usize,
            "lost or extra steps after a full disk"
        );
        for (seq, step) in steps.iter().enumerate() {
            let expected = serde_json::to_string(&format!("{seq}{chunk}")).unwrap();
            assert_eq!(
                step.result.as_ref().map(durably_journal::Payload::as_json),
                Some(expected.as_str()),
                "step {seq}"
            );
        }
        // And the execution resumes from there: the recorded steps replay, a new one runs.
        let execution = start(&journal, id).await;
        for seq in 0..acknowledged {
            let replayed: String = execution
                .pure(&format!("step {seq}"), || async { Ok(String::new()) })
                .await
                .unwrap();
            assert_eq!(replayed, format!("{seq}{chunk}"));
        }
        let _: String = execution
            .pure("after", || async { Ok("room again".to_owned()) })
            .await
            .unwrap();
        execution.complete(&"done").await.unwrap();
    });
    assert_eq!(integrity(&scratch.database), "ok");
}

/// Undoes `chattr +i` when dropped, so a failing test does not leave undeletable files.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    /// `None` when `chattr` is not available or not permitted here.
    fn set(paths: &[&Path]) -> Option<Self> {
        let mut set = Self(Vec::new());
        for path in paths {
            let status = Command::new("chattr").arg("+i").arg(path).status().ok()?;
            if !status.success() {
                return None;
            }
            set.0.push(path.to_path_buf());
        }
        Some(set)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(path).status();
        }
    }
}

/// Makes `paths` read-only for this process: `chattr +i` as root (root ignores permission
/// bits), permission bits otherwise. `None` when that is impossible here.
fn make_read_only(paths: &[&Path]) -> Option<Immutable> {
    if is_root() {
        return Immutable::set(paths);
    }
    for path in paths {
        let mode = if path.is_dir() { 0o500 } else { 0o400 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).ok()?;
    }
    Some(Immutable(Vec::new()))
}

fn make_writable(paths: &[&Path]) {
    if !is_root() {
        for path in paths {
            let mode = if path.is_dir() { 0o700 } else { 0o600 };
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
}

/// In this process: the file alone read-only, then its directory too (so SQLite cannot even
/// create the WAL beside it).
#[test]
fn a_read_only_file_is_read_only_and_loses_nothing() {
    for directory_too in [false, true] {
        let scratch = Scratch::new();
        let id = closed_journal_with_steps(&scratch.database, 3);
        let before = std::fs::read(&scratch.database).unwrap();
        let paths: Vec<&Path> = if directory_too {
            vec![&scratch.database, scratch.dir.path()]
        } else {
            vec![&scratch.database]
        };
        let Some(guard) = make_read_only(&paths) else {
            eprintln!("skipped: cannot make a file read-only for this user (root without chattr)");
            return;
        };
        let error = Journal::open(&scratch.database).unwrap_err();
        assert!(
            matches!(error, Error::ReadOnly { .. }),
            "directory read-only too: {directory_too}: {error:?}"
        );
        drop(guard);
        make_writable(&paths);
        assert!(
            std::fs::read(&scratch.database).unwrap() == before,
            "the file was changed"
        );
        assert_eq!(integrity(&scratch.database), "ok");
        let journal = Journal::open(&scratch.database).unwrap();
        assert_acknowledged(&journal.steps(id).unwrap(), 3);
    }
}

/// In another process, for a user the permission bits really stop: a `journal_worker` child
/// opens a `0444` file; when the tests run as root, the child runs as `nobody`.
#[test]
fn a_read_only_file_for_another_user_is_read_only_and_loses_nothing() {
    let scratch = Scratch::new();
    let id = closed_journal_with_steps(&scratch.database, 3);
    std::fs::set_permissions(&scratch.database, std::fs::Permissions::from_mode(0o444)).unwrap();
    // Others may enter the directory but, like the file, not write to it.
    std::fs::set_permissions(scratch.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bytes = std::fs::read(&scratch.database).unwrap();
    let mut command = if is_root() {
        worker_as_nobody(scratch.dir.path())
    } else {
        worker()
    };
    command
        .args(["open", scratch.database.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let answer = finish(spawn(&mut command)).answer().clone();
    assert_eq!(
        (answer["outcome"].as_str(), answer["kind"].as_str()),
        (Some("error"), Some("read_only")),
        "{answer}"
    );
    assert!(
        std::fs::read(&scratch.database).unwrap() == bytes,
        "a read-only file was changed"
    );
    std::fs::set_permissions(&scratch.database, std::fs::Permissions::from_mode(0o600)).unwrap();
    let journal = Journal::open(&scratch.database).unwrap();
    assert_acknowledged(&journal.steps(id).unwrap(), 3);
    drop(journal);
    assert_eq!(integrity(&scratch.database), "ok");
}

/// Deterministic bytes that are not an SQLite file.
fn garbage(length: usize) -> Vec<u8> {
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[test]
fn a_garbage_file_is_corrupt_and_left_byte_identical() {
    let mut header_then_garbage = b"SQLite format 3\0".to_vec();
    header_then_garbage.extend(garbage(8192));
    for (label, bytes) in [
        ("random bytes", garbage(64 * 1024)),
        ("a short text file", b"not a database\n".to_vec()),
        ("an SQLite header and garbage", header_then_garbage),
    ] {
        let scratch = Scratch::new();
        std::fs::write(&scratch.database, &bytes).unwrap();
        let entries = directory_entries(scratch.dir.path());
        let error = Journal::open(&scratch.database).unwrap_err();
        assert!(
            matches!(&error, Error::Corrupt { path, .. } if path.ends_with("journal.db")),
            "{label}: {error:?}"
        );
        assert!(
            std::fs::read(&scratch.database).unwrap() == bytes,
            "{label}: the file changed"
        );
        assert_eq!(
            directory_entries(scratch.dir.path()),
            entries,
            "{label}: files appeared"
        );
    }
}

#[test]
fn a_foreign_sqlite_file_is_foreign_and_left_untouched() {
    for (label, setup) in [
        (
            "tables and no application id",
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);
             INSERT INTO orders (total) VALUES (12), (34);",
        ),
        (
            "another application id",
            "PRAGMA application_id = 1234; CREATE TABLE t (x);",
        ),
        (
            "another application id and no tables",
            "PRAGMA application_id = 1234; PRAGMA user_version = 1;",
        ),
        (
            // The version of a durably schema, but not a durably file: migrating it would
            // add durably tables to someone else's database.
            "a schema version and no application id",
            "PRAGMA user_version = 1; CREATE TABLE locks (x);",
        ),
        (
            "a schema version from the future and no application id",
            "PRAGMA user_version = 999;",
        ),
    ] {
        let scratch = Scratch::new();
        rusqlite::Connection::open(&scratch.database)
            .unwrap()
            .execute_batch(setup)
            .unwrap();
        let bytes = std::fs::read(&scratch.database).unwrap();
        let entries = directory_entries(scratch.dir.path());
        let error = Journal::open(&scratch.database).unwrap_err();
        assert!(
            matches!(error, Error::ForeignDatabase { .. }),
            "{label}: {error:?}"
        );
        assert!(
            std::fs::read(&scratch.database).unwrap() == bytes,
            "{label}: the file changed"
        );
        assert_eq!(
            directory_entries(scratch.dir.path()),
            entries,
            "{label}: files appeared"
        );
        assert_eq!(integrity(&scratch.database), "ok", "{label}");
    }
}

#[test]
fn a_schema_from_the_future_is_schema_too_new_and_its_data_kept() {
    for future in [SCHEMA_VERSION + 1, 999] {
        let scratch = Scratch::new();
        let id = closed_journal_with_steps(&scratch.database, 3);
        rusqlite::Connection::open(&scratch.database)
            .unwrap()
            .execute_batch(&format!("PRAGMA user_version = {future}"))
            .unwrap();
        let bytes = std::fs::read(&scratch.database).unwrap();
        let error = Journal::open(&scratch.database).unwrap_err();
        assert!(
            matches!(error, Error::SchemaTooNew { found, supported, .. }
                if found == future && supported == SCHEMA_VERSION),
            "{error:?}"
        );
        assert!(error.to_string().contains("knows only up to"), "{error}");
        assert!(
            std::fs::read(&scratch.database).unwrap() == bytes,
            "the newer file was altered"
        );
        assert_eq!(
            step_rows(&scratch.database, id),
            3,
            "acknowledged steps lost"
        );
        assert_eq!(integrity(&scratch.database), "ok");
    }
}

/// A `journal_worker` child holds `BEGIN IMMEDIATE` while this process, with a 200 ms busy
/// timeout, tries a pure step, a guarded step, a new execution and a new journal. Each gives
/// up in bounded time with `Busy`; the guarded step's effect never runs, because its intent
/// could not be made durable first.
#[test]
fn a_writer_held_by_another_process_past_the_busy_timeout_is_busy() {
    const BUSY_TIMEOUT_MS: u64 = 200;
    let scratch = Scratch::new();
    let database = scratch.database.to_str().unwrap();
    runtime().block_on(async {
        let journal = Journal::builder(&scratch.database)
            .busy_timeout_ms(BUSY_TIMEOUT_MS)
            .open()
            .unwrap();
        let (id, guarded_id, fresh_id) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 2).await;
        let guarded_execution = start(&journal, guarded_id).await;

        let mut holder = Held::spawn(&["hold-write", database]);
        assert!(holder.next_line()["locked"].is_number());
        let started = Instant::now();
        let error = execution
            .pure("blocked", || async { Ok(value(99)) })
            .await
            .unwrap_err();
        let waited = started.elapsed();
        assert!(
            matches!(error, Error::Busy { busy_timeout_ms } if busy_timeout_ms == BUSY_TIMEOUT_MS),
            "{error:?}"
        );
        assert!(error.is_retryable());
        assert!(
            waited >= Duration::from_millis(BUSY_TIMEOUT_MS),
            "gave up after {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(5),
            "waited {waited:?}: the timeout did not hold"
        );
        let effects = AtomicU32::new(0);
        let error = guarded_execution
            .guarded("charge", Policy::Retry, |_key| {
                effects.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, StepError>(1_u32) }
            })
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "guarded: {error:?}");
        assert_eq!(
            effects.load(Ordering::SeqCst),
            0,
            "an effect ran without a durable intent"
        );
        let error = journal
            .open_execution(fresh_id, "faults", "", &"")
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Busy {
                    busy_timeout_ms: BUSY_TIMEOUT_MS
                }
            ),
            "{error:?}"
        );
        // A new journal cannot start while the lock is held either, and says so.
        let error = Journal::builder(&scratch.database)
            .busy_timeout_ms(BUSY_TIMEOUT_MS)
            .open()
            .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "opening: {error:?}");
        assert_eq!(holder.close()["outcome"], "released");

        // The refused step halted this handle; a reopened execution carries on from there.
        drop((execution, guarded_execution));
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 3).await;
        execution.complete(&"done").await.unwrap();
        assert_acknowledged(&journal.steps(id).unwrap(), 3);
        assert!(
            journal.steps(guarded_id).unwrap().is_empty(),
            "the busy intent was written"
        );
        assert_eq!(
            journal.get(fresh_id).unwrap(),
            None,
            "the busy execution was created"
        );
    });
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn an_oversized_payload_is_payload_too_large_and_nothing_is_written() {
    const CAP_BYTES: usize = 1024;
    let scratch = Scratch::new();
    runtime().block_on(async {
        let journal = Journal::builder(&scratch.database)
            .payload_bytes_max(CAP_BYTES)
            .open()
            .unwrap();
        let big = "x".repeat(2 * CAP_BYTES);
        let id = Uuid::new_v4();
        let commits = journal.writer_stats().commits;
        let error = journal.open_execution(id, "faults", "big input", &big).await.unwrap_err();
        assert!(
            matches!(&error, Error::PayloadTooLarge { bytes, max: CAP_BYTES, .. } if *bytes > CAP_BYTES),
            "input: {error:?}"
        );
        assert_eq!(journal.get(id).unwrap(), None, "an execution with a refused input");
        assert_eq!(journal.writer_stats().commits, commits, "a refused input was committed");

        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 2).await;
        let error = execution.pure("big result", || async { Ok(big.clone()) }).await.unwrap_err();
        assert!(matches!(error, Error::PayloadTooLarge { .. }), "result: {error:?}");
        let error = execution.complete(&big).await.unwrap_err();
        assert!(matches!(error, Error::PayloadTooLarge { .. }), "output: {error:?}");
        barrier(&journal).await;
        assert_eq!(journal.get(id).unwrap().unwrap().status, durably_journal::Status::Running, "a big output finalized");
        let resolution = Resolution::Completed(serde_json::Value::String(big.clone()));
        let error = journal.operator().resolve(id, 0, resolution).await.unwrap_err();
        assert!(matches!(error, Error::PayloadTooLarge { .. }), "resolution: {error:?}");
        let steps = journal.steps(id).unwrap();
        assert_eq!(steps.len(), 2, "a refused result left a row");
        assert_acknowledged(&steps, 2);
    });
    assert_eq!(integrity(&scratch.database), "ok");
}

/// A result recorded under a larger cap is refused on replay by a journal with a smaller one,
/// and the refused open releases the execution's lock, so a journal with the larger cap can
/// resume it and replay the result intact.
#[test]
fn a_recorded_payload_over_the_read_cap_is_refused_on_replay_and_the_lock_is_freed() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let open = |payload_bytes_max| {
        Journal::builder(&scratch.database)
            .payload_bytes_max(payload_bytes_max)
            .open()
            .unwrap()
    };
    runtime().block_on(async {
        {
            let journal = open(4096);
            let execution = start(&journal, id).await;
            let _: String = execution
                .pure("big", || async { Ok("y".repeat(2000)) })
                .await
                .unwrap();
            drop(execution);
            barrier(&journal).await;
        }
        let small = open(1024);
        let error = small
            .open_execution(id, "faults", "", &"")
            .await
            .unwrap_err();
        assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
        barrier(&small).await;
        let large = open(4096);
        let execution = start(&large, id).await;
        let replayed: String = execution
            .pure("big", || async { Ok(String::new()) })
            .await
            .unwrap();
        assert_eq!(replayed, "y".repeat(2000));
    });
    assert_eq!(integrity(&scratch.database), "ok");
}

/// Regression test for a bug these tests found: dropping the last handle of a journal returned
/// while its writer thread was still closing the write connection, so the WAL was checkpointed
/// (and removed) only some time later. A program that copied or edited the file right after
/// dropping its journal could see it without its last commits, and a journal reopened at once
/// kept the old WAL around. Now the drop waits for the writer thread.
#[test]
fn journal_drop_waits_for_the_writer_to_checkpoint_and_close() {
    for _ in 0..20 {
        let scratch = Scratch::new();
        let id = closed_journal_with_steps(&scratch.database, 3);
        assert!(
            !sibling(&scratch.database, "-wal").exists(),
            "the WAL outlived the journal"
        );
        assert_eq!(
            step_rows(&scratch.database, id),
            3,
            "the database file lacks acknowledged steps after the drop"
        );
    }
}

#[test]
fn the_wal_deleted_after_a_clean_close_loses_nothing() {
    let scratch = Scratch::new();
    let id = closed_journal_with_steps(&scratch.database, 5);
    // A clean close checkpointed everything into the database file; deleting what is left of
    // the WAL and the shared memory (if anything) changes nothing.
    let _ = std::fs::remove_file(sibling(&scratch.database, "-wal"));
    let _ = std::fs::remove_file(sibling(&scratch.database, "-shm"));
    let journal = Journal::open(&scratch.database).unwrap();
    assert_acknowledged(&journal.steps(id).unwrap(), 5);
    drop(journal);
    assert_eq!(integrity(&scratch.database), "ok");
}

/// What the engine does when the WAL of a journal that was *not* closed cleanly is deleted (a
/// process killed, then someone runs `rm journal.db-wal`): the commits that lived only in the
/// WAL are lost, and nothing can report it, because the database file holds no trace of them.
/// The journal opens the state of the last checkpoint: an older, consistent prefix. This test
/// pins that behaviour so the documentation stays true.
#[test]
fn the_wal_deleted_after_a_crash_loses_the_commits_only_it_held() {
    let scratch = Scratch::new();
    // The helper checkpoints its schema, keeps every commit of its workload in the WAL and is
    // killed without closing.
    let mut child = Command::new(env!("CARGO_BIN_EXE_power_loss_writer"))
        .arg(&scratch.database)
        .args(["7", "3", "full"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let acked = lines
        .map(Result::unwrap)
        .take_while(|line| line != "done")
        .filter(|line| line.starts_with("ack "))
        .count();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(acked > 0);
    let wal = sibling(&scratch.database, "-wal");
    assert!(wal.exists(), "the killed writer left its WAL");
    std::fs::remove_file(wal).unwrap();
    let _ = std::fs::remove_file(sibling(&scratch.database, "-shm"));
    let journal = Journal::builder(&scratch.database)
        .sweep_on_open(false)
        .open()
        .unwrap();
    let executions = journal
        .list(&durably_journal::ListFilter::default())
        .unwrap();
    assert!(
        executions.is_empty(),
        "only the checkpointed schema survives; found {executions:?}"
    );
    drop(journal);
    assert_eq!(integrity(&scratch.database), "ok");
    eprintln!("WAL deleted after a crash: {acked} acknowledged commits lost, as documented");
}
