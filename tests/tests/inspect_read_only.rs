//! Guarantee: reading a journal needs only read access, changes nothing, and waits for no
//! writer. A user who may read the journal but write neither it nor its directory reads it:
//! closed, held open by another user's writer, and left behind by a writer killed with SIGKILL;
//! so does a reader through a read-only bind mount. No reader adds a file beside the journal.
//! A file beside the journal that the reader may not read is named in the refusal. A writer's
//! open transaction (what a long migration holds) does not block a reader.
//!
//! Method: the journal is built by this process; the reader is a `journal_worker inspect`
//! child, run as uid 65534 where it must lack write access (`worker_as_nobody`), or this
//! process through the bind mount. The writer holding the journal open is a `journal_worker
//! hold` child (killed with SIGKILL for the crashed case), the open write transaction a
//! `journal_worker hold-write` child. The bind mount is made with `mount --bind` and `mount -o
//! remount,ro,bind`. The directory is listed before and after each read: no name may appear.
//! Tests that need root, or a mount, skip with a message without them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use durably_journal::{Error, Journal, ListFilter};
use serde_json::Value;
use support::journal::{Held, finish, worker_as_nobody};
use support::{Scratch, directory_entries, is_root, runtime, spawn};
use uuid::Uuid;

/// A closed journal at `path` with one completed execution, and no liveness directory.
fn closed_journal(path: &Path) -> Uuid {
    let id = Uuid::now_v7();
    runtime().block_on(async {
        let journal = Journal::open(path).unwrap();
        let durably_journal::Opened::Running(execution) = journal
            .open_execution(id, "test", "closed", &"input")
            .await
            .unwrap()
        else {
            panic!("a new execution is not finished");
        };
        execution.complete(&"done").await.unwrap();
    });
    let mut liveness = path.as_os_str().to_owned();
    liveness.push(".durably-live");
    std::fs::remove_dir_all(PathBuf::from(liveness)).unwrap();
    id
}

/// Runs `journal_worker inspect db` as uid 65534 and returns its answer, checking that the
/// directory of `db` gained no name.
fn inspect_as_nobody(dir: &Path, db: &Path) -> Value {
    let mut command = worker_as_nobody(dir);
    let before = directory_entries(dir);
    command
        .args(["inspect", db.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let answer = finish(spawn(&mut command)).answer().clone();
    assert_eq!(directory_entries(dir), before, "the reader created a file");
    answer
}

/// The statuses an `inspect` answer lists, by execution id.
fn statuses(answer: &Value) -> Vec<(String, String)> {
    assert_eq!(answer["outcome"], "inspected", "{answer}");
    let mut found: Vec<(String, String)> = answer["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let text = |key: &str| row[key].as_str().unwrap().to_owned();
            (text("id"), text("status"))
        })
        .collect();
    found.sort();
    found
}

fn verdicts(answer: &Value) -> Vec<String> {
    answer["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|holder| holder["verdict"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_user_who_may_only_read_the_journal_reads_it_and_creates_nothing() {
    if !is_root() {
        eprintln!("skipping: reading as another user needs root");
        return;
    }
    let scratch = Scratch::new();
    let done = closed_journal(&scratch.database);
    // Others may enter the directory and read the journal, and write neither.
    std::fs::set_permissions(scratch.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&scratch.database, std::fs::Permissions::from_mode(0o644)).unwrap();
    let closed = inspect_as_nobody(scratch.dir.path(), &scratch.database);
    assert_eq!(
        statuses(&closed),
        vec![(done.to_string(), "completed".to_owned())]
    );

    // A writer of root's holds the journal open: its WAL and index exist, and are not nobody's
    // to write.
    let held = Uuid::now_v7();
    let db = scratch.database.to_str().unwrap();
    let mut holder = Held::spawn(&["hold", db, &held.to_string()]);
    assert!(holder.next_line()["held"].is_number());
    let open = inspect_as_nobody(scratch.dir.path(), &scratch.database);
    let mut expected = vec![
        (done.to_string(), "completed".to_owned()),
        (held.to_string(), "running".to_owned()),
    ];
    expected.sort();
    assert_eq!(statuses(&open), expected);
    assert_eq!(verdicts(&open), ["alive"], "{open}");

    // An index the reader may not even read is named, not "unable to open database file".
    let index = scratch.dir.path().join("journal.db-shm");
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o600)).unwrap();
    let refused = inspect_as_nobody(scratch.dir.path(), &scratch.database);
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("journal.db-shm"), "{refused}");
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o644)).unwrap();

    // Killed, the writer leaves its WAL and index behind, with the commits only they hold.
    holder.kill();
    let crashed = inspect_as_nobody(scratch.dir.path(), &scratch.database);
    assert_eq!(statuses(&crashed), expected);
    assert_eq!(verdicts(&crashed), ["dead"], "{crashed}");
}

/// A read-only bind mount of a directory, unmounted when dropped.
struct ReadOnlyMount(tempfile::TempDir);

impl ReadOnlyMount {
    /// `None`, with a message, where this process may not mount.
    fn of(dir: &Path) -> Option<Self> {
        let target = tempfile::tempdir().unwrap();
        let mounted = |args: &[&str]| {
            Command::new("mount")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        };
        let point = target.path().to_str().unwrap().to_owned();
        let point = point.as_str();
        if !mounted(&["--bind", dir.to_str().unwrap(), point]) {
            eprintln!("skipping: this process may not make a bind mount");
            return None;
        }
        let mount = Self(target);
        if !mounted(&["-o", "remount,ro,bind", point]) {
            eprintln!("skipping: this process may not make a bind mount read-only");
            return None;
        }
        Some(mount)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_read_only_bind_mount_is_enough_to_read_a_closed_and_an_open_journal() {
    if !is_root() {
        eprintln!("skipping: a bind mount needs root");
        return;
    }
    let scratch = Scratch::new();
    let done = closed_journal(&scratch.database);
    let Some(mount) = ReadOnlyMount::of(scratch.dir.path()) else {
        return;
    };
    let through = mount.path().join("journal.db");
    let before = directory_entries(mount.path());
    let error = Journal::open(&through).unwrap_err();
    assert!(matches!(error, Error::ReadOnly { .. }), "{error:?}");

    let inspector = Journal::inspect(&through).unwrap();
    let ids = |inspector: &durably_journal::Inspector| -> Vec<Uuid> {
        let listed = inspector.list(&ListFilter::default()).unwrap();
        listed.iter().map(|record| record.execution_id).collect()
    };
    assert_eq!(ids(&inspector), [done]);
    drop(inspector);
    assert_eq!(
        directory_entries(mount.path()),
        before,
        "a file was created"
    );

    let held = Uuid::now_v7();
    let db = scratch.database.to_str().unwrap();
    let mut holder = Held::spawn(&["hold", db, &held.to_string()]);
    assert!(holder.next_line()["held"].is_number());
    let during = directory_entries(mount.path());
    let inspector = Journal::inspect(&through).unwrap();
    assert_eq!(ids(&inspector), [held, done]);
    let holders = inspector.lock_holders().unwrap();
    assert!(holders.len() == 1 && !holders[0].1.is_dead(), "{holders:?}");
    drop(inspector);
    assert_eq!(
        directory_entries(mount.path()),
        during,
        "a file was created"
    );
    holder.close();
}

#[test]
fn a_writers_open_transaction_does_not_block_a_reader() {
    let scratch = Scratch::new();
    let done = closed_journal(&scratch.database);
    let db = scratch.database.to_str().unwrap();
    let mut writer = Held::spawn(&["hold-write", db]);
    assert!(writer.next_line()["locked"].is_number());
    let blocked = Journal::builder(&scratch.database)
        .busy_timeout_ms(50)
        .sweep_on_open(false)
        .open()
        .unwrap_err();
    assert!(matches!(blocked, Error::Busy { .. }), "{blocked:?}");

    let inspector = Journal::inspect(&scratch.database).unwrap();
    assert!(inspector.get(done).unwrap().is_some());
    assert!(inspector.lock_holders().unwrap().is_empty());
    assert!(inspector.integrity_check().unwrap().is_empty());
    writer.close();
}
