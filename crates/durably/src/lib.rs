//! Durable execution on one SQLite file.
//!
//! A program that links `durably` (an agent, a daemon, a scheduler) survives crashes without
//! silently repeating or silently dropping a side effect. Every step of an execution is
//! journaled; after a crash the program reopens the execution, committed steps return their
//! recorded results without running again, and a guarded step caught between its intent and
//! its result is handled by the [`Policy`] its author chose.
//!
//! This is the one crate to depend on. Its root holds the everyday API: open a [`Journal`],
//! open an [`Execution`], run its steps, and read the records, also through an [`Inspector`]
//! that only reads (it never writes, migrates or creates a file). The rest sits in modules:
//! - [`operator`]: cancel, resolve an ambiguous step, sweep dead processes' executions,
//!   retention;
//! - [`runtime`]: registered workflows run by any process that serves their kind, within
//!   queue limits, recovered after crashes; messages sent to executions and results awaited
//!   from any process;
//! - [`scheduler`]: scheduled jobs whose fires each start a registered workflow once, and their
//!   management (list, pause, resume, trigger, backfill);
//! - [`lock`]: exclusive-open locks, liveness judgement and fencing epochs;
//! - [`defaults`]: the default of every journal setting;
//! - [`observability`]: the names of the `tracing` spans and `metrics` metrics it records;
//! - [`db`]: the connection the journal hands out ([`Journal::write`], [`Journal::read`], the
//!   hooks), the same over SQLite and PostgreSQL, with rusqlite's calling shape;
//! - [`sqlite`]: the database driver, for programs that keep their own rows in the journal's
//!   transactions.
//!
//! # An agent that crashes and resumes
//!
//! The first run below stops inside the third step, after its intent committed: it is the
//! crash. (A real crash would be a killed process; dropping the handle mid-step leaves the same
//! journal behind. The closure runs only once the intent is durable, so its start is the
//! moment to "crash".) The second run replays the first two steps without calling their
//! closures, finds the third step ambiguous, and its `Retry` policy runs it once more with the
//! same idempotency key.
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! use durably::{Guarded, Journal, Opened, Policy, StepError};
//!
//! static PLANS: AtomicU32 = AtomicU32::new(0);
//! static EMAILS: AtomicU32 = AtomicU32::new(0);
//!
//! async fn agent(journal: &Journal, id: uuid::Uuid, crash: bool) -> durably::Result<()> {
//!     let Opened::Running(mut run) = journal.open_execution(id, "agent", "triage", &"ticket 7").await?
//!     else {
//!         return Ok(()); // Already finished: nothing runs.
//!     };
//!     let plan: String = run.pure("plan", || async {
//!         PLANS.fetch_add(1, Ordering::SeqCst);
//!         Ok("reply to the customer".to_owned())
//!     }).await?;
//!     let ticket: u32 = run.idempotent("fetch ticket", |_key| async { Ok(7) }).await?;
//!     let plan = &plan; // Closures may run more than once, so they borrow rather than move.
//!     let intent_durable = &tokio::sync::Notify::new();
//!     let sent = run.guarded("send email", Policy::Retry, |key| async move {
//!         if crash {
//!             // Simulated crash: the intent is durable, the effect never reports back.
//!             intent_durable.notify_one();
//!             std::future::pending::<()>().await;
//!         }
//!         EMAILS.fetch_add(1, Ordering::SeqCst);
//!         Ok::<_, StepError>(format!("ticket {ticket}: {plan} (key {key})"))
//!     });
//!     if crash {
//!         tokio::select! {
//!             _ = sent => unreachable!("the crashed step never reports back"),
//!             () = intent_durable.notified() => return Ok(()), // "crash" here
//!         }
//!     }
//!     match sent.await? {
//!         Guarded::Done(receipt) => run.complete(&receipt).await,
//!         Guarded::Skipped(skipped) => run.fail(&skipped.to_string()).await,
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let journal = Journal::open(dir.path().join("agent.db"))?;
//! let id = durably::new_execution_id(); // time-ordered; any UUID works
//!
//! agent(&journal, id, true).await?; // crashes inside "send email"
//! assert_eq!(journal.steps(id)?[2].state, durably_journal::StepState::Intent);
//!
//! agent(&journal, id, false).await?; // resumes
//! assert_eq!(PLANS.load(Ordering::SeqCst), 1, "the plan was replayed, not recomputed");
//! assert_eq!(EMAILS.load(Ordering::SeqCst), 1, "the email was sent once");
//! assert_eq!(journal.get(id)?.map(|record| record.status), Some(durably::Status::Completed));
//! # Ok(())
//! # }
//! ```

pub use durably_journal::{
    AmbiguityReason, AwaitingOperatorStep, Begun, DEFERRED_BYTES_MAX, DEFERRED_STEPS_MAX,
    Durability, Effect, Error, EventRecord, Execution, ExecutionRecord, FencingToken, Finished,
    Guarded, IdempotencyKey, Inspector, Journal, JournalBuilder, ListFilter, Opened,
    PREVIEW_CHARS_MAX, Payload, PayloadPreview, Policy, PolicyKind, Previews, ReconcileFuture,
    ReconcileProbe, Release, Result, RetryPolicy, STATUS_DETAIL_BYTES_MAX, Skipped, Status,
    StepError, StepKey, StepRecord, StepRef, StepState, Timing, UnknownWord, UnsafeFileReason,
    event_kind, new_execution_id,
};

/// Copying a whole journal into an empty one on another backend (`durably copy`).
pub use durably_journal::copy;

/// Operator actions: `journal.operator()` and what its actions take and report.
pub mod operator {
    pub use durably_journal::{
        CancelOutcome, GcOptions, GcReport, Operator, Reclaimed, Resolution, SWEEP_BATCH_LOCKS_MAX,
        SeenIntent, SeenIntentParseError, SweepReport,
    };
}

/// The default of every journal setting, as [`crate::JournalBuilder`] applies it.
pub mod defaults {
    pub use durably_journal::{
        AMBIGUOUS_RERUNS_MAX_DEFAULT, BUSY_TIMEOUT_MS_DEFAULT, COMPLETED_RETENTION_DEFAULT,
        FAILED_RETENTION_DEFAULT, GC_BATCH_EXECUTIONS_DEFAULT, LIST_LIMIT_DEFAULT,
        PAYLOAD_BYTES_MAX_DEFAULT, PG_POLL_MS_DEFAULT, PG_WRITERS_DEFAULT, READ_TIMEOUT_MS_DEFAULT,
        READERS_MAX_DEFAULT,
    };
}

/// The SQLite driver and file format, for programs that write their own rows in the journal's
/// transactions ([`crate::Journal::write`], [`crate::Execution::complete_with`]), keep their own
/// tables in its file ([`crate::Journal::migrate_extension`]), and read the few journal facts
/// such programs need without SQL on the journal's tables.
pub mod sqlite {
    pub use durably_journal::lifecycle::queue_positions;
    pub use durably_journal::{
        APPLICATION_ID, ExtensionSchema, Migration, PgSchema, SCHEMA_VERSION, WriterStats,
        ambiguous_step_exists, execution_status, record_event, rusqlite, step_attempts_total,
    };
}

pub mod observability;

/// The driver-neutral connection the journal hands out ([`crate::Journal::write`],
/// [`crate::Journal::read`], [`crate::Execution::complete_with`]): rusqlite's calling shape
/// (`execute`, `query_row`, `prepare_cached`, `params!`, `OptionalExtension`) over either
/// backend, with `?N` placeholders on both. What only SQLite has is under
/// [`db::Connection::as_sqlite`], with [`sqlite::rusqlite`].
pub use durably_journal::durably_db as db;

/// Exclusive-open locks, liveness judgement and fencing epochs.
pub use durably_lock as lock;

/// Registered workflows: typed starts, queues with limits across processes, recovery,
/// messages, results awaited from any process, and an injectable clock for tests.
pub use durably_runtime as runtime;

/// Scheduled jobs: deterministic fire ids, schedules, catch-up and overlap, the fire loop.
pub use durably_scheduler as scheduler;

/// The README's and the user docs' code, compiled and run as doctests so it cannot rot.
#[cfg(doctest)]
mod user_docs;
