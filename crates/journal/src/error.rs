use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::seen_intent::SeenIntent;
use crate::step::StepError;

/// Everything that can go wrong in `durably-journal`.
///
/// [`Error::is_retryable`] tells a transient condition (busy, a lock held by a live process)
/// from one that needs a person or a code change.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A live process holds the execution: another one, or this very process (a handle of it
    /// is open here, and a second open is refused: an execution has one driver).
    #[error("{}", locked_message(execution_id, *pid, since, *in_this_process))]
    Locked {
        /// The execution.
        execution_id: Uuid,
        /// The holder's pid.
        pid: i64,
        /// When the holder took it (RFC 3339 UTC).
        since: String,
        /// Whether the holder is the process that asked (the same pid, start time, boot and
        /// pid namespace).
        in_this_process: bool,
    },
    /// A step cannot be looked at yet: a process that held the execution lost its lock only
    /// because its lease expired, and it may still be running, so it may still perform the
    /// step's effect after any check of the outside world. Its lock protects the journal, not
    /// the effect.
    #[error(
        "step {seq} of execution {execution_id} may still be run by pid {pid}: that process lost \
         the execution when its lease expired (last heartbeat {heartbeat_at}), and nothing says it \
         has stopped ({evidence}), so the step's effect can still happen after any check"
    )]
    LeaseExpiredHolderAlive {
        /// The execution.
        execution_id: Uuid,
        /// The step.
        seq: u32,
        /// The pid of the process whose lease expired.
        pid: i64,
        /// Its last heartbeat (RFC 3339 UTC).
        heartbeat_at: String,
        /// Why it may still be running: the judge's verdict on the evidence alone.
        evidence: String,
    },
    /// This handle's lock was taken over; nothing was written.
    #[error("{0}")]
    LockLost(durably_lock::Error),
    /// This journal's PostgreSQL liveness session was lost (a failed ping, a lost connection,
    /// a terminated session), so other processes may judge the instance dead and take its
    /// executions over. The request wrote nothing, and neither does any later one of this
    /// journal; a journal opened again is a new instance.
    #[error(
        "instance {instance} lost its PostgreSQL liveness session and may have been taken over; \
         nothing was written, and this journal writes nothing more"
    )]
    InstanceLost {
        /// The lost instance.
        instance: Uuid,
    },
    /// A guarded step is in the ambiguous window and no policy may decide it: its policy is
    /// `Fail`, or it was re-run after crashes `ambiguous_reruns_max` times. The execution now
    /// awaits an operator ([`crate::Status::AwaitingOperator`]): no process reopens it until
    /// the step is resolved.
    #[error(
        "step {seq} ({name:?}) of execution {execution_id} is ambiguous: its intent was recorded \
         but not its result, so the effect may or may not have happened, and {reason}; an \
         operator must check the outside world and resolve the step"
    )]
    Ambiguous {
        /// The execution.
        execution_id: Uuid,
        /// The step's sequence number.
        seq: u32,
        /// The step's name.
        name: String,
        /// Why no policy decided the step.
        reason: AmbiguityReason,
    },
    /// Replay met a step that differs from the journal.
    #[error(
        "non-determinism in execution {execution_id} at step {seq}: the journal recorded \
         {recorded} but the code now calls {called}; steps must be called in the same order \
         with the same names and kinds on every run"
    )]
    NonDeterminism {
        /// The execution.
        execution_id: Uuid,
        /// The step's sequence number.
        seq: u32,
        /// What the journal recorded (name and kind).
        recorded: String,
        /// What the code called (name and kind).
        called: String,
    },
    /// A step's closure failed, now or on a previous run (replayed from the journal).
    #[error("step {seq} ({name:?}) failed: {error}")]
    StepFailed {
        /// The step's sequence number.
        seq: u32,
        /// The step's name.
        name: String,
        /// The error the closure returned.
        error: StepError,
    },
    /// A payload is larger than the configured cap; nothing was written.
    #[error("{what} is {bytes} bytes, over the {max} byte cap; nothing was written")]
    PayloadTooLarge {
        /// Which payload.
        what: String,
        /// Its size.
        bytes: usize,
        /// The cap.
        max: usize,
    },
    /// A value could not be turned into JSON, or a journaled value into the caller's type.
    #[error("cannot convert {what} to or from JSON: {source}")]
    Json {
        /// Which value.
        what: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// The file was written by a newer durably.
    #[error(
        "{path} has schema version {found}, but this durably knows only up to {supported}; it \
         was left untouched"
    )]
    SchemaTooNew {
        /// The database.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// The tables of a crate built on the journal (see [`crate::ExtensionSchema`]) were
    /// migrated by a newer build of that crate.
    #[error(
        "{path} has {owner} schema version {found}, but this build knows only up to \
         {supported}; the {owner} tables were left untouched"
    )]
    ExtensionSchemaTooNew {
        /// The database.
        path: PathBuf,
        /// The crate that owns the tables (its `schema_versions` owner).
        owner: &'static str,
        /// The version the file records.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// The file is an SQLite database of another application.
    #[error(
        "{path} is an SQLite database of another application ({reason}); it was left untouched"
    )]
    ForeignDatabase {
        /// The database.
        path: PathBuf,
        /// What gave it away.
        reason: String,
    },
    /// The file is not an SQLite database at all, or is damaged. Found by the checks of an
    /// open, before its first write, the file was not written to; found later, by a read or a
    /// write, that depends on what ran before, so the message claims nothing either way.
    #[error("{path} is not a usable SQLite database ({reason})")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        reason: String,
    },
    /// A reading open found a file that holds no journal yet: an empty file, or an SQLite
    /// database with no tables. Only a writer's open makes it a journal; the reader changed
    /// nothing.
    #[error("{path} is not a durably journal yet: {reason}; it was left untouched")]
    NotAJournal {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A reading open found a journal older than the oldest schema a reader understands. A
    /// reader never migrates; a writer's open does.
    #[error(
        "{path} has schema version {found}, older than {oldest}, the oldest this durably reads \
         without migrating it; it was left untouched"
    )]
    SchemaTooOld {
        /// The database.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The oldest schema version a reader understands.
        oldest: i64,
    },
    /// A read took longer than the reader's timeout and was stopped. A journal durably wrote
    /// reads far faster; a view or trigger that someone else wrote may never end.
    #[error("reading {path} took longer than {timeout_ms} ms and was stopped; nothing was written")]
    ReadTimeout {
        /// The database.
        path: PathBuf,
        /// The timeout that expired.
        timeout_ms: u64,
    },
    /// The database path, with its links resolved, is longer than SQLite accepts.
    #[error(
        "{path} is {bytes} bytes long, longer than the {max} bytes SQLite accepts for a database \
         path; nothing was opened"
    )]
    PathTooLong {
        /// The path, with its links resolved.
        path: PathBuf,
        /// Its length in bytes.
        bytes: usize,
        /// The longest SQLite accepts.
        max: usize,
    },
    /// A reading open found a journal that only a writer can bring back to a readable state:
    /// reading it would mean creating or rolling back a file beside it.
    #[error("{path} cannot be read without a writer's recovery: {reason}; it was left untouched")]
    NeedsRecovery {
        /// The database.
        path: PathBuf,
        /// What a reader would have to create or undo.
        reason: String,
    },
    /// A journal read without SQLite's locks (no WAL beside it) was changed by a writer during
    /// every read attempted, so no read saw it whole. Reading again usually succeeds.
    #[error(
        "{path} changed while it was being read without a lock, {attempts} times in a row; \
         nothing was written"
    )]
    ChangedWhileReading {
        /// The database.
        path: PathBuf,
        /// Reads attempted.
        attempts: u32,
    },
    /// The database could not be opened: SQLite's file (it, or a directory on its path, is
    /// missing or not accessible to this user), or a PostgreSQL server that cannot be reached,
    /// or whose `search_path` names no schema that exists.
    #[error("cannot open {path}: {reason}")]
    CannotOpen {
        /// The database.
        path: PathBuf,
        /// Why: what SQLite or the server said.
        reason: String,
    },
    /// A file of the journal (the database, its `-wal`, `-shm` or `-journal`) would let
    /// another user read or change what durably writes, or is not a regular file. Found before
    /// SQLite opened the database (the usual case), it was left as it was; found by the look
    /// after, SQLite had opened it, and no payload was written.
    #[error("{path} (owner uid {owner}, mode {mode:04o}) {reason}; durably refuses to use it")]
    UnsafeFile {
        /// The file.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// What is wrong with it.
        reason: UnsafeFileReason,
    },
    /// The database path is a symbolic link whose target does not resolve. A journal is opened
    /// only at its real path, so that every process finds the same WAL and liveness directory;
    /// nothing was created.
    #[error(
        "{path} is a symbolic link to {target}, which does not exist; durably does not create a \
         journal through a link, and created nothing"
    )]
    DanglingSymlink {
        /// The link.
        path: PathBuf,
        /// What it points to.
        target: PathBuf,
    },
    /// Another connection held the write lock past the busy timeout.
    #[error("the database stayed locked by another writer for over {busy_timeout_ms} ms")]
    Busy {
        /// The busy timeout that expired.
        busy_timeout_ms: u64,
    },
    /// The handle was configured in a way that cannot work.
    #[error("invalid journal setting: {0}")]
    InvalidConfig(String),
    /// The disk (or `max_page_count`) is full; the batch was rolled back.
    #[error("the database or disk is full; nothing was written")]
    DiskFull,
    /// The file or its directory is read-only.
    #[error("{path} is read-only to this process: {reason}")]
    ReadOnly {
        /// The database.
        path: PathBuf,
        /// What SQLite said.
        reason: String,
    },
    /// A pragma did not take the value durably needs.
    #[error(
        "PRAGMA {pragma} is {actual:?} but durably needs {wanted:?}; the file system may not support it"
    )]
    Pragma {
        /// The pragma.
        pragma: &'static str,
        /// The value asked for.
        wanted: String,
        /// The value read back.
        actual: String,
    },
    /// The journal contradicts itself (a gap in step numbers, a result of the wrong kind).
    #[error("the journal is inconsistent: {0}")]
    Inconsistent(String),
    /// A reconcile probe failed; the step stays ambiguous.
    #[error(
        "the reconcile probe of step {seq} ({name:?}) failed: {error}; the step stays ambiguous"
    )]
    ProbeFailed {
        /// The step's sequence number.
        seq: u32,
        /// The step's name.
        name: String,
        /// The probe's error.
        error: StepError,
    },
    /// The execution does not exist.
    #[error("no execution {0} in this journal")]
    NotFound(Uuid),
    /// The execution was cancelled and never reopens.
    #[error("execution {0} was cancelled and never reopens")]
    Cancelled(Uuid),
    /// An operator asked to cancel the execution while this handle held it: the write was
    /// refused and nothing of it was written. Only a guarded step's result, `fail` and
    /// `finish_cancelled` still write; end the execution with `finish_cancelled`.
    #[error(
        "execution {execution_id} has a cancel request pending ({reason}); nothing was written"
    )]
    CancelRequested {
        /// The execution.
        execution_id: Uuid,
        /// The reason the operator gave.
        reason: String,
    },
    /// The execution waits for an operator to resolve a step left in the ambiguous window;
    /// no process reopens it until then. Nothing was written, and its lock was not touched.
    #[error(
        "execution {execution_id} waits for an operator: step {seq} is in the ambiguous window \
         and its policy leaves the decision to a person; it reopens once the step is resolved"
    )]
    AwaitingOperator {
        /// The execution.
        execution_id: Uuid,
        /// The step waiting for an answer.
        seq: u32,
    },
    /// The execution is parked (`queued`, `waiting` or `stuck`): only the runtime's claim or
    /// an operator moves it on, never a plain open. Nothing was written, and its lock was not
    /// touched.
    #[error(
        "execution {execution_id} is {status}; an open resumes only running or interrupted executions"
    )]
    NotRunnable {
        /// The execution.
        execution_id: Uuid,
        /// Its status.
        status: crate::states::Status,
    },
    /// An operator action does not apply to the state it found.
    #[error("{0}")]
    Refused(String),
    /// An operator's answer named the intent they checked ([`crate::Operator::resolve_seen`]),
    /// and the step no longer has that intent: it ran again, or was answered, since. What was
    /// checked may not describe the step any more, so nothing was written.
    #[error("{}", stale_seen_message(execution_id, *seq, seen, now.as_ref()))]
    StaleSeenIntent {
        /// The execution.
        execution_id: Uuid,
        /// The step.
        seq: u32,
        /// The intent the operator checked.
        seen: SeenIntent,
        /// The step's intent now; `None` when it is no longer in the ambiguous window.
        now: Option<SeenIntent>,
    },
    /// A deferred open lost its race ([`crate::Journal::begin_execution`]): the handle's first
    /// write found the execution's row already there, or its lock held by a live process.
    /// Nothing of that write was written; the execution is another handle's.
    #[error(
        "execution {0} was opened by another handle first; nothing of this handle's first write          was written"
    )]
    OpenRaced(Uuid),
    /// A caller's hook declined the write it was part of (a park that found a message already
    /// waiting, say): nothing of that transaction was written, and the handle is usable as
    /// before. The text says why, in the hook's words.
    #[error("the write was declined by the caller's hook: {0}; nothing was written")]
    Aborted(&'static str),
    /// A caller's hook declined its step's write ([`Error::Aborted`]) while a step called
    /// after it was already reserved (steps in parallel): the seq cannot be given back without
    /// renumbering that later step, so the handle is halted at this step. Nothing of the
    /// declined write was written; the run ends and a resumed run calls the step again.
    #[error(
        "the hook of step {seq} of execution {execution_id} declined its write ({reason}) while \
         a later step was already called; the handle is halted at step {seq}"
    )]
    AbortedBehindLaterSteps {
        /// The execution.
        execution_id: Uuid,
        /// The step whose hook declined.
        seq: u32,
        /// Why, in the hook's words.
        reason: &'static str,
    },
    /// A handle was used after a step error that stops the execution.
    #[error(
        "execution {execution_id} stopped at step {seq} after an earlier error; this handle \
         takes no more steps"
    )]
    Halted {
        /// The execution.
        execution_id: Uuid,
        /// Where it stopped.
        seq: u32,
    },
    /// The writer's acknowledgement did not arrive in time. The write may still commit: a
    /// guarded step that hits this has not run its effect, and its replay is decided by policy.
    #[error(
        "the journal writer did not acknowledge within {timeout_ms} ms; the write may or may not \
         have committed, and no effect was run"
    )]
    AckTimeout {
        /// The acknowledgement timeout.
        timeout_ms: u64,
    },
    /// The batch this request was part of failed. After an I/O error inside COMMIT the batch may
    /// still be durable, so the caller must treat the write as in doubt.
    #[error("the journal's write failed ({reason}); it may or may not have committed")]
    CommitFailed {
        /// Why the commit failed.
        reason: String,
    },
    /// The writer thread has stopped (the journal is closing or the writer failed).
    #[error("the journal writer has stopped")]
    WriterStopped,
    /// A long read run on a blocking thread did not return (the runtime is shutting down, or
    /// the read panicked). Nothing was written.
    #[error("a read of the journal did not finish ({reason}); nothing was written")]
    ReadFailed {
        /// Why the blocking thread did not return an answer.
        reason: String,
    },
    /// A file-system operation on the database's directory failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Lock bookkeeping failed (identity, liveness directory, a damaged lock row).
    #[error(transparent)]
    Lock(durably_lock::Error),
    /// The journal is on a backend this build was compiled without (a PostgreSQL URL given
    /// to a build with SQLite only). Nothing was opened or written.
    #[error("this build has no {backend} backend: build durably with its `{feature}` feature")]
    BackendNotCompiled {
        /// The backend the target names.
        backend: &'static str,
        /// The Cargo feature of the `durably` crate that compiles it in.
        feature: &'static str,
    },
    /// PostgreSQL rolled the write's transaction back to break a deadlock or a serialization
    /// conflict with another session (SQLSTATE 40P01 or 40001): nothing of it committed. The
    /// request had run, so an execution handle halts as after a crash; opening it again
    /// retries from what is recorded. Any other call may simply be made again
    /// ([`Error::is_retryable`]): the server broke a deadlock or an ordering conflict between
    /// sessions, and the same call later does not meet it again.
    #[error(
        "the write conflicted with another session and was rolled back, nothing committed: {reason}"
    )]
    Conflict {
        /// The server's account of the conflict.
        reason: String,
    },
    /// The connection to PostgreSQL was lost while the write's `COMMIT` was in flight: it may
    /// or may not have committed, and only reading the journal again tells. An execution handle
    /// halts; opening it again reads what is recorded.
    #[error(
        "the connection was lost during COMMIT, so whether the write committed is unknown: {reason}"
    )]
    CommitUnknown {
        /// What was lost, as the driver reported it.
        reason: String,
    },
    /// The database failed in a way not listed above.
    #[error("database error: {0}")]
    Storage(#[source] durably_db::Error),
    /// The read pool could not hand out a connection.
    #[error("cannot get a read connection: {0}")]
    Pool(#[from] r2d2::Error),
}

/// Why a step in the ambiguous window was left to an operator ([`Error::Ambiguous`]).
#[non_exhaustive]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum AmbiguityReason {
    /// The step's policy is `Fail`: the program asked for an operator.
    #[error("its policy asks for an operator")]
    PolicyFail,
    /// The step's policy (`Retry`, or `Reconcile` finding nothing) re-runs it, but it was
    /// re-run after crashes as often as the journal allows: a step that crashes its process
    /// every time it runs must not run forever.
    #[error("it was already re-run {reruns} times after crashes (the limit is {max})")]
    RerunsExhausted {
        /// Re-runs recorded.
        reruns: u32,
        /// `ambiguous_reruns_max`.
        max: u32,
    },
}

/// Why a journal file was refused as [`Error::UnsafeFile`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeFileReason {
    /// An empty database file that belongs to another user, or that the group or others may
    /// read or write. Someone else made it and chose its mode, and a descriptor opened while it
    /// was readable would still read everything written to it after a `chmod`.
    #[error(
        "is an empty database file that is not private to this user: whoever created it chose \
         its mode and may already hold it open"
    )]
    EmptyNotPrivate,
    /// A `-wal`, `-shm` or `-journal` file owned by a user who owns neither the database file
    /// nor this process: SQLite would read it into the database and write payloads into it.
    #[error("belongs to a user who owns neither the database file nor this process")]
    ForeignOwner,
    /// A symbolic link, a directory, a FIFO or a device where a regular file belongs.
    #[error("is not a regular file (a symbolic link, a directory, a FIFO or a device)")]
    NotRegular,
}

impl Error {
    /// Whether retrying the same call later can succeed without anyone changing anything.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Locked { .. }
                | Self::LeaseExpiredHolderAlive { .. }
                | Self::Busy { .. }
                | Self::AckTimeout { .. }
                | Self::Pool(_)
                | Self::ChangedWhileReading { .. }
                | Self::Conflict { .. }
        )
    }
}

impl Error {
    /// This error with `path` named where it concerns the database file but was raised
    /// without one (SQLite reports what a statement found without the file's name).
    pub(crate) fn at_path(self, path: &Path) -> Self {
        let named = |found: PathBuf| {
            if found.as_os_str().is_empty() {
                path.to_owned()
            } else {
                found
            }
        };
        match self {
            Self::Corrupt {
                path: found,
                reason,
            } => Self::Corrupt {
                path: named(found),
                reason,
            },
            Self::ReadOnly {
                path: found,
                reason,
            } => Self::ReadOnly {
                path: named(found),
                reason,
            },
            Self::CannotOpen {
                path: found,
                reason,
            } => Self::CannotOpen {
                path: named(found),
                reason,
            },
            other => other,
        }
    }
}

impl From<durably_db::Error> for Error {
    fn from(error: durably_db::Error) -> Self {
        classify(&error).unwrap_or(Self::Storage(error))
    }
}

/// For the code that works on the SQLite file itself (storage, file checks, the inspector).
impl From<rusqlite::Error> for Error {
    fn from(error: rusqlite::Error) -> Self {
        durably_db::Error::from(error).into()
    }
}

impl From<durably_lock::Error> for Error {
    fn from(error: durably_lock::Error) -> Self {
        match error {
            durably_lock::Error::LockLost { .. } => Self::LockLost(error),
            durably_lock::Error::InstanceLost { instance } => Self::InstanceLost { instance },
            durably_lock::Error::Storage(inner) => inner.into(),
            other => Self::Lock(other),
        }
    }
}

/// Maps the database conditions a caller can act on to their own variants. Kept separate from
/// `From` so a commit failure can be reported to every request of a batch.
pub(crate) fn classify(error: &durably_db::Error) -> Option<Error> {
    match error {
        // A stored value the type's own parser refused; a value of the wrong storage class or
        // out of range stays a storage error.
        durably_db::Error::Column {
            index,
            source: cause @ durably_db::FromSqlError::Other(_),
        } => Some(Error::Inconsistent(format!(
            "a stored value in column {index} does not parse: {cause}"
        ))),
        durably_db::Error::Sqlite(error) => classify_sqlite(error),
        #[cfg(feature = "postgres")]
        durably_db::Error::Postgres(error) => classify_postgres(error),
        _ => None,
    }
}

/// [`classify`] for PostgreSQL's errors, by their kind.
#[cfg(feature = "postgres")]
fn classify_postgres(error: &durably_db::PgError) -> Option<Error> {
    use durably_db::PgErrorKind;
    let reason = || error.to_string();
    match error.kind() {
        PgErrorKind::Deadlock | PgErrorKind::SerializationFailure => {
            Some(Error::Conflict { reason: reason() })
        }
        PgErrorKind::CommitUnknown => Some(Error::CommitUnknown { reason: reason() }),
        PgErrorKind::LockNotAvailable => Some(Error::Busy { busy_timeout_ms: 0 }),
        PgErrorKind::InsufficientResources if error.sqlstate() == Some("53100") => {
            Some(Error::DiskFull)
        }
        _ => None,
    }
}

/// [`classify`] for SQLite's own errors, by their code.
fn classify_sqlite(error: &rusqlite::Error) -> Option<Error> {
    let rusqlite::Error::SqliteFailure(failure, message) = error else {
        return None;
    };
    let reason = message.clone().unwrap_or_else(|| failure.to_string());
    match failure.code {
        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
            Some(Error::Busy { busy_timeout_ms: 0 })
        }
        rusqlite::ErrorCode::DiskFull => Some(Error::DiskFull),
        rusqlite::ErrorCode::ReadOnly => Some(Error::ReadOnly {
            path: PathBuf::new(),
            reason,
        }),
        rusqlite::ErrorCode::CannotOpen => Some(Error::CannotOpen {
            path: PathBuf::new(),
            reason,
        }),
        rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt => {
            Some(Error::Corrupt {
                path: PathBuf::new(),
                reason,
            })
        }
        _ => None,
    }
}

/// A copy of a batch-wide failure for each request of the batch.
pub(crate) fn replicate(error: &Error) -> Error {
    match error {
        Error::Busy { busy_timeout_ms } => Error::Busy {
            busy_timeout_ms: *busy_timeout_ms,
        },
        Error::DiskFull => Error::DiskFull,
        Error::ReadOnly { path, reason } => Error::ReadOnly {
            path: path.clone(),
            reason: reason.clone(),
        },
        Error::Corrupt { path, reason } => Error::Corrupt {
            path: path.clone(),
            reason: reason.clone(),
        },
        Error::CommitFailed { reason } => Error::CommitFailed {
            reason: reason.clone(),
        },
        Error::Conflict { reason } => Error::Conflict {
            reason: reason.clone(),
        },
        Error::CommitUnknown { reason } => Error::CommitUnknown {
            reason: reason.clone(),
        },
        other => Error::CommitFailed {
            reason: other.to_string(),
        },
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message of [`Error::Locked`]: a holder in this very process is named as such, since
/// waiting for "that process" to stop would wait for the caller itself.
fn locked_message(execution_id: &Uuid, pid: i64, since: &str, in_this_process: bool) -> String {
    if in_this_process {
        format!(
            "execution {execution_id} is already open in this process (pid {pid}) since \
             {since}; use the handle this process holds, or drop it before opening again"
        )
    } else {
        format!("execution {execution_id} is held by live process pid {pid} since {since}")
    }
}

/// The message of [`Error::StaleSeenIntent`]: what became of the intent the operator checked.
fn stale_seen_message(
    execution_id: &Uuid,
    seq: u32,
    seen: &SeenIntent,
    now: Option<&SeenIntent>,
) -> String {
    match now {
        Some(now) => format!(
            "step {seq} of execution {execution_id} changed since it was looked at (then {seen}, \
             now {now}): it ran again, or another operator answered, so what was checked may not \
             describe it any more"
        ),
        None => format!(
            "step {seq} of execution {execution_id} is no longer in the ambiguous window: since \
             it was looked at ({seen}) it was answered, or it ran to a result"
        ),
    }
}
