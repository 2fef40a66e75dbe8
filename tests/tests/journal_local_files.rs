//! Guarantee: a journal's files are private from the first byte, whoever shares its directory.
//! A new journal exists only with mode 0600, under any umask, so no other user can open it
//! between its creation and a later `chmod`. A file found in its place is checked before SQLite
//! reads or writes it: an empty database someone else made (another owner, or readable by
//! others) is refused, and so is a `-wal` or `-shm` of another user or a link in their place,
//! each left as it was; a `-wal` or `-shm` of ours that others may read is tightened, without
//! changing its owner, even when root opens a user's journal. A path that is a dangling
//! symbolic link is refused before anything is created.
//!
//! Method: the umask test runs `journal_worker` children with the umask set before exec, and
//! watches the directory with inotify: the database must be created and never have its mode
//! changed afterwards (no `IN_ATTRIB`), so the mode it has is the mode it was created with. The
//! files of another user are made by a child running as `nobody` (the tests that need it skip
//! when not root); stale `-wal` and `-shm` files are those of a `journal_worker` holder killed
//! with SIGKILL. Every refusal is checked for its typed error, then for the files it left:
//! their bytes, owner and mode unchanged, and nothing new beside them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

mod support;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use durably_journal::{Error, Journal, UnsafeFileReason};
use support::journal::{Held, worker, worker_as_nobody};
use support::{NOBODY, Scratch, directory_entries, is_root, runtime, sibling, spawn};
use uuid::Uuid;

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn owner_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().uid()
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A file's bytes, owner and mode, to show that a refusal left it as it was.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    bytes: Vec<u8>,
    owner: u32,
    mode: u32,
}

impl Snapshot {
    fn of(path: &Path) -> Self {
        Self {
            bytes: std::fs::read(path).unwrap(),
            owner: owner_of(path),
            mode: mode_of(path),
        }
    }
}

/// The names of the directory entries an inotify watch saw created, and of those whose
/// attributes (the mode among them) changed.
struct Watch {
    fd: i32,
}

impl Watch {
    fn on(dir: &Path) -> Self {
        // SAFETY: plain system calls on a descriptor this struct owns and a NUL-terminated path.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0, "inotify_init1 failed");
            let path = CString::new(dir.as_os_str().as_bytes()).unwrap();
            let watch =
                libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_CREATE | libc::IN_ATTRIB);
            assert!(watch >= 0, "inotify_add_watch failed");
            Self { fd }
        }
    }

    /// Every event queued so far, as (mask, name). The events of a process are queued by the
    /// system calls that cause them, so after it exited, all of its events are here.
    fn events(&self) -> Vec<(u32, String)> {
        let mut events = Vec::new();
        let mut buffer = vec![0_u8; 64 * 1024];
        loop {
            // SAFETY: reads into a buffer of the length given.
            let read = unsafe { libc::read(self.fd, buffer.as_mut_ptr().cast(), buffer.len()) };
            if read <= 0 {
                return events;
            }
            let mut at = 0;
            while at < read as usize {
                // SAFETY: the kernel wrote whole events, each a header and `len` name bytes.
                let header: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buffer[at..].as_ptr().cast()) };
                let start = at + std::mem::size_of::<libc::inotify_event>();
                let name = &buffer[start..start + header.len as usize];
                let name = name.split(|byte| *byte == 0).next().unwrap_or_default();
                events.push((header.mask, String::from_utf8_lossy(name).into_owned()));
                at = start + header.len as usize;
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this struct owns, once.
        unsafe { libc::close(self.fd) };
    }
}

/// Under umask 000, 022 and 077 alike, a new journal, its WAL and its index are 0600 while a
/// process holds them, and the journal was never `chmod`ed after its creation: its mode is the
/// one it was created with, so nobody else could open it in between, and no crash could leave
/// it readable.
#[test]
fn a_new_journal_is_created_private_under_any_umask() {
    for umask in [0o000, 0o022, 0o077] {
        let scratch = Scratch::new();
        let watch = Watch::on(scratch.dir.path());
        let mut command = worker();
        command.args([
            "hold",
            scratch.database.to_str().unwrap(),
            &Uuid::new_v4().to_string(),
        ]);
        // SAFETY: umask is async-signal-safe and touches nothing but the child's own mask.
        unsafe {
            command.pre_exec(move || {
                libc::umask(umask);
                Ok(())
            });
        }
        let mut holder = Held::start(&mut command);
        assert!(holder.next_line()["held"].is_i64());
        for suffix in ["", "-wal", "-shm"] {
            let path = sibling(&scratch.database, suffix);
            assert_eq!(
                mode_of(&path),
                0o600,
                "umask {umask:03o}: {}",
                path.display()
            );
        }
        holder.close();

        let events = watch.events();
        let of_journal = |mask: u32| {
            events
                .iter()
                .filter(|(event, name)| event & mask != 0 && name == "journal.db")
                .count()
        };
        assert_eq!(
            of_journal(libc::IN_CREATE),
            1,
            "umask {umask:03o}: {events:?}"
        );
        assert_eq!(
            of_journal(libc::IN_ATTRIB),
            0,
            "umask {umask:03o}: the journal's mode changed after it was created: {events:?}"
        );
        assert_eq!(mode_of(&scratch.database), 0o600, "umask {umask:03o}");
    }
}

/// Opens `path`, which must be refused as [`Error::UnsafeFile`] for `reason`; returns the error.
fn refused(path: &Path, reason: UnsafeFileReason) -> Error {
    let error = Journal::open(path).unwrap_err();
    assert!(
        matches!(&error, Error::UnsafeFile { reason: found, .. } if *found == reason),
        "{error:?}"
    );
    error
}

/// An empty file in the journal's place that others may read or write was made by someone
/// else, with a mode durably did not choose: it is refused, named with its owner and mode, and
/// left as it was, with nothing created beside it. An empty file of ours that only we can use
/// (left by a crash right after the create, or being created by another process right now) is
/// adopted.
#[test]
fn an_empty_file_others_can_use_is_refused_and_left_as_it_was() {
    for mode in [0o644, 0o660, 0o606] {
        let scratch = Scratch::new();
        std::fs::write(&scratch.database, b"").unwrap();
        set_mode(&scratch.database, mode);
        let before = Snapshot::of(&scratch.database);

        let error = refused(&scratch.database, UnsafeFileReason::EmptyNotPrivate);
        let Error::UnsafeFile {
            path,
            owner,
            mode: found,
            ..
        } = &error
        else {
            unreachable!("checked by `refused`");
        };
        let canonical = scratch.database.canonicalize().unwrap();
        assert_eq!(
            (path.as_path(), *owner, *found),
            (canonical.as_path(), before.owner, mode)
        );
        let message = error.to_string();
        assert!(
            message.contains(&canonical.display().to_string())
                && message.contains(&format!("mode {mode:04o}"))
                && message.contains(&format!("uid {}", before.owner)),
            "{message}"
        );
        assert_eq!(Snapshot::of(&scratch.database), before);
        assert_eq!(directory_entries(scratch.dir.path()), ["journal.db"]);
    }

    let scratch = Scratch::new();
    std::fs::write(&scratch.database, b"").unwrap();
    set_mode(&scratch.database, 0o600);
    drop(Journal::open(&scratch.database).unwrap());
    assert_eq!(mode_of(&scratch.database), 0o600);
}

/// Runs `script` under `sh` as `nobody`, with `dir` as its working directory.
fn as_nobody(dir: &Path, script: &str) {
    let mut command = Command::new("sh");
    command
        .args(["-c", script])
        .current_dir(dir)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null());
    let status = spawn(&mut command).wait().unwrap();
    assert!(status.success(), "{script}: {status}");
}

/// A directory every user may create files in, with the sticky bit (as `/tmp`), so `nobody`
/// can plant files in it but not replace ours.
fn shared_directory(scratch: &Scratch) {
    set_mode(scratch.dir.path(), 0o1777);
}

/// A closed journal with one completed execution, so it has content.
fn closed_journal(path: &Path) {
    runtime().block_on(async {
        let journal = Journal::open(path).unwrap();
        let durably_journal::Opened::Running(execution) = journal
            .open_execution(Uuid::new_v4(), "files", "files", &"input")
            .await
            .unwrap()
        else {
            panic!("a new execution is never finished");
        };
        execution.complete(&"done").await.unwrap();
    });
}

/// In a shared directory, another user creates the empty journal file before its user does,
/// with mode 0600 so that only its owner can use it: it is refused all the same (whoever owns
/// it reads what is written to it), and left as it was.
#[test]
fn an_empty_file_of_another_user_is_refused_and_left_as_it_was() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    let scratch = Scratch::new();
    shared_directory(&scratch);
    as_nobody(scratch.dir.path(), "umask 077 && : > journal.db");
    let before = Snapshot::of(&scratch.database);
    assert_eq!((before.owner, before.mode), (NOBODY, 0o600));

    refused(&scratch.database, UnsafeFileReason::EmptyNotPrivate);
    assert_eq!(Snapshot::of(&scratch.database), before);
    assert_eq!(directory_entries(scratch.dir.path()), ["journal.db"]);
}

/// In a shared directory, another user plants a `-wal` or `-shm` beside a journal, open to
/// everyone: SQLite would read a planted WAL into the journal and write every later payload
/// into it. The journal is refused, the planted file is left as it was, and so is the journal.
#[test]
fn a_wal_or_shm_of_another_user_is_refused_and_left_as_it_was() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as another user");
        return;
    }
    for suffix in ["-wal", "-shm"] {
        let scratch = Scratch::new();
        closed_journal(&scratch.database);
        shared_directory(&scratch);
        let planted = sibling(&scratch.database.canonicalize().unwrap(), suffix);
        let name = planted.file_name().unwrap().to_str().unwrap().to_owned();
        as_nobody(
            scratch.dir.path(),
            &format!("umask 000 && printf planted > {name}"),
        );
        let (journal_before, planted_before) =
            (Snapshot::of(&scratch.database), Snapshot::of(&planted));
        assert_eq!((planted_before.owner, planted_before.mode), (NOBODY, 0o666));

        let error = refused(&scratch.database, UnsafeFileReason::ForeignOwner);
        assert!(
            matches!(&error, Error::UnsafeFile { path, owner: NOBODY, .. } if *path == planted),
            "{error:?}"
        );
        assert_eq!(Snapshot::of(&planted), planted_before, "{suffix}");
        assert_eq!(Snapshot::of(&scratch.database), journal_before, "{suffix}");
    }
}

/// A symbolic link in place of the `-wal` or `-shm` is refused, and what it points to is left
/// as it was.
#[test]
fn a_link_in_place_of_the_wal_or_shm_is_refused_and_its_target_left_as_it_was() {
    for suffix in ["-wal", "-shm"] {
        let scratch = Scratch::new();
        closed_journal(&scratch.database);
        let target = scratch.dir.path().join("elsewhere");
        std::fs::write(&target, b"not for the journal").unwrap();
        let before = Snapshot::of(&target);
        let link = sibling(&scratch.database.canonicalize().unwrap(), suffix);
        std::os::unix::fs::symlink(&target, &link).unwrap();

        let error = refused(&scratch.database, UnsafeFileReason::NotRegular);
        assert!(
            matches!(&error, Error::UnsafeFile { path, .. } if *path == link),
            "{error:?}"
        );
        assert_eq!(Snapshot::of(&target), before, "{suffix}");
    }
}

/// Leaves the `-wal` and `-shm` of a journal at `path` behind: a `journal_worker` holds an
/// execution with one recorded step and is killed with SIGKILL. `worker` is the command to run.
fn crashed_holder(mut worker: Command, path: &Path) -> Uuid {
    let id = Uuid::new_v4();
    let mut holder = Held::start(worker.args(["hold", path.to_str().unwrap(), &id.to_string()]));
    assert!(holder.next_line()["held"].is_i64());
    holder.kill();
    for suffix in ["-wal", "-shm"] {
        assert!(
            sibling(path, suffix).exists(),
            "no {suffix} left by the crash"
        );
    }
    id
}

/// Opens the journal at `path` and checks that execution `id` kept its recorded step.
fn reopens_with_its_step(path: &Path, id: Uuid) -> Journal {
    let journal = Journal::open(path).unwrap();
    let steps = journal.steps(id).unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].name, "held");
    journal
}

/// The `-wal` and `-shm` a crash left, made readable and writable by others (by hand, or by an
/// older durably), are tightened to no more than the journal file allows when the journal is
/// opened again: 0600 beside a 0600 journal, 0644 beside a journal its owner made 0644 so that
/// others may inspect it. That journal's own mode is its owner's choice and is kept. Nothing
/// recorded is lost.
#[test]
fn a_wal_and_shm_of_ours_that_others_can_use_are_tightened() {
    for (journal_mode, tightened) in [(0o600, 0o600), (0o644, 0o644)] {
        let scratch = Scratch::new();
        let id = crashed_holder(worker(), &scratch.database);
        set_mode(&scratch.database, journal_mode);
        for suffix in ["-wal", "-shm"] {
            set_mode(&sibling(&scratch.database, suffix), 0o666);
        }

        let journal = reopens_with_its_step(&scratch.database, id);
        for suffix in ["-wal", "-shm"] {
            let path = sibling(&scratch.database, suffix);
            assert_eq!(mode_of(&path), tightened, "{}", path.display());
        }
        assert_eq!(mode_of(&scratch.database), journal_mode);
        drop(journal);
    }
}

/// Root opening a user's journal changes no owner: the user's crashed holder left its `-wal`
/// and `-shm`, loosened; root's open tightens them, and the journal, its WAL and its index
/// still belong to the user, while root holds them and after.
#[test]
fn root_opening_a_users_journal_tightens_without_taking_ownership() {
    if !is_root() {
        eprintln!("skipped: needs root to open another user's journal");
        return;
    }
    let scratch = Scratch::new();
    shared_directory(&scratch);
    let id = crashed_holder(worker_as_nobody(scratch.dir.path()), &scratch.database);
    for suffix in ["-wal", "-shm"] {
        set_mode(&sibling(&scratch.database, suffix), 0o666);
    }

    let journal = reopens_with_its_step(&scratch.database, id);
    for suffix in ["", "-wal", "-shm"] {
        let path = sibling(&scratch.database, suffix);
        assert_eq!(
            (owner_of(&path), mode_of(&path)),
            (NOBODY, 0o600),
            "{}",
            path.display()
        );
    }
    drop(journal);
    assert_eq!(owner_of(&scratch.database), NOBODY);
}

/// A path that is a symbolic link to nothing is refused before anything is created: no target,
/// no WAL, no liveness directory. A link to an existing journal opens that journal at its real
/// path, so its WAL and liveness directory are the target's.
#[test]
fn a_dangling_link_is_refused_and_nothing_is_created() {
    for target in ["missing.db", "/nonexistent-durably-dir/missing.db"] {
        let scratch = Scratch::new();
        let link = scratch.dir.path().canonicalize().unwrap().join("link.db");
        std::os::unix::fs::symlink(target, &link).unwrap();

        let error = Journal::open(&link).unwrap_err();
        assert!(
            matches!(&error, Error::DanglingSymlink { path, target: found }
                if *path == link && found == Path::new(target)),
            "{error:?}"
        );
        assert_eq!(
            directory_entries(scratch.dir.path()),
            ["link.db"],
            "{target}"
        );
    }

    let scratch = Scratch::new();
    closed_journal(&scratch.database);
    let link = scratch.dir.path().join("link.db");
    std::os::unix::fs::symlink("journal.db", &link).unwrap();
    let journal = Journal::open(&link).unwrap();
    assert_eq!(journal.path(), scratch.database.canonicalize().unwrap());
    let names = directory_entries(scratch.dir.path());
    assert!(
        names
            .iter()
            .all(|name| !name.starts_with("link.db") || name == "link.db"),
        "{names:?}"
    );
    drop(journal);
}
