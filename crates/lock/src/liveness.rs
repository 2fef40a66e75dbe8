//! Per-instance liveness files, each held with an advisory `flock` for the instance's life.
//!
//! The kernel drops a `flock` when the last descriptor of its open file description closes,
//! which happens at process exit however the process died. So a liveness file that someone else
//! can lock proves its instance is gone, with no guessing from timestamps.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::error::{Error, Result};

const LIVE_SUFFIX: &str = ".live";
const PENDING_PREFIX: &str = "pending-";
/// How many times [`LivenessDir::hold`] makes its file again after a cleaner removed it.
const HOLD_ATTEMPTS_MAX: u32 = 16;

/// The directory of liveness files that belongs to one database: `<database>.durably-live/`.
#[derive(Debug, Clone)]
pub struct LivenessDir {
    path: PathBuf,
}

/// What probing another instance's liveness file found.
#[derive(Debug)]
pub enum Probe {
    /// Someone holds the lock: the instance (or a process it forked) is alive.
    Held,
    /// The lock could be taken: the instance is gone.
    Free,
    /// No file: the instance used another directory, or its file was already cleaned up.
    Missing,
    /// The file could not be probed.
    Unreadable(std::io::Error),
}

/// This instance's own liveness file, locked until dropped.
#[derive(Debug)]
pub struct LivenessFile {
    path: PathBuf,
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
        }
    }

    /// A liveness directory at an explicit path.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file_of(&self, instance_id: &Uuid) -> PathBuf {
        self.path.join(format!("{instance_id}{LIVE_SUFFIX}"))
    }

    /// Creates (mode 0700) the directory and this instance's file, and locks it.
    ///
    /// The file is created and locked under a pending name and only then renamed, so a cleaner
    /// never sees an unlocked file under a live instance's name. A cleaner may still lock and
    /// remove the pending file between its creation and our lock; the rename then fails (or the
    /// lock would block), and the file is made again under a fresh pending name, so that no
    /// path is ever created twice and a late cleaner cannot remove the new one.
    ///
    /// # Errors
    /// [`Error::LivenessDir`] when the directory or the file cannot be created or locked.
    pub fn hold(&self, instance_id: &Uuid) -> Result<LivenessFile> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path)
            .map_err(|source| Error::LivenessDir {
                path: self.path.clone(),
                source,
            })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_hold(instance_id, attempt) {
                Ok(Some(file)) => return Ok(file),
                Ok(None) if attempt < HOLD_ATTEMPTS_MAX => {}
                Ok(None) => {
                    return Err(Error::LivenessDir {
                        path: self.file_of(instance_id),
                        source: std::io::Error::other(format!(
                            "cleaners removed the new liveness file {attempt} times in a row"
                        )),
                    });
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// One attempt of [`Self::hold`]: `None` when a cleaner removed the pending file first.
    fn try_hold(&self, instance_id: &Uuid, attempt: u32) -> Result<Option<LivenessFile>> {
        let fail = |path: &Path| {
            let path = path.to_owned();
            move |source| Error::LivenessDir { path, source }
        };
        let pending = self
            .path
            .join(format!("{PENDING_PREFIX}{instance_id}-{attempt}"));
        // `create_new`: this name is ours alone, so whatever the rename below moves is our file.
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&pending)
            .map_err(fail(&pending))?;
        match file.try_lock() {
            Ok(()) => {}
            // A cleaner holds it for the moment it takes to remove it.
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(source)) => {
                let _ = std::fs::remove_file(&pending);
                return Err(Error::LivenessDir {
                    path: pending,
                    source,
                });
            }
        }
        // Only the cleaner ([`Self::remove_dead`]) ever locks another instance's pending file,
        // and it removes the file before unlocking, so if the pending name still exists now that
        // we hold the lock, nobody else ever locked it, and nobody can until this file closes.
        let path = self.file_of(instance_id);
        match std::fs::rename(&pending, &path) {
            Ok(()) => Ok(Some(LivenessFile { path, _file: file })),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => {
                let _ = std::fs::remove_file(&pending);
                Err(Error::LivenessDir { path, source })
            }
        }
    }

    /// Probes the liveness file of `instance_id` by trying to lock it. The file is left in
    /// place: while a lock row still names the instance, the free file is the evidence of its
    /// death (the only evidence for a holder in another pid namespace).
    pub fn probe(&self, instance_id: &Uuid) -> Probe {
        probe_path(&self.file_of(instance_id), Removal::Keep)
    }

    /// Removes every liveness file whose instance is gone, except those of instances in
    /// `still_named` (instances that lock rows still name: their file is the evidence a later
    /// judgement needs). Returns how many were removed.
    ///
    /// # Errors
    /// [`Error::LivenessDir`] when the directory cannot be listed.
    pub fn remove_dead(&self, still_named: &HashSet<Uuid>) -> Result<usize> {
        let entries = match std::fs::read_dir(&self.path) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(Error::LivenessDir {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // Pending files belong to instances between create and rename; a crash there leaves
            // one behind, which is free and so removed like any other.
            let named = name
                .strip_suffix(LIVE_SUFFIX)
                .and_then(|stem| Uuid::parse_str(stem).ok())
                .is_some_and(|instance| still_named.contains(&instance));
            if !named
                && (name.ends_with(LIVE_SUFFIX) || name.starts_with(PENDING_PREFIX))
                && matches!(probe_path(&entry.path(), Removal::Remove), Probe::Free)
            {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Whether a probe that finds a file free removes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    Keep,
    Remove,
}

fn probe_path(path: &Path, removal: Removal) -> Probe {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Probe::Missing,
        Err(error) => return Probe::Unreadable(error),
    };
    match file.try_lock() {
        Ok(()) => {
            // Unlinking while holding the lock: a concurrent prober either saw the file before
            // (and will also find it free) or finds it missing.
            if removal == Removal::Remove {
                let _ = std::fs::remove_file(path);
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
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
