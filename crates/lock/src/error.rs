use std::path::PathBuf;

use crate::checked_dir::Refusal;

/// Everything that can go wrong in `durably-lock`.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's fencing epoch is no longer the lock's epoch: another instance took the lock
    /// over (or it was released). Nothing was written under the stale epoch.
    #[error(
        "lock on {resource:?} was lost: this holder has epoch {epoch} but the lock is now {now}; \
         another process took it over, so stop working on it and reopen"
    )]
    LockLost {
        /// The locked resource.
        resource: String,
        /// The epoch the caller held.
        epoch: u64,
        /// What the lock row says now, in words.
        now: String,
    },
    /// Takeovers of this lock kept racing with other contenders.
    #[error("lock on {resource:?} keeps changing hands under contention; retry shortly")]
    Contended {
        /// The contended resource.
        resource: String,
    },
    /// This process's own identity could not be read from `/proc`.
    #[error(
        "cannot read this process's identity from {path}: {source}; durably-lock needs Linux \
         with /proc mounted"
    )]
    Identity {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A `/proc` file had a shape this crate does not understand.
    #[error("cannot parse {path}: {reason}; is /proc a Linux procfs?")]
    ProcFormat {
        /// The file that could not be parsed.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The liveness directory beside the database could not be used.
    #[error(
        "cannot use the liveness directory {path}: {source}; it must be a writable directory \
         beside the database (check its permissions and free space)"
    )]
    LivenessDir {
        /// The directory or file that failed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The liveness directory is not trusted, so nothing in it is used: its owner or its
    /// writers could forge the evidence that decides whether a holder is alive.
    #[error("refusing the liveness directory {path}: {reason}")]
    LivenessDirRefused {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: Refusal,
    },
    /// A lock row could not be read as a lock (a foreign or damaged database).
    #[error("lock row {resource:?} is corrupt: {reason}; run `PRAGMA integrity_check` on the file")]
    Corrupt {
        /// The resource of the bad row.
        resource: String,
        /// What was wrong with it.
        reason: String,
    },
    /// This instance's PostgreSQL liveness session was lost (a failed ping, a lost connection,
    /// a terminated session): other processes may judge it dead and take its locks over, so it
    /// writes nothing more. A new instance (a reopened journal) may continue.
    #[error(
        "instance {instance} lost its liveness session, so it may already have been taken over; \
         it writes nothing more: reopen the journal"
    )]
    InstanceLost {
        /// The lost instance.
        instance: uuid::Uuid,
    },
    /// Every new instance id tried had an advisory key some session held already.
    #[error(
        "the advisory keys of {attempts} new instance ids were all held already; something else \
         takes advisory locks in this database"
    )]
    SessionKeyCollisions {
        /// How many ids were tried.
        attempts: u32,
    },
    /// A locker was given a liveness session that holds no instance key (an observer): rows it
    /// stamped would name an instance nobody can prove alive.
    #[error("a liveness session that holds no instance key cannot take locks")]
    SessionWithoutKey,
    /// The database failed.
    #[error("database error while working on locks: {0}")]
    Storage(#[from] durably_db::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
