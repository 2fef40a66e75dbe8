//! The ids and paths an error concerns, as `--json` prints them beside its code, so that a
//! program acts on the execution, step, process or file without parsing the message.
//!
//! Field names are stable, and mean the same in every error: `execution_id`, `seq` (a step),
//! `pid` (a lock holder), `status` (an execution status), `path` (a file), `kind`, `queue`,
//! `job`, `message_id`, and `existing_execution_id`, `child_execution_id`, `seen` and `now`
//! where an error names those. Only what the error itself carries is given: never a payload.

use std::path::Path;

use durably::Status;
use serde_json::Value;
use uuid::Uuid;

/// Field names and values, in the order they are printed.
pub type Fields = Vec<(&'static str, Value)>;

/// The `execution_id` field.
pub fn execution(id: &Uuid) -> (&'static str, Value) {
    ("execution_id", id.to_string().into())
}

/// The `path` field.
pub fn path(path: &Path) -> (&'static str, Value) {
    ("path", path.display().to_string().into())
}

/// The `path` field of `--db`: a SQLite file's path, or a PostgreSQL URL with its password
/// hidden.
pub fn database(place: &durably::db::Target) -> (&'static str, Value) {
    ("path", place.to_string().into())
}

fn step(id: &Uuid, seq: u32) -> Fields {
    vec![execution(id), ("seq", seq.into())]
}

fn with_status(id: &Uuid, status: Status) -> Fields {
    vec![execution(id), ("status", status.as_str().into())]
}

/// The fields of a journal error.
pub fn of_journal(error: &durably::Error) -> Fields {
    use durably::Error as E;
    use durably::lock::Error as L;
    match error {
        E::Locked {
            execution_id, pid, ..
        } => vec![execution(execution_id), ("pid", (*pid).into())],
        E::LeaseExpiredHolderAlive {
            execution_id,
            seq,
            pid,
            ..
        } => {
            let mut fields = step(execution_id, *seq);
            fields.push(("pid", (*pid).into()));
            fields
        }
        E::StaleSeenIntent {
            execution_id,
            seq,
            seen,
            now,
        } => {
            let mut fields = step(execution_id, *seq);
            fields.push(("seen", seen.to_string().into()));
            fields.push(("now", now.map(|now| now.to_string()).into()));
            fields
        }
        E::Ambiguous {
            execution_id, seq, ..
        }
        | E::AwaitingOperator { execution_id, seq }
        | E::NonDeterminism {
            execution_id, seq, ..
        }
        | E::Halted { execution_id, seq } => step(execution_id, *seq),
        E::NotRunnable {
            execution_id,
            status,
        } => with_status(execution_id, *status),
        E::NotFound(id)
        | E::Cancelled(id)
        | E::OpenRaced(id)
        | E::CancelRequested {
            execution_id: id, ..
        } => vec![execution(id)],
        E::SchemaTooNew { path: file, .. }
        | E::ExtensionSchemaTooNew { path: file, .. }
        | E::ForeignDatabase { path: file, .. }
        | E::Corrupt { path: file, .. }
        | E::NotAJournal { path: file, .. }
        | E::SchemaTooOld { path: file, .. }
        | E::ReadTimeout { path: file, .. }
        | E::PathTooLong { path: file, .. }
        | E::NeedsRecovery { path: file, .. }
        | E::ChangedWhileReading { path: file, .. }
        | E::CannotOpen { path: file, .. }
        | E::UnsafeFile { path: file, .. }
        | E::DanglingSymlink { path: file, .. }
        | E::ReadOnly { path: file, .. }
        | E::Io { path: file, .. }
        | E::Lock(
            L::LivenessDirRefused { path: file, .. }
            | L::LivenessDir { path: file, .. }
            | L::Identity { path: file, .. }
            | L::ProcFormat { path: file, .. },
        ) if !file.as_os_str().is_empty() => vec![path(file)],
        _ => Vec::new(),
    }
}

/// The fields of a runtime error.
pub fn of_runtime(error: &durably::runtime::Error) -> Fields {
    use durably::runtime::Error as E;
    match error {
        E::UnknownKind { kind } => vec![("kind", kind.as_str().into())],
        E::UnknownQueue { queue } => vec![("queue", queue.as_str().into())],
        E::IdConflict {
            execution_id, kind, ..
        } => vec![execution(execution_id), ("kind", kind.as_str().into())],
        E::Duplicate {
            queue, existing, ..
        } => vec![
            ("existing_execution_id", existing.to_string().into()),
            ("queue", queue.as_str().into()),
        ],
        E::ReceiverFinished {
            execution_id,
            status,
        }
        | E::AlreadyEnded {
            execution_id,
            status,
        }
        | E::NotResumable {
            execution_id,
            status,
        } => with_status(execution_id, *status),
        E::IdempotencyKeyReused {
            execution_id,
            message_id,
            ..
        } => vec![
            execution(execution_id),
            ("message_id", (*message_id).into()),
        ],
        E::StepTimedOut {
            execution_id, seq, ..
        } => step(execution_id, *seq),
        E::ChildFailed { child_id, .. } | E::ChildCancelled { child_id, .. } => {
            vec![("child_execution_id", child_id.to_string().into())]
        }
        E::NotFound(id)
        | E::ReceiverNotFound { execution_id: id }
        | E::NotRuntimeExecution { execution_id: id }
        | E::RunStopped {
            execution_id: id, ..
        }
        | E::WorkflowFailed {
            execution_id: id, ..
        }
        | E::Cancelled {
            execution_id: id, ..
        }
        | E::OutputType {
            execution_id: id, ..
        }
        | E::ForkRefused {
            execution_id: id, ..
        }
        | E::StepAfterEnd { execution_id: id } => vec![execution(id)],
        E::Journal(error) => of_journal(error),
        _ => Vec::new(),
    }
}

/// The fields of a scheduler error.
pub fn of_scheduler(error: &durably::scheduler::Error) -> Fields {
    use durably::scheduler::Error as E;
    match error {
        E::NotASlot { job, slot } | E::SlotInFuture { job, slot, .. } => {
            vec![("job", job.as_str().into()), ("slot", slot.as_str().into())]
        }
        E::UnknownJob { job }
        | E::JobPaused { job }
        | E::JobNeedsWorkflow { job }
        | E::NoSlotsLeft { job, .. }
        | E::InvalidJob { job, .. }
        | E::RangeReversed { job, .. }
        | E::EmptyRange { job, .. }
        | E::RangeInFuture { job, .. }
        | E::TooManySlots { job, .. } => vec![("job", job.as_str().into())],
        E::Start(error) => of_runtime(error),
        E::Journal(error) => of_journal(error),
        _ => Vec::new(),
    }
}
