//! Durable executions and steps on one SQLite file.
//!
//! An [`Execution`] is opened exclusively (a [`durably_lock`] lock plus its row, in one
//! transaction) and driven step by step. Each step is journaled: a pure or idempotent step's
//! result in one commit; a guarded step's intent before its closure runs and its result after.
//! On a later run, recorded steps return their recorded outcome without running anything, and a
//! guarded step found with an intent but no result is handled by its [`Policy`].
//!
//! Every write goes through one group-commit writer thread: requests queued while a commit is
//! in flight share the next `BEGIN IMMEDIATE ... COMMIT`, and each is acknowledged only after
//! that commit has returned and, with [`Durability::Full`], after an fsync of the WAL that
//! began after it. That fsync runs on a second thread while the writer runs the next batch.
//!
//! With the `postgres` feature, a journal also lives in a PostgreSQL database:
//! `Journal::open("postgresql://…")` (the schema is the URL's `search_path`). There the
//! writer is a set of worker threads, each with its own session and one transaction per
//! request, and all the requests about one execution go to one worker, in order; the server's
//! own group commit takes the place of batching.
//!
//! To read a journal without writing to it (a tool inspecting another program's file),
//! [`Journal::inspect`] opens an [`Inspector`]: read-only, with no lock instance, no migration
//! and no file created.
//!
//! ```
//! use durably_journal::{Guarded, Journal, Opened, Policy, StepError};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let journal = Journal::open(dir.path().join("journal.db"))?;
//! // Time-ordered ids keep the journal's writes together; any UUID works.
//! let id = durably_journal::new_execution_id();
//!
//! let Opened::Running(execution) =
//!     journal.open_execution(id, "refund", "refund order 42", &42).await?
//! else {
//!     unreachable!("a new execution is never finished");
//! };
//! let amount: u32 = execution.pure("look up", || async { Ok(1250) }).await?;
//! let charged = execution
//!     .guarded("refund", Policy::Fail, |key| async move {
//!         // Hand `key` to the payment provider so it can deduplicate.
//!         Ok::<_, StepError>(format!("refund {amount} with key {key}"))
//!     })
//!     .await?;
//! let Guarded::Done(receipt) = charged else { unreachable!("nothing crashed") };
//! execution.complete(&receipt).await?;
//!
//! // Opening it again runs nothing: the outcome is recorded.
//! assert!(matches!(journal.open_execution(id, "refund", "", &42).await?, Opened::Finished(_)));
//! # Ok(())
//! # }
//! ```

mod backend;
mod begin;
mod changes;
mod claim;
mod config;
pub mod copy;
mod error;
mod events;
mod execution;
mod execution_id;
mod extension;
mod files;
pub mod forks;
mod handles;
mod inspect;
mod inspector;
mod journal;
pub mod lifecycle;
mod open;
mod operator;
mod ownership;
mod payload;
#[cfg(feature = "postgres")]
mod pg;
mod readers;
mod records;
mod replay;
mod seen_intent;
mod states;
mod step;
mod storage;
mod sweep;
pub mod telemetry;
mod writer;

pub use begin::Begun;
pub use claim::{Claim, ClaimedRow, Claimer};
pub use config::{
    AMBIGUOUS_RERUNS_MAX_DEFAULT, BUSY_TIMEOUT_MS_DEFAULT, COMPLETED_RETENTION_DEFAULT, Durability,
    FAILED_RETENTION_DEFAULT, JournalBuilder, PAYLOAD_BYTES_MAX_DEFAULT, PG_POLL_MS_DEFAULT,
    PG_WRITERS_DEFAULT, READ_TIMEOUT_MS_DEFAULT, READERS_MAX_DEFAULT, RetryPolicy,
};
pub use copy::{CopyError, CopyReport, TableCopied, copy_journal};
pub use error::{AmbiguityReason, Error, Result, UnsafeFileReason};
pub use execution::{
    DEFERRED_BYTES_MAX, DEFERRED_STEPS_MAX, Execution, Release, Reservation,
    STATUS_DETAIL_BYTES_MAX, StepRef, Timing,
};
pub use execution_id::new_execution_id;
pub use extension::{
    ExtensionSchema, PgSchema, ambiguous_step_exists, execution_status, record_event,
    step_attempts_total,
};
pub use inspect::Previews;
pub use inspector::Inspector;
pub use journal::Journal;
pub use open::{Finished, Opened};
pub use operator::{CancelOutcome, Operator, Resolution};
pub use payload::{PREVIEW_CHARS_MAX, Payload, PayloadPreview};
pub use records::{
    AwaitingOperatorStep, EventRecord, ExecutionRecord, LIST_LIMIT_DEFAULT, ListFilter, StepRecord,
    event_kind,
};
pub use seen_intent::{SeenIntent, SeenIntentParseError};
pub use states::{PolicyKind, Status, StepState, UnknownWord};
pub use step::{
    Effect, FencingToken, Guarded, IdempotencyKey, Policy, ReconcileFuture, ReconcileProbe,
    Skipped, StepError, StepKey,
};
pub use storage::{APPLICATION_ID, Migration, SCHEMA_VERSION};
pub use sweep::{
    GC_BATCH_EXECUTIONS_DEFAULT, GC_BATCH_ROWS_MAX, GcOptions, GcReport, Reclaimed,
    SWEEP_BATCH_LOCKS_MAX, SweepReport,
};
pub use writer::WriterStats;

/// Re-exported so users of [`Journal::write`] and [`Journal::read`] name the same
/// [`durably_db::Connection`] the journal hands them.
pub use durably_db;
/// Re-exported for code that works on a journal's SQLite file itself (through
/// [`durably_db::Connection::as_sqlite`]).
pub use rusqlite;
