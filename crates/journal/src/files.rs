//! The journal's files are private from the first byte: the database file is created by durably
//! itself, exclusively and with mode 0600, before SQLite opens it; a file found in its place, and
//! the `-wal`, `-shm` and `-journal` files SQLite keeps beside it, are checked before SQLite
//! reads or writes them (docs/design.md, "Files are private").
//!
//! Nothing here opens the database file once it exists, nor any file SQLite may hold, with a
//! descriptor that can carry a POSIX lock: closing any such descriptor drops every POSIX lock
//! this process holds on the file, SQLite's included. Existing files are inspected with
//! `lstat`, and changed only through an `O_PATH` descriptor, whose close drops no lock.

use std::ffi::CString;
use std::fs::{Metadata, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result, UnsafeFileReason};

/// The mode of a database file durably creates.
const CREATED_MODE: u32 = 0o600;

/// The permission bits of a mode that give access to the group or to others.
const SHARED_BITS: u32 = 0o077;

/// How many times creating the database is tried when the file that failed the exclusive create
/// is gone when looked at (someone deleted it in between).
const CREATE_ATTEMPTS_MAX: u32 = 3;

/// The files SQLite keeps beside a database: the WAL, its shared-memory index, and the rollback
/// journal it uses before the switch to WAL.
const SIBLING_SUFFIXES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The owner and permission bits of the database file, against which its siblings are judged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MainFile {
    owner: u32,
    mode: u32,
}

/// Whether SQLite is known to have the WAL and its index open, so that both must exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Siblings {
    /// Before SQLite opened the database: any of them may be missing.
    MayBeMissing,
    /// After a read in WAL mode: SQLite holds the WAL and the index open, and deletes them only
    /// when the last connection closes, so a missing one was removed by someone else.
    Open,
    /// A reader's look: any may be missing, and one others may use is left as it is, because a
    /// reader changes nothing (the next writer's open tightens it).
    Reading,
}

/// Creates the database file at `path` (absolute, its directory resolved) exclusively and
/// private, or checks the file already there. Nothing is created when `path` is a symbolic link.
///
/// # Errors
/// [`Error::DanglingSymlink`] for a link, [`Error::UnsafeFile`] for a file that is not a
/// regular file or, empty, is not private to this user, [`Error::ReadOnly`] when the directory
/// refuses the file, [`Error::Io`] for other file-system errors.
pub(crate) fn create_or_adopt(path: &Path) -> Result<MainFile> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match create(path) {
            Ok(main) => return Ok(main),
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
            Err(error) => return Err(create_error(path, error)),
        }
        // Deleted since the create failed: create it after all, a bounded number of times.
        let vanished = |error: &std::io::Error| {
            error.kind() == ErrorKind::NotFound && attempts < CREATE_ATTEMPTS_MAX
        };
        match std::fs::symlink_metadata(path) {
            Ok(found) => return adopt(path, &found),
            Err(error) if vanished(&error) => {}
            Err(source) => {
                return Err(Error::Io {
                    action: "look at the database file",
                    path: path.to_owned(),
                    source,
                });
            }
        }
    }
}

/// Creates the file with `O_CREAT | O_EXCL` and mode 0600, so it never exists with another
/// mode: no other user can open it between its creation and a later `chmod`, and no crash can
/// leave it readable. The umask can only take bits away from 0600; should it take the owner's
/// too, the new file's own descriptor gives them back before SQLite opens it.
fn create(path: &Path) -> std::io::Result<MainFile> {
    // With O_EXCL the kernel follows no symbolic link in the last component: a link there,
    // dangling or not, fails the create with AlreadyExists.
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(CREATED_MODE)
        .open(path)?;
    let created = file.metadata()?;
    if created.mode() & 0o7777 != CREATED_MODE {
        file.set_permissions(std::fs::Permissions::from_mode(CREATED_MODE))?;
    }
    // Closing this descriptor drops no lock: the file is new, so no SQLite connection of this
    // process can have it open.
    Ok(MainFile {
        owner: created.uid(),
        mode: CREATED_MODE,
    })
}

fn create_error(path: &Path, source: std::io::Error) -> Error {
    match source.kind() {
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => Error::ReadOnly {
            path: path.to_owned(),
            reason: format!("cannot create it: {source}"),
        },
        _ => Error::Io {
            action: "create the database file",
            path: path.to_owned(),
            source,
        },
    }
}

/// Checks a database file that was already there.
///
/// An empty file is a journal nobody has written yet, so whoever created it chose its owner and
/// mode: it is used only when it belongs to this process's user and nobody else may read or
/// write it. A file that was readable for a while may be held open by another user, and no
/// `chmod` takes that descriptor back, so a loose empty file is refused, not tightened. Another
/// durably process creating the same file at this moment made it this way, and passes.
///
/// A non-empty file is left as it is: its mode is its owner's choice (a journal others may
/// inspect is 0644), and SQLite's header checks come next.
fn adopt(path: &Path, found: &Metadata) -> Result<MainFile> {
    if found.file_type().is_symlink() {
        // `path` comes with its links resolved, so a link here does not resolve.
        return Err(Error::DanglingSymlink {
            path: path.to_owned(),
            target: std::fs::read_link(path).unwrap_or_default(),
        });
    }
    if !found.file_type().is_file() {
        return Err(unsafe_file(path, found, UnsafeFileReason::NotRegular));
    }
    if found.len() == 0 && (found.uid() != effective_uid() || found.mode() & SHARED_BITS != 0) {
        return Err(unsafe_file(path, found, UnsafeFileReason::EmptyNotPrivate));
    }
    Ok(MainFile {
        owner: found.uid(),
        mode: found.mode() & 0o777,
    })
}

/// The longest database path SQLite opens, in bytes: the unix VFS's `mxPathname` (512) less
/// the 8 bytes of `-journal`, which SQLite requires room for whatever the journal mode.
const SQLITE_PATH_BYTES_MAX: usize = 512 - "-journal".len();

/// Refuses a database path SQLite would refuse for its length, which it reports only as
/// "unable to open database file". `path` is absolute, with its links resolved, as SQLite
/// makes it.
///
/// # Errors
/// [`Error::PathTooLong`].
pub(crate) fn check_path_length(path: &Path) -> Result<()> {
    let bytes = path.as_os_str().len();
    if bytes > SQLITE_PATH_BYTES_MAX {
        return Err(Error::PathTooLong {
            path: path.to_owned(),
            bytes,
            max: SQLITE_PATH_BYTES_MAX,
        });
    }
    Ok(())
}

/// Whether this process, by its effective ids, may access the file at `path` as `access` says
/// (`libc::R_OK`, `libc::W_OK`). Asked without opening the file, so no lock is dropped.
fn may(path: &Path, access: libc::c_int) -> bool {
    let Ok(name) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    unsafe { libc::faccessat(libc::AT_FDCWD, name.as_ptr(), access, libc::AT_EACCESS) == 0 }
}

/// Whether this process may write the file at `path` and create files in its directory, as
/// SQLite must to open it for writing in WAL mode.
pub(crate) fn writable(path: &Path) -> bool {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    may(path, libc::W_OK) && may(directory, libc::W_OK)
}

/// Refuses a file this process may not read, naming it: SQLite would say only "unable to open
/// database file", for the database or for its `-wal` or `-shm` alike.
///
/// # Errors
/// [`Error::Io`] with `PermissionDenied`.
pub(crate) fn check_readable(path: &Path) -> Result<()> {
    if may(path, libc::R_OK) {
        return Ok(());
    }
    Err(Error::Io {
        action: "read",
        path: path.to_owned(),
        source: std::io::Error::from(ErrorKind::PermissionDenied),
    })
}

/// A reader's look at the database file at `path` (its links resolved), before SQLite opens
/// it: it must be a regular file, and not empty (an empty file holds no journal yet, and only a
/// writer makes it one). Nothing is created or changed.
///
/// # Errors
/// [`Error::UnsafeFile`] for a file that is not a regular file, [`Error::NotAJournal`] for an
/// empty one, [`Error::Io`] when it cannot be looked at.
pub(crate) fn check_to_read(path: &Path) -> Result<MainFile> {
    let found = std::fs::symlink_metadata(path).map_err(|source| Error::Io {
        action: "look at the database file",
        path: path.to_owned(),
        source,
    })?;
    if !found.file_type().is_file() {
        return Err(unsafe_file(path, &found, UnsafeFileReason::NotRegular));
    }
    if found.len() == 0 {
        return Err(Error::NotAJournal {
            path: path.to_owned(),
            reason: "the file is empty".to_owned(),
        });
    }
    Ok(MainFile {
        owner: found.uid(),
        mode: found.mode() & 0o777,
    })
}

/// Checks the `-wal`, `-shm` and `-journal` files beside the database at `path`.
///
/// SQLite reads and writes these files whoever owns them: a WAL or a journal planted by another
/// user would be read into the database, and would receive every payload written after. So each
/// must be a regular file owned by the database file's owner or by this process's user (root
/// opening a user's journal: SQLite gives the files it creates the database's owner). One that
/// grants access the database file does not is tightened to the database's bits, never
/// loosened, and without changing its owner; except on a reader's look ([`Siblings::Reading`]),
/// which changes nothing.
///
/// # Errors
/// [`Error::UnsafeFile`] for a link, a special file or a foreign owner; [`Error::Io`] when a
/// file cannot be inspected or tightened, or (with [`Siblings::Open`]) the WAL or its index is
/// missing.
pub(crate) fn check_siblings(path: &Path, main: MainFile, siblings: Siblings) -> Result<()> {
    for suffix in SIBLING_SUFFIXES {
        let sibling = sibling(path, suffix);
        let found = match std::fs::symlink_metadata(&sibling) {
            Ok(found) => found,
            Err(error)
                if error.kind() == ErrorKind::NotFound
                    && (siblings != Siblings::Open || suffix == "-journal") =>
            {
                continue;
            }
            Err(source) => {
                return Err(Error::Io {
                    action: "check the file beside the database",
                    path: sibling,
                    source,
                });
            }
        };
        check_sibling(&sibling, &found, main, siblings)?;
    }
    Ok(())
}

fn check_sibling(path: &Path, found: &Metadata, main: MainFile, siblings: Siblings) -> Result<()> {
    if !found.file_type().is_file() {
        return Err(unsafe_file(path, found, UnsafeFileReason::NotRegular));
    }
    if found.uid() != main.owner && found.uid() != effective_uid() {
        return Err(unsafe_file(path, found, UnsafeFileReason::ForeignOwner));
    }
    let mode = found.mode() & 0o777;
    if mode & !main.mode == 0 || siblings == Siblings::Reading {
        return Ok(());
    }
    tighten(path, found, mode & main.mode).map_err(|source| Error::Io {
        action: "take group and other access away from",
        path: path.to_owned(),
        source,
    })
}

/// Sets the permission bits of the file at `path`, which `lstat` found as `found`, to `mode`.
///
/// The file is reached through an `O_PATH | O_NOFOLLOW` descriptor and changed through
/// `/proc/self/fd`: no link is followed, the file changed is the one checked (same device and
/// inode), and closing the descriptor drops none of SQLite's POSIX locks on it.
fn tighten(path: &Path, found: &Metadata, mode: u32) -> std::io::Result<()> {
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(path)?;
    let reached = handle.metadata()?;
    if !reached.file_type().is_file()
        || (reached.dev(), reached.ino()) != (found.dev(), found.ino())
    {
        return Err(std::io::Error::other(
            "the file was replaced while it was being checked",
        ));
    }
    let through = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
    std::fs::set_permissions(through, std::fs::Permissions::from_mode(mode))
}

fn unsafe_file(path: &Path, found: &Metadata, reason: UnsafeFileReason) -> Error {
    Error::UnsafeFile {
        path: path.to_owned(),
        owner: found.uid(),
        mode: found.mode() & 0o7777,
        reason,
    }
}

/// The path of the file SQLite keeps beside the database under `suffix`.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;
    use std::path::Path;

    use super::{MainFile, Siblings, check_siblings, effective_uid, sibling};
    use crate::error::Error;

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o777
    }

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn ours(mode: u32) -> MainFile {
        MainFile {
            owner: effective_uid(),
            mode,
        }
    }

    #[test]
    fn a_wal_or_index_missing_once_sqlite_holds_them_is_an_error_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        check_siblings(&path, ours(0o600), Siblings::MayBeMissing).unwrap();
        let error = check_siblings(&path, ours(0o600), Siblings::Open).unwrap_err();
        assert!(
            matches!(&error, Error::Io { path: missing, source, .. }
                if *missing == sibling(&path, "-wal")
                    && source.kind() == std::io::ErrorKind::NotFound),
            "{error:?}"
        );
    }

    #[test]
    fn a_sibling_is_narrowed_to_the_journals_bits_and_never_widened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let (wal, shm) = (sibling(&path, "-wal"), sibling(&path, "-shm"));
        for (file, mode) in [(&wal, 0o606), (&shm, 0o600)] {
            std::fs::write(file, b"x").unwrap();
            set_mode(file, mode);
        }
        check_siblings(&path, ours(0o640), Siblings::Open).unwrap();
        assert_eq!((mode_of(&wal), mode_of(&shm)), (0o600, 0o600));
    }

    #[test]
    fn a_readers_look_checks_the_siblings_and_changes_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        check_siblings(&path, ours(0o600), Siblings::Reading).unwrap();
        let wal = sibling(&path, "-wal");
        std::fs::write(&wal, b"x").unwrap();
        set_mode(&wal, 0o606);
        check_siblings(&path, ours(0o600), Siblings::Reading).unwrap();
        assert_eq!(mode_of(&wal), 0o606, "a reader tightened the WAL");
        std::fs::remove_file(&wal).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &wal).unwrap();
        let error = check_siblings(&path, ours(0o600), Siblings::Reading).unwrap_err();
        assert!(matches!(error, Error::UnsafeFile { .. }), "{error:?}");
    }

    /// Whether a lock of this process's SQLite on byte `offset` of `file` is still held, asked
    /// as an open-file-description lock, which conflicts with this process's own POSIX locks.
    /// The probe's descriptor stays open until `keep` is dropped: closing it would drop them.
    fn locked(file: &Path, offset: i64, keep: &mut Vec<std::fs::File>) -> bool {
        let probe = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(file)
            .unwrap();
        // SAFETY: a zeroed flock is a valid argument, and the descriptor is open.
        let mut query: libc::flock = unsafe { std::mem::zeroed() };
        query.l_type = libc::F_WRLCK as i16;
        query.l_whence = libc::SEEK_SET as i16;
        query.l_start = offset;
        query.l_len = 1;
        // SAFETY: F_OFD_GETLK fills the flock it is given.
        let rc = unsafe { libc::fcntl(probe.as_raw_fd(), libc::F_OFD_GETLK, &mut query) };
        assert_eq!(rc, 0, "F_OFD_GETLK failed");
        keep.push(probe);
        query.l_type != libc::F_UNLCK as i16
    }

    /// Tightening goes through an `O_PATH` descriptor: closing it drops none of SQLite's POSIX
    /// locks on the file, where closing any other descriptor of it would drop them all.
    #[test]
    fn tightening_the_index_keeps_sqlites_locks_on_it() {
        /// The WAL index's write lock: held from a write transaction's first write to its end.
        const WAL_WRITE_LOCK_OFFSET: i64 = 120;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; CREATE TABLE t (x); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);",
        )
        .unwrap();
        let shm = sibling(&path, "-shm");
        let mut probes = Vec::new();
        assert!(locked(&shm, WAL_WRITE_LOCK_OFFSET, &mut probes));
        set_mode(&shm, 0o666);

        check_siblings(&path, ours(0o600), Siblings::Open).unwrap();
        assert_eq!(mode_of(&shm), 0o600);
        assert!(
            locked(&shm, WAL_WRITE_LOCK_OFFSET, &mut probes),
            "tightening dropped SQLite's lock"
        );
        // The probe sees a drop: closing a plain descriptor drops the lock.
        probes.clear();
        assert!(!locked(&shm, WAL_WRITE_LOCK_OFFSET, &mut probes));
        drop(conn);
    }
}
