//! A runtime for durable workflows on the journal's SQLite file: registered workflow kinds run
//! by any process that serves them, queues with limits that hold across processes, messages
//! sent to executions, and results awaited from anywhere. Its rows live in its own tables
//! beside the journal's (owner `runtime`, `schema/runtime/`).
//!
//! A [`Runtime`] registers workflow functions (typed input and output, no macros) and runs the
//! queued executions of its kinds, within every [`QueueConfig`] limit. A workflow's
//! [`WorkflowContext`] runs its steps, and waits durably: `sleep` and `recv` record their wake
//! time or deadline as steps, so a resumed execution waits only what is left, and a wait
//! longer than [`RuntimeBuilder::park_after`] parks the execution (a row, no lock, no task)
//! until its time or a message wakes it in any process serving its kind. A [`Client`], which a
//! runtime also is, starts executions (durable on return, idempotent by id), sends them
//! messages (kept until a `recv` step of the receiver consumes them, delivered once per
//! idempotency key), reads published events, and awaits results through a
//! [`WorkflowHandle`], woken by a watcher that notices other processes' commits. Every bad
//! input (an unknown kind, a wrong type, a name with a control character, an oversized
//! payload, a receiver that does not exist or has ended) is a typed [`Error`] and leaves the
//! journal unchanged. Time comes from a [`Clock`]; tests use [`testing::TestClock`] and move
//! it instead of sleeping.
//!
//! Code changes while executions are in flight: each execution runs only on the (kind,
//! version) it started with, [`WorkflowContext::patched`] branches code within a version
//! (its answer recorded, never flipping), a replay that meets a code change parks the
//! execution `stuck` with the diff, and [`Client::fork`] copies an ended execution's steps
//! before a seq into a new one that runs the rest on current code.
//!
//! ```
//! use durably_journal::Journal;
//! use durably_runtime::{Error, Runtime, StartOptions, WorkflowContext, WorkflowError};
//!
//! async fn refund(ctx: WorkflowContext, order: u32) -> Result<String, WorkflowError> {
//!     let amount: u32 = ctx.pure("look up", || async move { Ok(order * 100) }).await?;
//!     let receipt = ctx
//!         .idempotent("refund", |key| async move { Ok(format!("{amount} cents, key {key}")) })
//!         .await?;
//!     Ok(receipt)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let journal = Journal::open(dir.path().join("journal.db"))?;
//! let runtime = Runtime::builder(journal).register("refund", 1, refund).start().await?;
//!
//! // Durable when `start` returns; the same id again returns the same execution.
//! let id = durably_journal::new_execution_id();
//! let handle = runtime.start::<_, String>("refund", id, &42_u32, StartOptions::default()).await?;
//! assert!(handle.result().await?.starts_with("4200 cents"));
//!
//! // Bad input is refused before anything is written.
//! let wrong = runtime.start::<_, String>("refund", id, &"42", StartOptions::default()).await;
//! assert!(matches!(wrong, Err(Error::WrongType { what: "input", .. })));
//! let nobody = durably_journal::new_execution_id();
//! let refused = runtime.send(nobody, "approval", &true, Some("click-1")).await;
//! assert!(matches!(refused, Err(Error::ReceiverNotFound { .. })));
//! # Ok(())
//! # }
//! ```
//!
//! # Parallel steps
//!
//! Steps take `&self`, so several steps of one execution run at once with `tokio::join!`,
//! `futures::join!` or, for a width known only at run time, [`join_all`]. Each step's seq is
//! reserved when its method is CALLED (a compound step such as `recv` reserves all of its seqs
//! then), never when its future is first polled, so the steps keep their call order in the
//! journal whatever order they finish in, and a resumed run replays each recorded step at once,
//! even while its siblings still run. Each step keeps its own effect, policy and idempotency
//! key. Determinism asks three things of the workflow:
//! - issue steps in a deterministic order: never decide which step to call next from which
//!   sibling finished first (a later call may depend on a result, once it has it);
//! - never race steps with `select!`: the loser's future is dropped half way, which halts the
//!   execution like a crash inside that step would (the run stops, and resumes later);
//! - never call steps from spawned tasks: their call order would depend on scheduling.
//!
//! A wait (`sleep`, `recv`) that starts while other steps of the execution are in flight waits
//! in memory instead of parking, since parking ends the run and every step in it.
//!
//! ```
//! use durably_journal::{Journal, Policy};
//! use durably_runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError, join_all};
//!
//! async fn fan_out(ctx: WorkflowContext, tools: u32) -> Result<(u32, Vec<u32>), WorkflowError> {
//!     // Three different steps at once: seqs 0, 1 and 2, in call order.
//!     let (weather, news, charged) = tokio::join!(
//!         ctx.idempotent("weather", |_| async { Ok(20_u32) }),
//!         ctx.pure("news", || async { Ok(3_u32) }),
//!         ctx.guarded("charge", Policy::Retry, |_| async { Ok(1_u32) }),
//!     );
//!     let charged = charged?.into_result().map_err(|s| WorkflowError::new(s.to_string()))?;
//!     // A fan-out as wide as the input: seqs 3, 4, ... in the iterator's order.
//!     let names: Vec<String> = (0..tools).map(|tool| format!("tool {tool}")).collect();
//!     let mut calls = Vec::new();
//!     for (name, tool) in names.iter().zip(0..) {
//!         calls.push(ctx.pure(name, move || async move { Ok(tool * 10) }));
//!     }
//!     let results = join_all(calls).await.into_iter().collect::<Result<Vec<u32>, _>>()?;
//!     Ok((weather? + news? + charged, results))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let journal = Journal::open(dir.path().join("journal.db"))?;
//! let runtime = Runtime::builder(journal.clone()).register("fan-out", 1, fan_out).start().await?;
//! let id = durably_journal::new_execution_id();
//! let handle = runtime.start::<_, (u32, Vec<u32>)>("fan-out", id, &3_u32, StartOptions::default()).await?;
//! assert_eq!(handle.result().await?, (24, vec![0, 10, 20]));
//! let names: Vec<String> = journal.steps(id)?.into_iter().map(|step| step.name).collect();
//! assert_eq!(names, ["weather", "news", "charge", "tool 0", "tool 1", "tool 2"]);
//! # Ok(())
//! # }
//! ```

mod builder;
mod cancel;
mod capacity;
mod children;
mod claims;
mod client;
mod clock;
mod context;
mod deadlines;
mod dispatcher;
mod diverged;
mod error;
mod events;
mod fork;
mod handle;
mod handover;
mod join;
mod messages;
mod names;
mod options;
mod parking;
mod patches;
mod payload;
mod recovery;
mod registry;
mod resume;
mod run;
mod runs;
mod runtime;
mod start;
mod steps;
mod store;
mod task;
pub mod telemetry;
mod timers;
mod waiting;
mod watcher;

pub use builder::{CONCURRENCY_MAX_DEFAULT, QueueConfig, RuntimeBuilder, SWEEP_INTERVAL_DEFAULT};
pub use cancel::CancelSignal;
pub use children::{
    CHILD_ERROR_BYTES_MAX, ChildHandle, ChildOptions, child_execution_id, child_topic,
};
pub use client::{Client, SendOutcome};
pub use clock::{Clock, Sleep, SystemClock, testing};
pub use context::WorkflowContext;
pub use deadlines::DEADLINE_REASON;
pub use diverged::NON_DETERMINISM_REASON;
pub use durably_journal::CancelOutcome;
pub use error::{Error, Result, WorkflowError};
pub use fork::{EVENT_FORKED, EVENT_FORKED_FROM, ForkOptions, ForkRefusal};
pub use handle::WorkflowHandle;
pub use join::join_all;
pub use messages::MESSAGE_ENVELOPE_BYTES;
pub use names::{KEY_BYTES_MAX, KIND_BYTES_MAX};
pub use options::{Deadline, OnDuplicate, ResumeOptions, StartOptions};
pub use patches::{PATCH_HOLDOUTS_MAX, PatchHoldouts, PatchUse};
pub use recovery::{OTHER_VERSIONS_SCAN_MAX, RESUME_FAILURES_MAX_DEFAULT, RecoveryReport};
pub use runtime::Runtime;
pub use start::{PreparedStart, StartOutcome};
pub use steps::StepBuilder;
pub use waiting::PARK_AFTER_DEFAULT;
