//! Guarantee: a local user who is neither the journal's owner nor root cannot forge the evidence
//! that decides whether a lock holder is alive, cannot make root's cleanup delete files outside
//! the liveness directory, and cannot hang anything with a FIFO; and evidence that contradicts
//! itself never proves a death.
//!
//! Method: the "attacker" is uid 65534, a child started with `setpriv --reuid 65534 --regid
//! 65534 --clear-groups`, working in a shared sticky directory (mode 1777) as in `/tmp`. It
//! plants the liveness directory before the journal's first open (as its own directory, and as
//! a symlink to a directory of root's); the open is refused, with the path and the reason, and
//! the link's target keeps every file. Root opening a journal that uid 65534 owns creates the
//! liveness directory for uid 65534, and a `lock_holder` child running as uid 65534 then
//! registers in it, holds a lock and is judged alive and, once SIGKILLed, dead. A FIFO under a
//! pending and a live name is opened by `Journal::open` (whose sweep cleans the directory) and
//! by `lock_holders` (what `durably locks` prints) on a thread with a deadline: a hang fails
//! the test instead of hanging it. Swapped evidence uses real `lock_holder` children: a free file
//! put in place of a live holder's file, and a file kept locked after its holder was killed.
//! Tests that act as another user need root and are skipped, with a message, without it.

// Helpers outside the #[test] functions fail the test by panicking, as the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;

use durably_journal::Journal;
use durably_lock::{
    Acquire, DeathReason, Error, Judgement, LivenessDir, Locker, LockerConfig, MIGRATION_SQL,
    Refusal,
};
use support::lock::{immediate, insert_holder, own_identity, spawn_holder};
use support::{Driven, Scratch, WAIT_MAX, wait_exit};
use uuid::Uuid;

/// The unprivileged user the attacker (or the service) runs as.
const NOBODY: u32 = 65534;

/// `program args...` run as uid and gid 65534 with no supplementary groups.
fn as_nobody(program: &str, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .arg("--clear-groups")
        .arg(program)
        .args(args);
    command
}

/// Runs `program args...` as uid 65534 and requires it to succeed.
fn run_as_nobody(program: &str, args: &[&str]) {
    let mut child = as_nobody(program, args).spawn().unwrap();
    let status = wait_exit(&mut child, program);
    assert!(
        status.success(),
        "{program} {args:?} as uid {NOBODY}: {status}"
    );
}

/// Whether this process can act as another user; says why a test is skipped when it cannot.
fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping {test}: it needs root to act as uid {NOBODY}");
    }
    root
}

/// For a test that acts as another user: a directory every user may create entries in, each
/// user deleting only their own (like `/tmp`), and the path of a journal in it that does not
/// exist yet. `None`, with a message, when this process is not root: the test is skipped.
fn shared_sticky_dir(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    if !root_or_skip(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let database = dir.path().join("journal.db");
    Some((dir, database))
}

/// A copy of the `lock_holder` helper beside `database`, for uid 65534 to run: the build
/// directory may sit below a folder only root can enter. It is copied by a `cp` child, so no
/// thread of this process ever holds a write descriptor of it that a concurrent fork could
/// inherit (exec would then fail with `ETXTBSY`).
fn lock_holder_for_nobody(database: &Path) -> PathBuf {
    let copy = database.with_file_name("lock_holder");
    if !copy.exists() {
        let status = Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_lock_holder"))
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success(), "cp lock_holder: {status}");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    copy
}

/// A database with the `locks` table, made by root, at `path`.
fn lock_database(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(MIGRATION_SQL).unwrap();
}

fn refusal(error: &Error) -> &Refusal {
    match error {
        Error::LivenessDirRefused { reason, .. } => reason,
        other => panic!("expected the liveness directory to be refused, got {other}"),
    }
}

fn journal_refusal(error: durably_journal::Error) -> Error {
    match error {
        durably_journal::Error::Lock(error) => error,
        other => panic!("expected a lock error, got {other}"),
    }
}

#[test]
fn a_directory_another_user_planted_is_refused() {
    let Some((_shared, database)) =
        shared_sticky_dir("a_directory_another_user_planted_is_refused")
    else {
        return;
    };
    lock_database(&database);
    let planted = LivenessDir::beside(&database).path().to_owned();
    run_as_nobody("mkdir", &["-m", "0777", planted.to_str().unwrap()]);
    // The mode is set again: mkdir's mode is filtered through the umask.
    run_as_nobody("chmod", &["0777", planted.to_str().unwrap()]);

    let error = Locker::new(LockerConfig::new(LivenessDir::beside(&database))).unwrap_err();
    assert_eq!(
        refusal(&error),
        &Refusal::Owner {
            owner: NOBODY,
            euid: 0,
            journal_owner: Some(0),
        }
    );
    let message = error.to_string();
    assert!(
        message.contains(&planted.display().to_string()) && message.contains("uid 65534"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_dir(&planted).unwrap().count(),
        0,
        "nothing was created in the planted directory"
    );
}

#[test]
fn roots_open_never_follows_a_symlinked_directory() {
    let Some((_shared, database)) =
        shared_sticky_dir("roots_open_never_follows_a_symlinked_directory")
    else {
        return;
    };
    let private = tempfile::tempdir().unwrap();
    // Files the cleanup removes when it finds them free in a liveness directory.
    let precious = [
        "pending-precious".to_owned(),
        format!("{}.live", Uuid::new_v4()),
    ];
    for name in &precious {
        std::fs::write(private.path().join(name), b"root's").unwrap();
    }
    let link = LivenessDir::beside(&database).path().to_owned();
    run_as_nobody(
        "ln",
        &[
            "-s",
            private.path().to_str().unwrap(),
            link.to_str().unwrap(),
        ],
    );

    let error = journal_refusal(Journal::open(&database).unwrap_err());
    assert_eq!(refusal(&error), &Refusal::Symlink);
    assert!(
        error.to_string().contains(&link.display().to_string()),
        "{error}"
    );
    let mut left: Vec<String> = std::fs::read_dir(private.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    let mut expected = precious.to_vec();
    expected.sort();
    assert_eq!(left, expected, "the link's target is untouched");
}

#[test]
fn root_creates_the_liveness_directory_for_the_journals_owner() {
    let Some((_shared, database)) =
        shared_sticky_dir("root_creates_the_liveness_directory_for_the_journals_owner")
    else {
        return;
    };
    lock_database(&database);
    std::os::unix::fs::chown(&database, Some(NOBODY), Some(NOBODY)).unwrap();

    // Root, an operator, opens the service's journal first.
    let operator = Locker::new(LockerConfig::new(LivenessDir::beside(&database))).unwrap();
    let liveness = LivenessDir::beside(&database);
    let dir = std::fs::symlink_metadata(liveness.path()).unwrap();
    assert!(dir.is_dir());
    assert_eq!((dir.uid(), dir.gid()), (NOBODY, NOBODY));
    assert_eq!(dir.mode() & 0o7777, 0o700);
    let operator_file = liveness
        .path()
        .join(format!("{}.live", operator.instance_id()));
    assert_eq!(
        std::fs::metadata(&operator_file).unwrap().uid(),
        NOBODY,
        "root's own liveness file belongs to the directory's owner, so it counts as evidence"
    );

    // The service, running as the journal's owner, still registers and takes locks.
    let database_arg = database.to_str().unwrap();
    let mut service = Driven::start(&mut as_nobody(
        lock_holder_for_nobody(&database).to_str().unwrap(),
        &[database_arg, "resource"],
    ));
    service.expect("ready");
    service.send("acquire");
    assert_eq!(service.expect("acquired"), ["1", "none"]);

    let conn = durably_db::Connection::from(rusqlite::Connection::open(&database).unwrap());
    let held = immediate(&conn, |conn| operator.try_acquire(conn, "resource")).unwrap();
    assert!(
        matches!(
            held,
            Acquire::Held {
                judgement: Judgement::Alive(_),
                ..
            }
        ),
        "{held:?}"
    );
    service.kill();
    let taken = immediate(&conn, |conn| operator.try_acquire(conn, "resource")).unwrap();
    assert!(
        matches!(
            taken,
            Acquire::Acquired {
                epoch: 2,
                took_over: Some(ref takeover),
            } if takeover.reason == DeathReason::LivenessFileUnlocked
        ),
        "{taken:?}"
    );
}

#[test]
fn another_user_may_not_create_the_directory_for_a_journal_not_theirs() {
    let Some((_shared, database)) =
        shared_sticky_dir("another_user_may_not_create_the_directory_for_a_journal_not_theirs")
    else {
        return;
    };
    lock_database(&database);
    let mut child = as_nobody(
        lock_holder_for_nobody(&database).to_str().unwrap(),
        &[database.to_str().unwrap(), "resource"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let status = wait_exit(&mut child, "lock_holder as uid 65534");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        !status.success(),
        "uid 65534 registered beside root's journal"
    );
    // The helper's `main` prints its error with `Debug`.
    assert!(
        stderr.contains("ForeignJournal { journal_owner: 0, euid: 65534 }"),
        "{stderr}"
    );
    assert!(!LivenessDir::beside(&database).path().exists());
}

#[test]
fn a_file_of_another_user_is_evidence_of_nothing() {
    if !root_or_skip("a_file_of_another_user_is_evidence_of_nothing") {
        return;
    }
    let scratch = Scratch::with_lock_tables();
    let locker = scratch.locker();
    // A holder whose pid cannot be checked from here, so its liveness file alone decides.
    let mut elsewhere = own_identity();
    elsewhere.pid_ns += 1;
    let instance = Uuid::new_v4();
    insert_holder(
        &scratch.conn(),
        "resource",
        1,
        &elsewhere,
        &instance.to_string(),
    );
    let file = scratch.liveness().path().join(format!("{instance}.live"));
    std::fs::write(&file, b"").unwrap();
    std::os::unix::fs::chown(&file, Some(NOBODY), Some(NOBODY)).unwrap();

    let refused = immediate(&scratch.conn(), |conn| locker.try_acquire(conn, "resource")).unwrap();
    assert!(
        matches!(
            &refused,
            Acquire::Held { judgement: Judgement::Unknown(why), .. } if why.contains("uid 65534")
        ),
        "{refused:?}"
    );
    assert_eq!(
        locker.remove_dead_liveness_files(&scratch.conn()).unwrap(),
        0
    );
    assert!(
        file.exists(),
        "the cleanup leaves another user's file alone"
    );
    // The same free file, owned by the directory's owner, is the holder's death.
    std::os::unix::fs::chown(&file, Some(0), Some(0)).unwrap();
    let taken = immediate(&scratch.conn(), |conn| locker.try_acquire(conn, "resource")).unwrap();
    assert!(
        matches!(taken, Acquire::Acquired { took_over: Some(ref takeover), .. }
            if takeover.reason == DeathReason::LivenessFileUnlocked),
        "{taken:?}"
    );
}

/// Runs `work` on a thread and waits for it at most [`WAIT_MAX`]. On timeout, each FIFO in
/// `fifos` is opened read-write, which on Linux never blocks and releases a reader stuck in
/// `open`, and the test fails instead of hanging.
fn within_deadline<T: Send + 'static>(
    what: &str,
    fifos: &[PathBuf],
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (sender, receiver) = channel();
    let worker = std::thread::spawn(move || {
        let _ = sender.send(work());
    });
    if let Ok(value) = receiver.recv_timeout(WAIT_MAX) {
        worker.join().unwrap();
        return value;
    }
    let _released: Vec<File> = fifos
        .iter()
        .filter_map(|fifo| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(fifo)
                .ok()
        })
        .collect();
    panic!("{what} did not return within {WAIT_MAX:?}: it blocked on a FIFO");
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_in_the_liveness_directory_blocks_nothing() {
    let scratch = Scratch::new();
    let database = scratch.database.clone();
    drop(Journal::open(&database).unwrap());
    let liveness = LivenessDir::beside(&database);
    // A held lock whose holder (this process) is alive, with a FIFO under its live name.
    let instance = Uuid::new_v4();
    insert_holder(
        &durably_db::Connection::from(rusqlite::Connection::open(&database).unwrap()),
        "resource",
        1,
        &own_identity(),
        &instance.to_string(),
    );
    let fifos = vec![
        liveness.path().join("pending-fifo"),
        liveness.path().join(format!("{instance}.live")),
    ];
    for fifo in &fifos {
        mkfifo(fifo);
    }

    // Opening sweeps: it judges every held lock and cleans the directory.
    let journal = within_deadline("Journal::open", &fifos, move || {
        Journal::open(&database).unwrap()
    });
    let holders = within_deadline("lock_holders", &fifos, move || {
        journal.lock_holders().unwrap()
    });
    assert_eq!(holders.len(), 1);
    let (row, judgement) = &holders[0];
    assert_eq!(row.resource, "resource");
    assert!(
        matches!(judgement, Judgement::Alive(why) if why.contains("recorded start time")),
        "the FIFO proves nothing, the running pid decides: {judgement}"
    );
    for fifo in &fifos {
        assert!(fifo.exists(), "the cleanup leaves {} alone", fifo.display());
    }
}

/// A `lock_holder` child that holds `resource` at epoch 1, with its instance id.
fn holding_resource(scratch: &Scratch) -> (Driven, String) {
    let (mut holder, instance) = spawn_holder(&scratch.database, "resource", &[]);
    holder.send("acquire");
    assert_eq!(holder.expect("acquired"), ["1", "none"]);
    (holder, instance)
}

#[test]
fn a_free_file_swapped_in_for_a_live_holder_proves_nothing() {
    let scratch = Scratch::with_lock_tables();
    let (mut holder, instance) = holding_resource(&scratch);
    // Whoever can write the directory replaces the holder's locked file with a free one.
    let file = scratch.liveness().path().join(format!("{instance}.live"));
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, b"").unwrap();

    let contender = scratch.locker();
    let refused = immediate(&scratch.conn(), |conn| {
        contender.try_acquire(conn, "resource")
    })
    .unwrap();
    assert!(
        matches!(
            &refused,
            Acquire::Held { judgement: Judgement::Unknown(why), .. }
                if why.contains("contradicting evidence")
        ),
        "a live holder was judged on a swapped file: {refused:?}"
    );
    holder.send("fence 1");
    assert_eq!(holder.expect("fenced"), ["1"]);
    holder.finish();
}

#[test]
fn a_lock_on_a_dead_holders_file_does_not_keep_it_alive() {
    let scratch = Scratch::with_lock_tables();
    let (mut holder, instance) = holding_resource(&scratch);
    holder.kill();
    // Someone else opens the dead holder's file and keeps it locked.
    let squatter = File::open(scratch.liveness().path().join(format!("{instance}.live"))).unwrap();
    squatter.lock().unwrap();

    let contender = scratch.locker();
    let taken = immediate(&scratch.conn(), |conn| {
        contender.try_acquire(conn, "resource")
    })
    .unwrap();
    let Acquire::Acquired {
        epoch: 2,
        took_over: Some(takeover),
    } = &taken
    else {
        panic!("a dead holder stayed alive through a lock on its file: {taken:?}");
    };
    assert!(
        matches!(
            takeover.reason,
            DeathReason::NoSuchProcess { .. } | DeathReason::PidReused { .. }
        ),
        "{:?}",
        takeover.reason
    );
}
