//! The liveness directory as an open, checked directory.
//!
//! The directory is checked once, on the descriptor that will be used (`O_NOFOLLOW |
//! O_DIRECTORY`, then `fstat`), and every file operation after that runs relative to that
//! descriptor (`openat`, `renameat`, `unlinkat`). Whatever is swapped in at the path after the
//! check, a symlink or another user's directory, is never followed: the operations stay in the
//! directory that passed.
//!
//! Who is trusted: this process's effective user, and the owner of the journal file (who can
//! rewrite the journal anyway, so trusting them with its liveness evidence gives nothing away).
//! A directory owned by anyone else, or one that group or others may write to, is refused: its
//! owner or its writers could forge the evidence of a holder's life or death.

use std::fmt;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

/// The permission bits that let group or others write to a directory.
const GROUP_OTHER_WRITE: u32 = 0o022;
/// The mode of a new liveness directory.
const DIR_MODE: u32 = 0o700;
/// The mode of a new liveness file.
const FILE_MODE: u32 = 0o600;

/// Why a liveness directory was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The path is a symbolic link. It is never followed: whoever controls the link would choose
    /// the directory whose files count as evidence, and whose files root's cleanup removes.
    Symlink,
    /// The directory belongs to a user who is neither this process's effective user nor the
    /// journal file's owner.
    Owner {
        /// The directory's owner.
        owner: u32,
        /// This process's effective user.
        euid: u32,
        /// The journal file's owner, when the directory belongs to a journal file that exists.
        journal_owner: Option<u32>,
    },
    /// Group or others may write to the directory, so they could replace the files in it.
    Writable {
        /// The directory's permission bits.
        mode: u32,
    },
    /// The directory does not exist, and this process may not create it: the journal file
    /// belongs to another user, and only that user or root can make the directory theirs.
    ForeignJournal {
        /// The journal file's owner.
        journal_owner: u32,
        /// This process's effective user.
        euid: u32,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Symlink => write!(f, "it is a symbolic link, which is never followed"),
            Self::Owner {
                owner,
                euid,
                journal_owner: Some(journal_owner),
            } if journal_owner != euid => write!(
                f,
                "it belongs to uid {owner}, but only this process's uid {euid} or the journal \
                 file's owner, uid {journal_owner}, may own it"
            ),
            Self::Owner { owner, euid, .. } => write!(
                f,
                "it belongs to uid {owner}, but only this process's uid {euid} may own it"
            ),
            Self::Writable { mode } => write!(
                f,
                "its mode {mode:04o} lets group or others write to it, so they could forge \
                 liveness files"
            ),
            Self::ForeignJournal {
                journal_owner,
                euid,
            } => write!(
                f,
                "it does not exist, and this process (uid {euid}) may not create it for a \
                 journal file that belongs to uid {journal_owner}: only that user or root may"
            ),
        }
    }
}

/// Why a liveness directory could not be opened.
#[derive(Debug)]
pub(crate) enum DirError {
    /// Nothing exists at the path.
    Missing,
    /// Something exists at the path, and it is not trusted.
    Refused(Refusal),
    /// The system refused (permissions, I/O).
    Io(std::io::Error),
}

impl From<Errno> for DirError {
    fn from(errno: Errno) -> Self {
        Self::Io(errno.into())
    }
}

/// Opens the directory at `path` without following a symlink there. `symlink_metadata` names
/// what is wrong; the checks that count are made on the descriptor, so a swap between the two
/// cannot slip through.
fn open_directory(path: &Path) -> Result<OwnedFd, DirError> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            return Err(DirError::Refused(Refusal::Symlink));
        }
        Ok(metadata) if !metadata.is_dir() => return Err(not_a_directory()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(DirError::Missing);
        }
        Err(error) => return Err(DirError::Io(error)),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(CWD, path, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(DirError::Refused(Refusal::Symlink)),
        Err(Errno::NOTDIR) => Err(not_a_directory()),
        Err(Errno::NOENT) => Err(DirError::Missing),
        Err(errno) => Err(errno.into()),
    }
}

/// Something that is not a directory is in the way: an error of the system's kind, not a
/// question of trust.
fn not_a_directory() -> DirError {
    DirError::Io(std::io::Error::from(std::io::ErrorKind::NotADirectory))
}

/// The users a liveness directory, and so its files, may belong to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owners {
    euid: u32,
    /// The journal file's owner and group, when the directory belongs to a journal that exists.
    journal: Option<(u32, u32)>,
}

impl Owners {
    /// The owners for the liveness directory of `database` (`None`: a directory of its own).
    /// The journal file is looked up through symlinks, as SQLite opens it.
    pub(crate) fn of(database: Option<&Path>) -> Self {
        let journal = database
            .and_then(|database| std::fs::metadata(database).ok())
            .map(|metadata| (metadata.uid(), metadata.gid()));
        Self {
            euid: rustix::process::geteuid().as_raw(),
            journal,
        }
    }

    fn trusts(&self, uid: u32) -> bool {
        uid == self.euid || self.journal.is_some_and(|(owner, _)| owner == uid)
    }

    /// Who a directory this process creates must belong to: `None` when that is this process
    /// itself, the owner and group to hand it to when root creates it for a journal's owner.
    fn creation_owner(&self) -> Result<Option<(u32, u32)>, Refusal> {
        match self.journal {
            Some((owner, _)) if owner == self.euid => Ok(None),
            Some(journal) if self.euid == 0 => Ok(Some(journal)),
            Some((journal_owner, _)) => Err(Refusal::ForeignJournal {
                journal_owner,
                euid: self.euid,
            }),
            None => Ok(None),
        }
    }

    fn refuse_owner(&self, owner: u32) -> Refusal {
        Refusal::Owner {
            owner,
            euid: self.euid,
            journal_owner: self.journal.map(|(owner, _)| owner),
        }
    }
}

/// What opening a file in the directory found.
#[derive(Debug)]
pub(crate) enum Entry {
    /// A regular file owned by the directory's owner, open for reading.
    File(File),
    /// No such name.
    Missing,
    /// Something no holder makes: a symlink, a FIFO or another non-regular file, or a file of
    /// another user. It is evidence of nothing; the reason says what it is.
    NotEvidence(String),
    /// The file could not be opened.
    Unreadable(std::io::Error),
}

/// A liveness directory, open, that passed the checks of [`Owners`].
#[derive(Debug)]
pub(crate) struct CheckedDir {
    fd: OwnedFd,
    path: PathBuf,
    owner: u32,
    group: u32,
}

impl CheckedDir {
    /// Opens and checks the directory at `path`, never creating it.
    pub(crate) fn open(path: &Path, owners: &Owners) -> Result<Self, DirError> {
        let fd = open_directory(path)?;
        Self::check(fd, path, owners)
    }

    /// Opens and checks the directory at `path`, creating it (mode 0700) if it does not exist.
    /// A directory that root creates for a journal of another user is handed to that user
    /// (`fchown` on the descriptor, which follows no link), so the service that owns the
    /// journal is not locked out of it.
    pub(crate) fn create_or_open(path: &Path, owners: &Owners) -> Result<Self, DirError> {
        match Self::open(path, owners) {
            Err(DirError::Missing) => {}
            opened => return opened,
        }
        let hand_to = owners.creation_owner().map_err(DirError::Refused)?;
        let vanished = || DirError::Io(std::io::Error::from(std::io::ErrorKind::NotFound));
        // Not recursive: the directory sits beside the journal, whose directory exists.
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(path) {
            Ok(()) => {}
            // Another process created it first; it is checked like any existing directory.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                return match Self::open(path, owners) {
                    Err(DirError::Missing) => Err(vanished()),
                    opened => opened,
                };
            }
            Err(error) => return Err(DirError::Io(error)),
        }
        let fd = match open_directory(path) {
            Err(DirError::Missing) => return Err(vanished()),
            opened => opened?,
        };
        // Set up before the check: the umask (or a default ACL) must not decide the mode.
        if rustix::fs::fstat(&fd)?.st_uid == owners.euid {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(DIR_MODE))?;
            if let Some((owner, group)) = hand_to {
                rustix::fs::fchown(&fd, Some(Uid::from_raw(owner)), Some(Gid::from_raw(group)))?;
            }
        }
        Self::check(fd, path, owners)
    }

    /// Checks the open directory `fd` against `owners` and its mode.
    fn check(fd: OwnedFd, path: &Path, owners: &Owners) -> Result<Self, DirError> {
        let stat = rustix::fs::fstat(&fd)?;
        if !owners.trusts(stat.st_uid) {
            return Err(DirError::Refused(owners.refuse_owner(stat.st_uid)));
        }
        if stat.st_mode & GROUP_OTHER_WRITE != 0 {
            return Err(DirError::Refused(Refusal::Writable {
                mode: stat.st_mode & 0o7777,
            }));
        }
        Ok(Self {
            fd,
            path: path.to_owned(),
            owner: stat.st_uid,
            group: stat.st_gid,
        })
    }

    /// Where the directory is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Creates `name` (`O_CREAT | O_EXCL`, mode 0600) for writing. A file root creates in
    /// another user's directory is handed to that user, so that it counts as evidence.
    pub(crate) fn create_new(&self, name: &str) -> std::io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(FILE_MODE))?;
        if rustix::process::geteuid().as_raw() != self.owner {
            let handed = rustix::fs::fchown(
                &fd,
                Some(Uid::from_raw(self.owner)),
                Some(Gid::from_raw(self.group)),
            );
            if let Err(errno) = handed {
                let _ = self.remove(name);
                return Err(errno.into());
            }
        }
        Ok(File::from(fd))
    }

    /// Opens `name` for a probe: `O_NOFOLLOW` (a symlink is not followed), `O_NONBLOCK` (a FIFO
    /// does not wait for a writer), and then only a regular file owned by the directory's owner
    /// is returned.
    pub(crate) fn open_evidence(&self, name: &str) -> Entry {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Entry::Missing,
            Err(Errno::LOOP) => return Entry::NotEvidence("it is a symbolic link".to_owned()),
            // A socket cannot be opened at all.
            Err(Errno::NXIO) => return Entry::NotEvidence("it is not a regular file".to_owned()),
            Err(errno) => return Entry::Unreadable(errno.into()),
        };
        let stat = match rustix::fs::fstat(&fd) {
            Ok(stat) => stat,
            Err(errno) => return Entry::Unreadable(errno.into()),
        };
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::RegularFile {
            return Entry::NotEvidence(format!("it is not a regular file but a {kind:?}"));
        }
        if stat.st_uid != self.owner {
            return Entry::NotEvidence(format!(
                "it belongs to uid {}, not to the directory's owner, uid {}",
                stat.st_uid, self.owner
            ));
        }
        Entry::File(File::from(fd))
    }

    /// Renames `from` to `to`, both in this directory.
    pub(crate) fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Removes the file `name` from this directory.
    pub(crate) fn remove(&self, name: &str) -> std::io::Result<()> {
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// The names in this directory that are UTF-8 (liveness files always are).
    pub(crate) fn names(&self) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
}
