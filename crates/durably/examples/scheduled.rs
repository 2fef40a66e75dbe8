//! A daily job as a registered workflow: every morning at 07:00 in Paris, the day's digest is
//! collected and mailed. Each fire of the job is an execution of the workflow
//! `daily-digest`, with the whole workflow API (here two steps: a pure one and a guarded,
//! reconciled mail), run and recovered by the runtime like any other execution. Its id, the
//! fire id, is derived from the job and the slot alone, so each slot runs once across
//! restarts and across processes, and the mailer gets it as the idempotency key.
//!
//! The example runs the scheduler's loop, and, so that it finishes in seconds instead of
//! waiting for 07:00, also:
//! - backfills three past days (fixed dates, so the fire ids it prints are the same on every
//!   machine);
//! - triggers the job now: the upcoming slot runs at once, and will not run again when its
//!   time comes.
//!
//! The catch-up policy `Latest` makes the loop's first pass also fire the latest slot that has
//! passed (a machine that was off at 07:00 sends that day's digest when it is back). It prints
//! every fire id, then exits. Run it again: every slot is found already done, and nothing is
//! mailed twice.
//!
//! The fake mailer is in `examples/support/fake_provider.rs`.
//!
//! ```sh
//! cargo run -p durably --example scheduled -- scheduled.db
//! durably --db scheduled.db fires            # the fires, their slots and states
//! durably --db scheduled.db schedules        # the job, its next slot, its fires by state
//! ```

#[path = "support/fake_provider.rs"]
mod fake_provider;

use std::path::Path;

use durably::runtime::{Runtime, WorkflowContext, WorkflowError};
use durably::scheduler::{CatchUp, Fire, FireOutcome, Job, JobId, Registration, Scheduler, Slot};
use durably::{Journal, StepError};
use fake_provider::FakeProvider;

/// The workflow kind each fire starts.
const KIND: &str = "daily-digest";
/// The job.
const JOB: &str = "daily-digest";
/// Every day at 07:00, Paris time.
const CRON: &str = "0 7 * * *";
/// The time zone of [`CRON`].
const TIME_ZONE: &str = "Europe/Paris";
/// The first instant backfilled: 2026-01-01T00:00:00Z.
const BACKFILL_FROM_MS: i64 = 1_767_225_600_000;
/// The last instant backfilled: 2026-01-03T23:59:59Z, so three slots.
const BACKFILL_TO_MS: i64 = BACKFILL_FROM_MS + 3 * 86_400_000 - 1_000;

/// One fire: collects the day's items and mails the digest once.
async fn daily_digest(
    ctx: WorkflowContext,
    fire: Fire,
    mailer: FakeProvider,
) -> Result<String, WorkflowError> {
    let day = fire.slot.to_datetime().format("%Y-%m-%d").to_string();
    let slot_ms = fire.slot.as_millis();
    // A fake collection: a deterministic count of the day's items.
    let items: u32 = ctx
        .pure("collect", || async move {
            Ok((slot_ms / 86_400_000 % 17) as u32)
        })
        .await?;
    // A mail cannot be unsent: guarded, and reconciled with the mailer's records after a
    // crash in its window, so a crashed fire is never mailed twice.
    let mailed = ctx
        .guarded("mail digest", mailer.reconcile(), |key| {
            let (mailer, day) = (&mailer, &day);
            async move {
                let digest = format!("digest of {day}: {items} item(s)");
                mailer.serve(key.idempotency_key(), &digest)
            }
        })
        .await?;
    mailed
        .into_result()
        .map_err(|skipped| WorkflowError::new(skipped.to_string()))
}

/// What happened to one fire, in words.
fn what_happened(outcome: &FireOutcome) -> String {
    match outcome {
        FireOutcome::Started { .. } => "started now".to_owned(),
        FireOutcome::Existing { state, .. } => format!("found {state}: not run again"),
        FireOutcome::Skipped { reason, .. } => format!("skipped: {reason}"),
        _ => "decided".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "scheduled.db".to_owned());
    let mailer = FakeProvider::next_to(Path::new(&db), "mailer");
    let serving = mailer.clone();
    let runtime = Runtime::builder(Journal::open(&db)?)
        .register(KIND, 1, move |ctx, fire| {
            daily_digest(ctx, fire, serving.clone())
        })
        .start()
        .await?;

    let scheduler = Scheduler::new((*runtime).clone()).await?;
    let job = Job::builder(JOB)
        .cron(CRON, TIME_ZONE)
        .catch_up(CatchUp::Latest)
        .workflow(KIND)
        .build()?;
    let registration = scheduler.register(job).await?;
    println!(
        "job {JOB}: {}",
        match registration {
            Registration::New => "registered",
            _ => "known from an earlier run",
        }
    );
    let job = JobId::new(JOB)?;

    // The loop's first pass, then the loop itself, in the background, until the end.
    let mut fires: Vec<(Slot, FireOutcome)> = scheduler
        .run_once()
        .await
        .fires
        .into_iter()
        .map(|fire| (fire.slot, fire.outcome))
        .collect();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let looping = tokio::spawn({
        let scheduler = scheduler.clone();
        async move {
            scheduler
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        }
    });

    let from = Slot::from_millis(BACKFILL_FROM_MS)?;
    let to = Slot::from_millis(BACKFILL_TO_MS)?;
    fires.extend(scheduler.backfill(&job, from, to).await?);
    fires.push(scheduler.trigger(&job).await?);

    for (slot, outcome) in &fires {
        let id = outcome.execution_id();
        let happened = what_happened(outcome);
        if matches!(outcome, FireOutcome::Skipped { .. }) {
            println!("fire {id} (slot {slot}): {happened}");
            continue;
        }
        let digest: String = runtime.handle(id).result().await?;
        let mails = mailer.served(
            runtime
                .journal()
                .steps(id)?
                .into_iter()
                .find(|step| step.name == "mail digest")
                .map(|step| step.idempotency_key)
                .ok_or_else(|| StepError::fatal(format!("fire {id} has no mail step")))?,
        )?;
        println!("fire {id} (slot {slot}): {happened}; {digest}; mailed {mails} time(s)");
    }

    let _ = stop.send(());
    looping.await?;
    println!("see them with: durably --db {db} fires");
    Ok(())
}
