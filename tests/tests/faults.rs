//! Guarantee: each fault a journal meets in the field gives a typed error, loses nothing that
//! was acknowledged, and leaves a file that passes `PRAGMA integrity_check`: a full disk, a
//! read-only file, a garbage file, a foreign SQLite file, a schema from the future, a writer
//! held by another process past the busy timeout, an oversized payload, and the WAL file
//! deleted while the journal is closed.
//!
//! Method: each test writes acknowledged steps first, provokes the fault through the public API
//! or by preparing the file (a raw SQLite connection, `chattr +i`, a child process holding the
//! write lock), checks the error's variant, then checks the file: every acknowledged step is
//! there with its value, and `integrity_check` is ok. Files that are not ours are compared
//! byte for byte. The WAL-deletion test also shows, and pins, what happens when the WAL of a
//! journal that was *not* closed cleanly is deleted: the commits that lived only in the WAL are
//! gone, silently, because SQLite cannot know they existed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use durably_journal::{Error, Execution, Journal, Opened, SCHEMA_VERSION, StepRecord, rusqlite};
use uuid::Uuid;

/// A journal in its own temporary directory.
struct Scratch {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        Self { dir, path }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

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
        assert_eq!(step.seq, seq);
        assert_eq!(step.state, "completed");
        let expected = serde_json::to_string(&value(seq)).unwrap();
        assert_eq!(
            step.result.as_deref(),
            Some(expected.as_str()),
            "step {seq}"
        );
    }
}

/// `integrity_check` through a fresh read-only connection.
fn integrity(path: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

/// A closed journal holding one execution with `count` acknowledged steps.
fn closed_journal_with_steps(scratch: &Scratch, count: u32) -> Uuid {
    let id = Uuid::new_v4();
    runtime().block_on(async {
        let journal = Journal::open(&scratch.path).unwrap();
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, count).await;
        drop(execution);
        journal.write(|_| Ok(())).await.unwrap();
    });
    id
}

#[test]
fn a_full_disk_is_disk_full_and_loses_nothing_acknowledged() {
    let scratch = Scratch::new();
    runtime().block_on(async {
        let journal = Journal::open(&scratch.path).unwrap();
        let id = Uuid::new_v4();
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 3).await;
        // max_page_count belongs to one connection: set it on the writer's, a few pages above
        // what the file holds now.
        journal
            .write(|conn| {
                let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
                conn.execute_batch(&format!("PRAGMA max_page_count = {}", pages + 4))?;
                Ok(())
            })
            .await
            .unwrap();
        let big = "x".repeat(64 * 1024);
        let error = execution
            .pure("too big for the disk", || async { Ok(big.clone()) })
            .await
            .unwrap_err();
        assert!(matches!(error, Error::DiskFull), "{error:?}");
        drop(execution);
        journal.write(|_| Ok(())).await.unwrap();
        let steps = journal.steps(id).unwrap();
        assert_eq!(steps.len(), 3, "the failed step left a row");
        assert_acknowledged(&steps, 3);
    });
    assert_eq!(integrity(&scratch.path), "ok");
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

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
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

#[test]
fn a_read_only_file_is_read_only_and_loses_nothing() {
    for directory_too in [false, true] {
        let scratch = Scratch::new();
        let id = closed_journal_with_steps(&scratch, 3);
        let before = std::fs::read(&scratch.path).unwrap();
        let paths: Vec<&Path> = if directory_too {
            vec![&scratch.path, scratch.dir.path()]
        } else {
            vec![&scratch.path]
        };
        let Some(guard) = make_read_only(&paths) else {
            eprintln!("skipped: cannot make a file read-only for this user (root without chattr)");
            return;
        };
        let error = Journal::open(&scratch.path).unwrap_err();
        assert!(
            matches!(error, Error::ReadOnly { .. }),
            "directory read-only too: {directory_too}: {error:?}"
        );
        drop(guard);
        make_writable(&paths);
        assert!(
            std::fs::read(&scratch.path).unwrap() == before,
            "the file was changed"
        );
        assert_eq!(integrity(&scratch.path), "ok");
        let journal = Journal::open(&scratch.path).unwrap();
        assert_acknowledged(&journal.steps(id).unwrap(), 3);
    }
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

fn directory_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_garbage_file_is_corrupt_and_left_byte_identical() {
    let mut header_then_garbage = b"SQLite format 3\0".to_vec();
    header_then_garbage.extend(garbage(4096));
    for (label, bytes) in [
        ("random bytes", garbage(32 * 1024)),
        ("text", b"not a database\n".to_vec()),
        ("an SQLite header and garbage", header_then_garbage),
    ] {
        let scratch = Scratch::new();
        std::fs::write(&scratch.path, &bytes).unwrap();
        let entries = directory_entries(scratch.dir.path());
        let error = Journal::open(&scratch.path).unwrap_err();
        assert!(matches!(error, Error::Corrupt { .. }), "{label}: {error:?}");
        assert!(
            std::fs::read(&scratch.path).unwrap() == bytes,
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
    let scratch = Scratch::new();
    {
        let conn = rusqlite::Connection::open(&scratch.path).unwrap();
        conn.execute_batch(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);
             INSERT INTO orders (total) VALUES (12), (34);",
        )
        .unwrap();
    }
    let bytes = std::fs::read(&scratch.path).unwrap();
    let error = Journal::open(&scratch.path).unwrap_err();
    assert!(matches!(error, Error::ForeignDatabase { .. }), "{error:?}");
    assert!(
        std::fs::read(&scratch.path).unwrap() == bytes,
        "the foreign file was changed"
    );
    assert_eq!(integrity(&scratch.path), "ok");
}

#[test]
fn a_schema_from_the_future_is_schema_too_new_and_its_data_kept() {
    let scratch = Scratch::new();
    let id = closed_journal_with_steps(&scratch, 3);
    {
        let conn = rusqlite::Connection::open(&scratch.path).unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {}", SCHEMA_VERSION + 1))
            .unwrap();
    }
    let error = Journal::open(&scratch.path).unwrap_err();
    assert!(
        matches!(error, Error::SchemaTooNew { found, supported, .. }
            if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{error:?}"
    );
    assert_eq!(integrity(&scratch.path), "ok");
    let conn = rusqlite::Connection::open(&scratch.path).unwrap();
    let (steps, version): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM steps WHERE execution_id = ?1),
                    (SELECT user_version FROM pragma_user_version())",
            [id.to_string()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (steps, version),
        (3, SCHEMA_VERSION + 1),
        "the newer file was altered"
    );
}

/// Another process holding `BEGIN IMMEDIATE` on the file until told to let go.
struct WriteLockHolder {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl WriteLockHolder {
    fn start(path: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_write_lock_holder"))
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "locked");
        Self { child, lines }
    }

    fn release(mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "release").unwrap();
        assert_eq!(self.lines.next().unwrap().unwrap(), "released");
        assert!(self.child.wait().unwrap().success());
    }
}

#[test]
fn a_writer_held_by_another_process_past_the_busy_timeout_is_busy() {
    const BUSY_TIMEOUT_MS: u64 = 200;
    let scratch = Scratch::new();
    runtime().block_on(async {
        let journal = Journal::builder(&scratch.path)
            .busy_timeout_ms(BUSY_TIMEOUT_MS)
            .open()
            .unwrap();
        let id = Uuid::new_v4();
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 2).await;
        let holder = WriteLockHolder::start(&scratch.path);
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
        // A new journal cannot start while the lock is held either, and says so.
        let error = Journal::builder(&scratch.path)
            .busy_timeout_ms(BUSY_TIMEOUT_MS)
            .open()
            .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "opening: {error:?}");
        holder.release();
        // The refused step halted this handle; a reopened execution carries on from there.
        drop(execution);
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 3).await;
        execution.complete(&"done").await.unwrap();
        assert_acknowledged(&journal.steps(id).unwrap(), 3);
    });
    assert_eq!(integrity(&scratch.path), "ok");
}

#[test]
fn an_oversized_payload_is_payload_too_large_and_nothing_is_written() {
    const CAP_BYTES: usize = 1024;
    let scratch = Scratch::new();
    runtime().block_on(async {
        let journal = Journal::builder(&scratch.path)
            .payload_bytes_max(CAP_BYTES)
            .open()
            .unwrap();
        let big = "x".repeat(CAP_BYTES + 1);
        let id = Uuid::new_v4();
        let commits = journal.writer_stats().commits;
        let error = journal
            .open_execution(id, "faults", "big input", &big)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::PayloadTooLarge { .. }),
            "input: {error:?}"
        );
        assert_eq!(
            journal.get(id).unwrap(),
            None,
            "an execution with a refused input"
        );
        assert_eq!(
            journal.writer_stats().commits,
            commits,
            "a refused input was committed"
        );
        let mut execution = start(&journal, id).await;
        acknowledge(&mut execution, 0, 2).await;
        let error = execution
            .pure("big result", || async { Ok(big.clone()) })
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::PayloadTooLarge { .. }),
            "result: {error:?}"
        );
        let error = execution.complete(&big).await.unwrap_err();
        assert!(
            matches!(error, Error::PayloadTooLarge { .. }),
            "output: {error:?}"
        );
        journal.write(|_| Ok(())).await.unwrap();
        let steps = journal.steps(id).unwrap();
        assert_eq!(steps.len(), 2, "the refused result left a row");
        assert_acknowledged(&steps, 2);
        assert_eq!(journal.get(id).unwrap().unwrap().status, "running");
    });
    assert_eq!(integrity(&scratch.path), "ok");
}

fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn shm_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-shm");
    PathBuf::from(name)
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
        let id = closed_journal_with_steps(&scratch, 3);
        assert!(
            !wal_path(&scratch.path).exists(),
            "the WAL outlived the journal"
        );
        let conn = rusqlite::Connection::open_with_flags(
            &scratch.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let steps: i64 = conn
            .query_row(
                "SELECT count(*) FROM steps WHERE execution_id = ?1",
                [id.to_string()],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(
            steps, 3,
            "the database file lacks acknowledged steps after the drop"
        );
    }
}

#[test]
fn the_wal_deleted_after_a_clean_close_loses_nothing() {
    let scratch = Scratch::new();
    let id = closed_journal_with_steps(&scratch, 5);
    // A clean close checkpointed everything into the database file; deleting what is left of
    // the WAL and the shared memory (if anything) changes nothing.
    let _ = std::fs::remove_file(wal_path(&scratch.path));
    let _ = std::fs::remove_file(shm_path(&scratch.path));
    let journal = Journal::open(&scratch.path).unwrap();
    assert_acknowledged(&journal.steps(id).unwrap(), 5);
    drop(journal);
    assert_eq!(integrity(&scratch.path), "ok");
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
        .arg(&scratch.path)
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
    assert!(
        wal_path(&scratch.path).exists(),
        "the killed writer left its WAL"
    );
    std::fs::remove_file(wal_path(&scratch.path)).unwrap();
    let _ = std::fs::remove_file(shm_path(&scratch.path));
    let journal = Journal::builder(&scratch.path)
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
    assert_eq!(integrity(&scratch.path), "ok");
    eprintln!("WAL deleted after a crash: {acked} acknowledged commits lost, as documented");
}
