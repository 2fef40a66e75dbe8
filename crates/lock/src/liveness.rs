//! Per-instance liveness files, each held with an advisory `flock` for the instance's life.
//!
//! The kernel drops a `flock` when the last descriptor of its open file description closes,
//! which happens at process exit however the process died. So a liveness file that someone else
//! can lock is evidence that its instance is gone, with no guessing from timestamps. The
//! directory and its files are trusted only as far as [`crate::checked_dir`] allows: a file
//! that a holder could not have made (a symlink, a FIFO, a file of another user) is evidence
//! of nothing.

use std::collections::HashSet;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::checked_dir::{CheckedDir, DirError, Entry, Owners};
use crate::error::{Error, Result};

const LIVE_SUFFIX: &str = ".live";
const PENDING_PREFIX: &str = "pending-";
/// How many times [`LivenessDir::hold`] makes its file again after a cleaner removed it.
const HOLD_ATTEMPTS_MAX: u32 = 16;

/// The directory of liveness files that belongs to one database: `<database>.durably-live/`.
///
/// The directory is used only when it is a real directory (not a symlink), owned by this
/// process's effective user or by the journal file's owner, and not writable by group or
/// others; otherwise it is refused with [`Error::LivenessDirRefused`]. Only [`Self::hold`]
/// creates it; [`Self::probe`] and [`Self::remove_dead`] never do.
#[derive(Debug, Clone)]
pub struct LivenessDir {
    path: PathBuf,
    /// The journal file the directory belongs to: its owner may own the directory, and is the
    /// owner a directory created by root is handed to.
    database: Option<PathBuf>,
}

/// What probing another instance's liveness file found.
#[derive(Debug)]
pub enum Probe {
    /// Someone holds the lock: the instance, a process it forked, or whoever else opened the
    /// file.
    Held,
    /// The lock could be taken: nobody holds the file open locked.
    Free,
    /// No file: the instance used another directory, or its file was already cleaned up.
    Missing,
    /// The file or its directory is not one a holder makes (a symlink, a FIFO or another
    /// non-regular file, a file of another user, a refused directory): evidence of nothing.
    Untrusted(String),
    /// The file could not be probed.
    Unreadable(std::io::Error),
}

/// This instance's own liveness file, locked until dropped.
#[derive(Debug)]
pub struct LivenessFile {
    path: PathBuf,
    name: String,
    /// The checked directory the file was made in; the file is removed from it on drop.
    dir: CheckedDir,
    // Holds the flock; the lock is released when this descriptor closes.
    _file: File,
}

impl LivenessDir {
    /// The liveness directory beside `database`. Two processes that name the same database by
    /// different paths must canonicalize first, or they will look in different directories.
    pub fn beside(database: &Path) -> Self {
        let mut name = database.file_name().unwrap_or_default().to_owned();
        name.push(".durably-live");
        Self {
            path: database.with_file_name(name),
            database: Some(database.to_owned()),
        }
    }

    /// A liveness directory at an explicit path, belonging to no journal file: only this
    /// process's effective user may own it.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            database: None,
        }
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn owners(&self) -> Owners {
        Owners::of(self.database.as_deref())
    }

    fn error(&self, error: DirError) -> Error {
        let path = self.path.clone();
        match error {
            DirError::Missing => Error::LivenessDir {
                path,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            },
            DirError::Refused(reason) => Error::LivenessDirRefused { path, reason },
            DirError::Io(source) => Error::LivenessDir { path, source },
        }
    }

    /// Creates (mode 0700) the directory if it is missing, and this instance's file in it, and
    /// locks the file. A directory that root creates beside another user's journal is handed to
    /// that user (the journal's owner), so the service that owns the journal can still use it.
    ///
    /// The file is created and locked under a pending name and only then renamed, so a cleaner
    /// never sees an unlocked file under a live instance's name. A cleaner may still lock and
    /// remove the pending file between its creation and our lock; the rename then fails (or the
    /// lock would block), and the file is made again under a fresh pending name, so that no
    /// path is ever created twice and a late cleaner cannot remove the new one.
    ///
    /// # Errors
    /// [`Error::LivenessDirRefused`] when the directory is not trusted (see [`LivenessDir`]) or
    /// may not be created by this process; [`Error::LivenessDir`] when the directory or the
    /// file cannot be created or locked.
    pub fn hold(&self, instance_id: &Uuid) -> Result<LivenessFile> {
        let dir =
            CheckedDir::create_or_open(&self.path, &self.owners()).map_err(|e| self.error(e))?;
        let name = live_name(instance_id);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_hold(&dir, instance_id, attempt)? {
                Some(file) => {
                    return Ok(LivenessFile {
                        path: self.path.join(&name),
                        name,
                        dir,
                        _file: file,
                    });
                }
                None if attempt < HOLD_ATTEMPTS_MAX => {}
                None => {
                    return Err(Error::LivenessDir {
                        path: self.path.join(&name),
                        source: std::io::Error::other(format!(
                            "cleaners removed the new liveness file {attempt} times in a row"
                        )),
                    });
                }
            }
        }
    }

    /// One attempt of [`Self::hold`]: `None` when a cleaner removed the pending file first.
    fn try_hold(&self, dir: &CheckedDir, instance_id: &Uuid, attempt: u32) -> Result<Option<File>> {
        let fail = |name: &str| {
            let path = self.path.join(name);
            move |source| Error::LivenessDir { path, source }
        };
        let pending = format!("{PENDING_PREFIX}{instance_id}-{attempt}");
        // `O_EXCL`: this name is ours alone, so whatever the rename below moves is our file.
        let file = dir.create_new(&pending).map_err(fail(&pending))?;
        match file.try_lock() {
            Ok(()) => {}
            // A cleaner holds it for the moment it takes to remove it.
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(source)) => {
                let _ = dir.remove(&pending);
                return Err(fail(&pending)(source));
            }
        }
        // Only the cleaner ([`Self::remove_dead`]) ever locks another instance's pending file,
        // and it removes the file before unlocking, so if the pending name still exists now that
        // we hold the lock, nobody else ever locked it, and nobody can until this file closes.
        let live = live_name(instance_id);
        match dir.rename(&pending, &live) {
            Ok(()) => Ok(Some(file)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => {
                let _ = dir.remove(&pending);
                Err(fail(&live)(source))
            }
        }
    }

    /// Probes the liveness file of `instance_id` by trying to lock it. The file is left in
    /// place: while a lock row still names the instance, the free file is the evidence of its
    /// death (the only evidence for a holder in another pid namespace).
    ///
    /// A probe never creates the directory or any file and never writes, so a program that
    /// only reads a journal may judge holders with it (through a [`crate::Judge`] and no
    /// [`crate::Locker`]). A file a holder could not have made, or a refused directory, is
    /// [`Probe::Untrusted`]; a FIFO does not block the probe.
    pub fn probe(&self, instance_id: &Uuid) -> Probe {
        match CheckedDir::open(&self.path, &self.owners()) {
            Ok(dir) => probe_in(&dir, &live_name(instance_id), Removal::Keep),
            Err(DirError::Missing) => Probe::Missing,
            Err(DirError::Refused(reason)) => Probe::Untrusted(format!(
                "the liveness directory {} is refused: {reason}",
                self.path.display()
            )),
            Err(DirError::Io(error)) => Probe::Unreadable(error),
        }
    }

    /// Removes every liveness file whose instance is gone, except those of instances in
    /// `still_named` (instances that lock rows still name: their file is the evidence a later
    /// judgement needs). Returns how many were removed. Never creates the directory; an entry
    /// that is not a regular file of the directory's owner is left alone.
    ///
    /// # Errors
    /// [`Error::LivenessDirRefused`] when the directory is not trusted, [`Error::LivenessDir`]
    /// when it cannot be listed.
    pub fn remove_dead(&self, still_named: &HashSet<Uuid>) -> Result<usize> {
        let dir = match CheckedDir::open(&self.path, &self.owners()) {
            Ok(dir) => dir,
            Err(DirError::Missing) => return Ok(0),
            Err(error) => return Err(self.error(error)),
        };
        let names = dir.names().map_err(|source| Error::LivenessDir {
            path: self.path.clone(),
            source,
        })?;
        let mut removed = 0;
        for name in names {
            // Pending files belong to instances between create and rename; a crash there leaves
            // one behind, which is free and so removed like any other.
            let named = name
                .strip_suffix(LIVE_SUFFIX)
                .and_then(|stem| Uuid::parse_str(stem).ok())
                .is_some_and(|instance| still_named.contains(&instance));
            if named || !(name.ends_with(LIVE_SUFFIX) || name.starts_with(PENDING_PREFIX)) {
                continue;
            }
            match probe_in(&dir, &name, Removal::Remove) {
                Probe::Free => removed += 1,
                Probe::Untrusted(reason) => {
                    tracing::warn!(
                        directory = %dir.path().display(), name, reason,
                        "left an entry of the liveness directory in place"
                    );
                }
                Probe::Held | Probe::Missing | Probe::Unreadable(_) => {}
            }
        }
        Ok(removed)
    }
}

fn live_name(instance_id: &Uuid) -> String {
    format!("{instance_id}{LIVE_SUFFIX}")
}

/// Whether a probe that finds a file free removes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    Keep,
    Remove,
}

fn probe_in(dir: &CheckedDir, name: &str, removal: Removal) -> Probe {
    let file = match dir.open_evidence(name) {
        Entry::File(file) => file,
        Entry::Missing => return Probe::Missing,
        Entry::NotEvidence(reason) => {
            return Probe::Untrusted(format!("its liveness file {name}: {reason}"));
        }
        Entry::Unreadable(error) => return Probe::Unreadable(error),
    };
    match file.try_lock() {
        Ok(()) => {
            // Unlinking while holding the lock: a concurrent prober either saw the file before
            // (and will also find it free) or finds it missing.
            if removal == Removal::Remove {
                let _ = dir.remove(name);
            }
            Probe::Free
        }
        Err(TryLockError::WouldBlock) => Probe::Held,
        Err(TryLockError::Error(error)) => Probe::Unreadable(error),
    }
}

impl LivenessFile {
    /// Where this instance's liveness file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LivenessFile {
    fn drop(&mut self) {
        // Removed before the descriptor closes, so nobody sees it unlocked under this name.
        let _ = self.dir.remove(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checked_dir::Refusal;

    #[test]
    fn a_held_file_probes_held_even_from_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let liveness = LivenessDir::beside(&dir.path().join("j.db"));
        let id = Uuid::new_v4();
        let held = liveness.hold(&id).unwrap();
        assert!(matches!(liveness.probe(&id), Probe::Held));
        assert!(held.path().ends_with(format!("{id}.live")));
        drop(held);
        assert!(matches!(liveness.probe(&id), Probe::Missing));
    }

    #[test]
    fn a_file_left_unlocked_is_free_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let liveness = LivenessDir::at(dir.path());
        let id = Uuid::new_v4();
        std::fs::write(dir.path().join(format!("{id}.live")), b"").unwrap();
        std::fs::write(dir.path().join("pending-x"), b"").unwrap();
        let keep = liveness.hold(&Uuid::new_v4()).unwrap();
        let named = Uuid::new_v4();
        std::fs::write(dir.path().join(format!("{named}.live")), b"").unwrap();
        assert!(
            matches!(liveness.probe(&id), Probe::Free),
            "a probe leaves the file"
        );
        assert_eq!(liveness.remove_dead(&HashSet::from([named])).unwrap(), 2);
        assert!(matches!(liveness.probe(&id), Probe::Missing));
        assert!(
            matches!(liveness.probe(&named), Probe::Free),
            "a file a lock row still names is kept as evidence"
        );
        assert!(keep.path().exists());
    }

    #[test]
    fn an_unwritable_directory_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"").unwrap();
        let error = LivenessDir::at(&file).hold(&Uuid::new_v4()).unwrap_err();
        assert!(matches!(error, Error::LivenessDir { .. }), "{error}");
    }

    fn assert_refused(error: &Error, path: &Path, reason: &str) {
        let Error::LivenessDirRefused { path: refused, .. } = error else {
            panic!("expected a refusal, got {error}");
        };
        assert_eq!(refused, path);
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains(reason), "{message}");
    }

    #[test]
    fn a_symlinked_directory_is_refused_and_its_target_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        // Files the cleanup would remove, were it to follow the link.
        std::fs::write(target.join("pending-precious"), b"").unwrap();
        let id = Uuid::new_v4();
        std::fs::write(target.join(format!("{id}.live")), b"").unwrap();
        let link = dir.path().join("j.db.durably-live");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let liveness = LivenessDir::beside(&dir.path().join("j.db"));

        let error = liveness.hold(&Uuid::new_v4()).unwrap_err();
        assert_refused(&error, &link, "symbolic link");
        let error = liveness.remove_dead(&HashSet::new()).unwrap_err();
        assert_refused(&error, &link, "symbolic link");
        assert!(
            matches!(liveness.probe(&id), Probe::Untrusted(_)),
            "a free file behind a link proves nothing"
        );
        let mut left: Vec<_> = std::fs::read_dir(&target)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [format!("{id}.live"), "pending-precious".to_owned()]);
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o770, 0o1777, 0o702] {
            let path = dir.path().join(format!("live-{mode:o}"));
            std::fs::create_dir(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let liveness = LivenessDir::at(&path);
            let error = liveness.hold(&Uuid::new_v4()).unwrap_err();
            assert_refused(&error, &path, "lets group or others write");
            assert!(
                matches!(&error, Error::LivenessDirRefused { reason: Refusal::Writable { mode: found }, .. } if *found == mode),
                "{error}"
            );
            assert!(matches!(
                liveness.probe(&Uuid::new_v4()),
                Probe::Untrusted(_)
            ));
            assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_link_or_a_directory_under_a_live_name_is_evidence_of_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let liveness = LivenessDir::at(dir.path().join("live"));
        let keep = liveness.hold(&Uuid::new_v4()).unwrap();
        let free_elsewhere = dir.path().join("free");
        std::fs::write(&free_elsewhere, b"").unwrap();
        let linked = Uuid::new_v4();
        std::os::unix::fs::symlink(&free_elsewhere, liveness.path().join(live_name(&linked)))
            .unwrap();
        let directory = Uuid::new_v4();
        std::fs::create_dir(liveness.path().join(live_name(&directory))).unwrap();
        std::fs::create_dir(liveness.path().join("pending-dir")).unwrap();

        for id in [linked, directory] {
            let probe = liveness.probe(&id);
            assert!(matches!(probe, Probe::Untrusted(_)), "{id}: {probe:?}");
        }
        assert_eq!(liveness.remove_dead(&HashSet::new()).unwrap(), 0);
        assert!(free_elsewhere.exists());
        assert_eq!(std::fs::read_dir(liveness.path()).unwrap().count(), 4);
        assert!(keep.path().exists());
    }

    #[test]
    fn probing_and_cleaning_never_create_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let liveness = LivenessDir::beside(&dir.path().join("j.db"));
        assert!(matches!(liveness.probe(&Uuid::new_v4()), Probe::Missing));
        assert_eq!(liveness.remove_dead(&HashSet::new()).unwrap(), 0);
        assert!(!liveness.path().exists());
    }
}
