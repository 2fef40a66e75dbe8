//! durably's scheduler adapter: scheduled jobs whose every fire runs exactly once, across
//! restarts and across scheduler processes sharing one journal file.
//!
//! - A **fire** is a (job, slot) pair. Its execution id, [`fire_id`], is derived from the job id
//!   and the slot alone, so every process and every restart agrees on it and the journal runs
//!   each fire once.
//! - A **slot** ([`Slot`]) is the nominal time on the schedule's grid, never the time a fire
//!   happened to start.
//! - A [`Schedule`] is a fixed interval through an anchor, or a cron expression in an IANA time
//!   zone.
//! - [`due_slots`] decides, under a [`CatchUp`] policy, which slots to fire after downtime.
//! - A [`Job`] adds the policies and names a **registered workflow** (a kind served by the
//!   runtime, `durably-runtime`): each fire starts an execution of that kind with id
//!   `fire_id(job, slot)` and a [`Fire`] (the job and the slot) as input. The workflow has the
//!   whole `WorkflowContext`: many steps, timers, messages. It runs in any runtime process
//!   serving the kind, under the runtime's queues, limits and crash recovery, and a crash in a
//!   fire follows the workflow's own step policies.
//! - A [`Scheduler`] registers jobs, fires one slot ([`Scheduler::fire`]) and runs the loop
//!   ([`Scheduler::run`]); it also manages every job in the file: list, pause, resume, trigger
//!   now, backfill ([`Scheduler::schedules`]). The slot ledger (tables `jobs`, `fires` and
//!   `skipped_slots`) lives in the journal's own database; this crate owns it, and building a
//!   `Scheduler` creates or migrates it. A fire's ledger row and its execution's start commit
//!   in one transaction, so each slot starts once across processes.
//!
//! Firing a slot starts its execution once; firing it again finds it:
//!
//! ```
//! use std::time::Duration;
//!
//! use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
//! use durably_scheduler::{Fire, FireOutcome, FireState, Job, Journal, Scheduler, Slot};
//!
//! async fn sync(ctx: WorkflowContext, fire: Fire) -> Result<String, WorkflowError> {
//!     // Hand the fire id to the remote side to deduplicate on.
//!     let id = fire.execution_id();
//!     let synced = ctx.pure("sync", || async move { Ok(format!("synced {id}")) }).await?;
//!     Ok(synced)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let journal = Journal::open(dir.path().join("journal.db"))?;
//! let runtime = Runtime::builder(journal).register("sync", 1, sync).start().await?;
//! let scheduler = Scheduler::new((*runtime).clone()).await?;
//! let job = Job::builder("hourly-sync")
//!     .interval(Duration::from_hours(1), 0)
//!     .workflow("sync")
//!     .build()?;
//! let id = job.id().clone();
//! let _ = scheduler.register(job).await?;
//!
//! let slot = Slot::from_millis(1_767_225_600_000)?; // 2026-01-01T00:00:00.000Z
//! let first = scheduler.fire(&id, slot).await?;
//! assert!(matches!(first, FireOutcome::Started { .. }));
//! let output: String = runtime.handle(first.execution_id()).result().await?;
//! assert!(output.starts_with("synced"));
//! let second = scheduler.fire(&id, slot).await?;
//! assert!(matches!(second, FireOutcome::Existing { state: FireState::Completed, .. }));
//! assert_eq!(first.execution_id(), second.execution_id());
//! # Ok(())
//! # }
//! ```
//!
//! The pure pieces work on their own:
//!
//! ```
//! use durably_scheduler::{CatchUp, JobId, Schedule, Slot, SlotCount, due_slots, fire_id};
//!
//! # fn main() -> durably_scheduler::Result<()> {
//! let job = JobId::new("nightly-report")?;
//! let schedule = Schedule::cron("0 2 * * *", "Europe/Berlin")?;
//!
//! // 2026-01-01T00:00:00.000Z
//! let now = Slot::from_millis(1_767_225_600_000)?;
//! let slots = schedule.slots_between(now, Slot::MAX, 2)?;
//! let slots: Vec<String> = slots.iter().map(|slot| slot.to_rfc3339()).collect();
//! // 02:00 in Berlin in winter is 01:00 UTC.
//! assert_eq!(slots, ["2026-01-01T01:00:00.000Z", "2026-01-02T01:00:00.000Z"]);
//!
//! // The fire id depends only on the job and the slot.
//! let id = fire_id(&job, now);
//! assert_eq!(id.to_string(), "b536f2cf-7f95-8a51-8745-e481d1e20d41");
//!
//! // Back after three days down, firing only the latest missed slot.
//! let last_handled = schedule.latest_at_or_before(now)?;
//! let later = Slot::from_millis(now.as_millis() + 3 * 86_400_000)?;
//! let due = due_slots(&schedule, last_handled, later, &CatchUp::Latest)?;
//! assert_eq!(due.fire.len(), 1);
//! assert_eq!(due.fire[0].to_rfc3339(), "2026-01-03T01:00:00.000Z");
//! let skipped = due.skipped.expect("two slots were missed before the latest");
//! assert_eq!(skipped.first.to_rfc3339(), "2026-01-01T01:00:00.000Z");
//! assert_eq!(skipped.count, SlotCount::Exact(2));
//! # Ok(())
//! # }
//! ```

mod catch_up;
mod drive;
mod error;
mod fire_id;
mod job;
mod job_id;
mod ledger;
mod manage;
mod outcome;
mod run;
mod schedule;
mod scheduler;
mod slot;
pub mod telemetry;

pub use catch_up::{
    CATCH_UP_SLOTS_MAX, CatchUp, DueSlots, Overlap, SKIP_LATENESS_MS_MAX,
    SKIPPED_SLOTS_COUNTED_MAX, SkippedSlots, SlotCount, due_slots,
};
pub use error::{Error, Result};
pub use fire_id::{Fire, fire_id};
pub use job::{Job, JobBuilder};
pub use job_id::{JOB_ID_BYTES_MAX, JobId};
pub use manage::{BACKFILL_SLOTS_MAX, JobSummary};
pub use outcome::{FireOutcome, FireReport, FireState, PassReport, Registration};
pub use schedule::{
    CRON_EXPR_BYTES_MAX, CronSchedule, INTERVAL_MILLIS_MAX, IntervalSchedule, Schedule,
};
pub use scheduler::{Scheduler, SchedulerBuilder, TICK_MAX_DEFAULT};
pub use slot::{SLOT_MILLIS_MAX, SLOT_MILLIS_MIN, Slot};

/// Re-exported so a scheduler's setup names the journal it works on.
pub use durably_journal::Journal;
