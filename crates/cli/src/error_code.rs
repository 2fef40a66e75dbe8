//! The stable `code` of every error this tool prints with `--json`, and which error gets which.
//!
//! A program that runs `durably --json` branches on the code, never on the message: the message
//! is for people and may be reworded, the code is not. Each code has one exit code, so the
//! table in docs/cli.md ("Error codes") says both; a unit test below keeps that table and this
//! enum in step. Codes name what happened to the command (`not_found`, `lock_held`), not which
//! library produced the error: the journal's, the runtime's and the scheduler's errors for the
//! same situation share a code.

use durably::lock::Error as LockError;

use crate::error::{EXIT_FAILURE, EXIT_USAGE};

/// Declares [`ErrorCode`]: each variant with its text and its exit code, in the order of the
/// table in docs/cli.md.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])+ $variant:ident = $text:literal, $exit:ident;)+) => {
        /// What kind of error a command met, as `--json` prints it in `code`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorCode {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl ErrorCode {
            /// Every code, in the order of the table in docs/cli.md.
            #[cfg(test)]
            pub const ALL: &[Self] = &[$(Self::$variant,)+];

            /// The code as printed: snake_case, stable across releases.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }

            /// The exit code of a command that fails with this code.
            pub fn exit_code(self) -> u8 {
                match self {
                    $(Self::$variant => $exit,)+
                }
            }
        }
    };
}

error_codes! {
    /// The command line cannot be run as written: an unknown command or flag, a missing or
    /// malformed argument, no database named, a name or option the library refuses.
    BadInput = "bad_input", EXIT_USAGE;
    /// A schedule command named a job no scheduler registered in this journal.
    UnknownJob = "unknown_job", EXIT_USAGE;
    /// A schedule command asked a paused job to fire.
    JobPaused = "job_paused", EXIT_USAGE;
    /// A job cannot fire: it names no workflow, or its schedule has no slot left.
    JobUnfireable = "job_unfireable", EXIT_USAGE;
    /// No journal file at the path (nothing there, a directory, or a link to nothing).
    DatabaseMissing = "database_missing", EXIT_FAILURE;
    /// The file exists but cannot be opened by this user, or its path is too long.
    CannotOpen = "cannot_open", EXIT_FAILURE;
    /// The PostgreSQL server a `postgres://` URL names cannot be reached, or refused the
    /// connection.
    CannotConnect = "cannot_connect", EXIT_FAILURE;
    /// The connection to PostgreSQL was lost during the command; what it had not committed
    /// was not written.
    ConnectionLost = "connection_lost", EXIT_FAILURE;
    /// The connection to PostgreSQL was lost while a change was committing: it may or may not
    /// have been written.
    CommitUnknown = "commit_unknown", EXIT_FAILURE;
    /// `--db` names a backend this build of the tool was compiled without.
    BackendNotCompiled = "backend_not_compiled", EXIT_FAILURE;
    /// A writing command met a journal or directory this process may only read.
    ReadOnly = "read_only", EXIT_FAILURE;
    /// The file is not a durably journal: another program's database, or an empty one.
    NotAJournal = "not_a_journal", EXIT_FAILURE;
    /// A file of the journal, or its liveness directory, could be changed by another user.
    UnsafeFile = "unsafe_file", EXIT_FAILURE;
    /// The journal was written by a newer durably.
    SchemaTooNew = "schema_too_new", EXIT_FAILURE;
    /// The journal is older than a reading command reads without migrating it.
    SchemaTooOld = "schema_too_old", EXIT_FAILURE;
    /// A reading command met a journal that needs a writer's recovery first.
    NeedsRecovery = "needs_recovery", EXIT_FAILURE;
    /// The file is damaged, or the journal contradicts itself.
    DatabaseCorrupt = "database_corrupt", EXIT_FAILURE;
    /// A changing command found the journal failing SQLite's integrity check.
    IntegrityCheckFailed = "integrity_check_failed", EXIT_FAILURE;
    /// A read took longer than `--read-timeout`.
    ReadTimeout = "read_timeout", EXIT_FAILURE;
    /// Another process kept the journal busy; the same command may succeed in a moment.
    Busy = "busy", EXIT_FAILURE;
    /// The disk, or the database's page limit, is full.
    DiskFull = "disk_full", EXIT_FAILURE;
    /// No execution has this id in the journal.
    NotFound = "not_found", EXIT_FAILURE;
    /// The execution, or the journal, was not used through the runtime.
    NotRuntime = "not_runtime", EXIT_FAILURE;
    /// A live process holds the execution.
    LockHeld = "lock_held", EXIT_FAILURE;
    /// A process whose lease expired may still be running the step.
    LeaseExpiredHolderAlive = "lease_expired_holder_alive", EXIT_FAILURE;
    /// The execution waits for an operator: a step in the ambiguous window, or it is stuck.
    NeedsOperator = "needs_operator", EXIT_FAILURE;
    /// `resolve --seen` named an intent the step no longer has.
    AmbiguousTokenStale = "ambiguous_token_stale", EXIT_FAILURE;
    /// An operator action does not apply to the state it found (a step that is not
    /// ambiguous).
    Refused = "refused", EXIT_FAILURE;
    /// The execution has ended, so it cannot be sent to, cancelled or reopened.
    AlreadyEnded = "already_ended", EXIT_FAILURE;
    /// `resume` found the execution in a status it does not move.
    NotResumable = "not_resumable", EXIT_FAILURE;
    /// `fork` was refused; nothing was written.
    ForkRefused = "fork_refused", EXIT_FAILURE;
    /// No runtime on this journal registered the workflow kind.
    UnknownKind = "unknown_kind", EXIT_FAILURE;
    /// No runtime on this journal configured the queue.
    UnknownQueue = "unknown_queue", EXIT_FAILURE;
    /// `start --id` named an execution of another kind.
    IdConflict = "id_conflict", EXIT_FAILURE;
    /// `start --dedup` named a key an unfinished execution holds.
    DedupKeyTaken = "dedup_key_taken", EXIT_FAILURE;
    /// `send --key` reused a key of another message to the same execution.
    IdempotencyKeyReused = "idempotency_key_reused", EXIT_FAILURE;
    /// `copy` found rows in its destination; nothing was copied.
    DestinationNotEmpty = "destination_not_empty", EXIT_FAILURE;
    /// `copy` found the source's and the destination's schema versions differ; nothing was
    /// copied.
    SchemaMismatch = "schema_mismatch", EXIT_FAILURE;
    /// A value is over the journal's payload cap.
    PayloadTooLarge = "payload_too_large", EXIT_FAILURE;
    /// The execution `start --wait` waited for failed.
    ExecutionFailed = "execution_failed", EXIT_FAILURE;
    /// The execution `start --wait` waited for was cancelled.
    ExecutionCancelled = "execution_cancelled", EXIT_FAILURE;
    /// `start --wait DUR` ran out of time before the execution ended.
    WaitTimedOut = "wait_timed_out", EXIT_FAILURE;
    /// The database (SQLite or PostgreSQL) failed in a way not listed above.
    StorageError = "storage_error", EXIT_FAILURE;
    /// A file-system or system call failed: the liveness directory, `/proc`, standard
    /// output, a thread.
    IoError = "io_error", EXIT_FAILURE;
    /// `durably demo` refused its `--db`, or could not run one of its parts.
    DemoFailed = "demo_failed", EXIT_FAILURE;
    /// Any other failure the library reports; the message says what.
    Failed = "failed", EXIT_FAILURE;
    /// A bug in this tool.
    Internal = "internal", EXIT_FAILURE;
}

impl ErrorCode {
    /// The code of a journal error.
    pub fn of_journal(error: &durably::Error) -> Self {
        use durably::Error as E;
        match error {
            E::Locked { .. } | E::LockLost(_) => Self::LockHeld,
            E::LeaseExpiredHolderAlive { .. } => Self::LeaseExpiredHolderAlive,
            E::Ambiguous { .. } | E::AwaitingOperator { .. } => Self::NeedsOperator,
            E::StaleSeenIntent { .. } => Self::AmbiguousTokenStale,
            E::Refused(_) => Self::Refused,
            E::NotFound(_) => Self::NotFound,
            E::Cancelled(_) => Self::AlreadyEnded,
            E::PayloadTooLarge { .. } => Self::PayloadTooLarge,
            E::SchemaTooNew { .. } | E::ExtensionSchemaTooNew { .. } => Self::SchemaTooNew,
            E::SchemaTooOld { .. } => Self::SchemaTooOld,
            E::ForeignDatabase { .. } | E::NotAJournal { .. } => Self::NotAJournal,
            E::Corrupt { .. } | E::Inconsistent(_) => Self::DatabaseCorrupt,
            E::NeedsRecovery { .. } => Self::NeedsRecovery,
            E::ReadTimeout { .. } => Self::ReadTimeout,
            E::CannotOpen { .. } | E::PathTooLong { .. } => Self::CannotOpen,
            E::DanglingSymlink { .. } => Self::DatabaseMissing,
            E::UnsafeFile { .. } => Self::UnsafeFile,
            E::ReadOnly { .. } => Self::ReadOnly,
            E::InstanceLost { .. } => Self::ConnectionLost,
            E::CommitUnknown { .. } => Self::CommitUnknown,
            E::BackendNotCompiled { .. } => Self::BackendNotCompiled,
            E::Storage(error) if connection_lost(error) => Self::ConnectionLost,
            E::Busy { .. }
            | E::ChangedWhileReading { .. }
            | E::AckTimeout { .. }
            | E::Pool(_)
            | E::Conflict { .. } => Self::Busy,
            E::DiskFull => Self::DiskFull,
            E::Storage(_)
            | E::Pragma { .. }
            | E::CommitFailed { .. }
            | E::WriterStopped
            | E::ReadFailed { .. } => Self::StorageError,
            E::Io { .. } => Self::IoError,
            E::Lock(error) => Self::of_lock(error),
            _ => Self::Failed,
        }
    }

    /// The code of a lock error the journal passed on.
    fn of_lock(error: &LockError) -> Self {
        match error {
            LockError::LivenessDirRefused { .. } => Self::UnsafeFile,
            LockError::LockLost { .. } => Self::LockHeld,
            LockError::Contended { .. } => Self::Busy,
            LockError::Corrupt { .. } => Self::DatabaseCorrupt,
            LockError::Identity { .. }
            | LockError::ProcFormat { .. }
            | LockError::LivenessDir { .. } => Self::IoError,
            LockError::Storage(_) => Self::StorageError,
            _ => Self::Failed,
        }
    }

    /// The code of a runtime error.
    pub fn of_runtime(error: &durably::runtime::Error) -> Self {
        use durably::runtime::Error as E;
        match error {
            E::InvalidName { .. } | E::InvalidOption(_) => Self::BadInput,
            E::UnknownKind { .. } => Self::UnknownKind,
            E::UnknownQueue { .. } => Self::UnknownQueue,
            E::IdConflict { .. } => Self::IdConflict,
            E::Duplicate { .. } => Self::DedupKeyTaken,
            E::PayloadTooLarge { .. } => Self::PayloadTooLarge,
            E::NotFound(_) | E::ReceiverNotFound { .. } => Self::NotFound,
            E::ReceiverFinished { .. } | E::AlreadyEnded { .. } => Self::AlreadyEnded,
            E::NotRuntimeExecution { .. } => Self::NotRuntime,
            E::IdempotencyKeyReused { .. } => Self::IdempotencyKeyReused,
            E::NotResumable { .. } => Self::NotResumable,
            E::ForkRefused { .. } => Self::ForkRefused,
            E::WorkflowFailed { .. } | E::ChildFailed { .. } | E::StepTimedOut { .. } => {
                Self::ExecutionFailed
            }
            E::Cancelled { .. } | E::ChildCancelled { .. } => Self::ExecutionCancelled,
            E::Watcher(_) => Self::IoError,
            E::Journal(error) => Self::of_journal(error),
            _ => Self::Failed,
        }
    }

    /// The code of a scheduler error.
    pub fn of_scheduler(error: &durably::scheduler::Error) -> Self {
        use durably::scheduler::Error as E;
        match error {
            E::UnknownJob { .. } => Self::UnknownJob,
            E::JobPaused { .. } => Self::JobPaused,
            E::JobNeedsWorkflow { .. } | E::NoSlotsLeft { .. } => Self::JobUnfireable,
            E::InvalidJobId { .. }
            | E::SlotOutOfRange { .. }
            | E::InvalidCron { .. }
            | E::UnknownTimeZone { .. }
            | E::InvalidInterval { .. }
            | E::InvalidCatchUp { .. }
            | E::InvalidJob { .. }
            | E::RangeReversed { .. }
            | E::EmptyRange { .. }
            | E::RangeInFuture { .. }
            | E::TooManySlots { .. }
            | E::NotASlot { .. }
            | E::SlotInFuture { .. } => Self::BadInput,
            E::Ledger(_) => Self::DatabaseCorrupt,
            // An expression that parsed never meets this: a bug in the cron engine.
            E::CronEvaluation { .. } => Self::Internal,
            E::Start(error) => Self::of_runtime(error),
            E::Journal(error) => Self::of_journal(error),
            _ => Self::Failed,
        }
    }
}

/// Whether a database error is PostgreSQL's connection closing under the command: nothing of
/// the transaction in flight committed.
#[cfg(feature = "postgres")]
pub fn connection_lost(error: &durably::db::Error) -> bool {
    matches!(error, durably::db::Error::Postgres(error)
        if error.kind() == durably::db::PgErrorKind::ConnectionLost)
}

/// Without PostgreSQL, no error is a lost connection.
#[cfg(not(feature = "postgres"))]
pub fn connection_lost(_error: &durably::db::Error) -> bool {
    false
}

#[cfg(test)]
mod tests {
    //! What these prove: the codes a program branches on are what docs/cli.md documents. Each
    //! code is snake_case and unique, and appears in the table of docs/cli.md ("Error codes")
    //! with its exit code, in the enum's order, and the table lists no other code.
    use std::collections::HashSet;

    use super::ErrorCode;

    const CLI_DOC: &str = include_str!("../../../docs/cli.md");

    /// The rows of the error-code table: (code, exit code), in order.
    fn documented() -> Vec<(String, String)> {
        let table = CLI_DOC
            .split("## Error codes")
            .nth(1)
            .expect("docs/cli.md has an \"Error codes\" section");
        table
            .lines()
            .skip_while(|line| !line.starts_with("| `"))
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
            })
            .collect()
    }

    #[test]
    fn codes_are_snake_case_and_unique() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(
                text.bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte == b'_'),
                "{text}"
            );
            assert!(seen.insert(text), "{text} twice");
        }
    }

    #[test]
    fn the_documented_table_is_the_list_of_codes() {
        let expected: Vec<(String, String)> = ErrorCode::ALL
            .iter()
            .map(|code| (code.as_str().to_owned(), code.exit_code().to_string()))
            .collect();
        assert_eq!(documented(), expected);
    }
}
