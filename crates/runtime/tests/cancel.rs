//! Cancellation, resume and deadlines in one process (plan §4.6, §9): a running execution
//! asked to stop ends `cancelled` before its next step, with no step recorded after the
//! request, and at once while it waits; queued and parked executions are cancelled at once; a deadline cancels parked and
//! running executions with reason `timeout`; a resume continues from the last recorded step;
//! bad cancels and resumes are typed errors that change nothing.
//!
//! Method: workflows report to the test through a shared probe and hold inside a step until
//! their run is asked to stop, so each cancel lands at a known point without sleeping; a
//! `sleeper` workflow parks on a long timer (`waiting`). Time is a `TestClock` the test moves.
//! `stuck`, which takes three failed runs to reach, is set with SQL, as parking writes it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::{
    CancelOutcome, Client, Deadline, Error, ResumeOptions, Runtime, RuntimeBuilder, StartOptions,
    WorkflowContext, WorkflowError, WorkflowHandle,
};
use support::{Clocked, Scratch, cancelled_reason, request_and_newest_row, step_names};
use tokio::sync::Notify;
use uuid::Uuid;

/// What the `stepper` workflow shares with the test.
#[derive(Default)]
struct Probe {
    /// Closure calls of steps `a`, `b`, `c`.
    calls: [AtomicU32; 3],
    /// Notified when step `b`'s closure runs for the first time.
    entered: Notify,
}

impl Probe {
    fn calls(&self) -> [u32; 3] {
        self.calls
            .each_ref()
            .map(|calls| calls.load(Ordering::SeqCst))
    }

    fn count(&self, index: usize) -> u32 {
        self.calls[index].fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Registers `sleeper`, which parks on a timer of a day, and `stepper`: pure step `a`,
/// idempotent step `b`, pure step `c`. `b`'s first call
/// holds until the run is asked to stop, as a closure that gives up long work early does
/// (`WorkflowContext::cancellation`). Runs write behind, so `a`'s result is durable once `b`'s
/// closure starts (an idempotent closure runs only on durable inputs), and `b`'s would ride on
/// a later write.
fn stepper(builder: RuntimeBuilder, probe: &Arc<Probe>) -> RuntimeBuilder {
    let probe = Arc::clone(probe);
    let builder = builder.register(
        "sleeper",
        1,
        |context: WorkflowContext, (): ()| async move {
            context.sleep("nap", Duration::from_hours(24)).await?;
            Ok::<_, WorkflowError>("rested".to_owned())
        },
    );
    builder.register("stepper", 1, move |context: WorkflowContext, (): ()| {
        let probe = Arc::clone(&probe);
        async move {
            let a = Arc::clone(&probe);
            context.pure("a", || async { Ok(a.count(0)) }).await?;
            let cancellation = context.cancellation();
            let b = Arc::clone(&probe);
            context
                .idempotent("b", |_key| {
                    let (b, cancellation) = (Arc::clone(&b), cancellation.clone());
                    async move {
                        if b.count(1) == 1 {
                            b.entered.notify_one();
                            cancellation.cancelled().await;
                        }
                        Ok(1_u32)
                    }
                })
                .await?;
            let c = Arc::clone(&probe);
            context.pure("c", || async { Ok(c.count(2)) }).await?;
            Ok::<_, WorkflowError>("done".to_owned())
        }
    })
}

/// A run asked to stop inside step `b` records nothing after the request and never starts
/// `c`; resumed, it continues from `b`, the first step not recorded, and `a` replays.
#[tokio::test]
async fn a_running_execution_stops_before_its_next_step_and_resumes_there() {
    let scratch = Scratch::new();
    let probe = Arc::new(Probe::default());
    let runtime = stepper(Runtime::builder(scratch.journal.clone()), &probe)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, String>("stepper", id, &(), StartOptions::default())
        .await
        .unwrap();
    probe.entered.notified().await;

    let outcome = runtime.cancel(id, "not needed").await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::Requested {
            pid: i64::from(std::process::id())
        }
    );
    assert_eq!(cancelled_reason(&handle).await, "not needed");
    assert_eq!(step_names(&scratch.journal, id), ["a"]);
    assert_eq!(probe.calls(), [1, 1, 0], "c never started");
    let (named, newest) = request_and_newest_row(&scratch.journal, id);
    assert_eq!(named, newest, "no step row after the request");
    assert!(scratch.journal.lock_holders().unwrap().is_empty());

    runtime.resume(id, ResumeOptions::default()).await.unwrap();
    assert_eq!(handle.result().await.unwrap(), "done");
    assert_eq!(probe.calls(), [1, 2, 1], "a replayed, b ran again");
    assert_eq!(step_names(&scratch.journal, id), ["a", "b", "c"]);
}

/// A run waiting in memory (a timer shorter than `park_after`) stops at once when it is asked
/// to: the clock never moves, yet the run ends `cancelled`, its timer's step recorded and
/// nothing after it.
#[tokio::test]
async fn a_run_waiting_in_memory_stops_at_once() {
    let clocked = Clocked::new();
    let runtime = stepper(clocked.runtime(), &Arc::default())
        .park_after(Duration::from_hours(48))
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, String>("sleeper", id, &(), StartOptions::default())
        .await
        .unwrap();
    support::wait_for_steps(&clocked.journal, id, 1).await;
    let outcome = runtime.cancel(id, "no more waiting").await.unwrap();
    assert!(
        matches!(outcome, CancelOutcome::Requested { .. }),
        "{outcome:?}"
    );
    assert_eq!(cancelled_reason(&handle).await, "no more waiting");
    assert_eq!(step_names(&clocked.journal, id), ["durably:sleep/nap"]);
}

/// Sets execution `id` (queued) `stuck` with SQL, as the recovery writes it.
async fn set_stuck(journal: &Journal, id: Uuid) {
    journal
        .write(move |conn| {
            conn.execute(
                "UPDATE executions SET status = 'stuck', status_detail = '{\"failures\":3}'
                 WHERE execution_id = ?1",
                [id.to_string()],
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

/// Starts a `sleeper` and waits until it has parked.
async fn parked_sleeper(runtime: &Runtime, options: StartOptions) -> WorkflowHandle<String> {
    let handle = runtime
        .start::<_, String>("sleeper", durably_journal::new_execution_id(), &(), options)
        .await
        .unwrap();
    support::wait_for_status(runtime.journal(), handle.id(), Status::Waiting).await;
    handle
}

/// Starts an execution of a kind no runtime here serves: it stays queued.
async fn start_elsewhere(client: &Client, options: StartOptions) -> WorkflowHandle<String> {
    client
        .start::<_, String>(
            "elsewhere",
            durably_journal::new_execution_id(),
            &(),
            options.allow_unregistered_kind(),
        )
        .await
        .unwrap()
}

/// Queued, waiting (a parked timer) and stuck executions are cancelled at once, their wait
/// cleared, and their handles return the reason.
#[tokio::test]
async fn queued_and_parked_executions_are_cancelled_at_once() {
    let scratch = Scratch::new();
    let runtime = stepper(Runtime::builder(scratch.journal.clone()), &Arc::default())
        .start()
        .await
        .unwrap();
    for status in [Status::Queued, Status::Waiting, Status::Stuck] {
        let handle = match status {
            Status::Waiting => parked_sleeper(&runtime, StartOptions::default()).await,
            _ => start_elsewhere(&runtime, StartOptions::default()).await,
        };
        if status == Status::Stuck {
            set_stuck(&scratch.journal, handle.id()).await;
        }
        let outcome = runtime.cancel(handle.id(), "withdrawn").await.unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled { was: status });
        assert_eq!(cancelled_reason(&handle).await, "withdrawn");
        let record = scratch.journal.get(handle.id()).unwrap().unwrap();
        assert_eq!((record.due_at, record.wait_topic), (None, None));
    }
}

fn deadline_at(journal: &Journal, id: Uuid) -> Option<String> {
    journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT deadline_at FROM runtime_executions WHERE execution_id = ?1",
                [id.to_string()],
                |row| row.get(0),
            )?)
        })
        .unwrap()
}

/// At its deadline an execution is cancelled with reason `timeout`: queued (of a kind this
/// runtime does not even serve) or parked on a timer at once, running before its next step. Resumed
/// with a new deadline, it runs to its end and the deadline is cleared.
#[tokio::test]
async fn a_deadline_cancels_parked_and_running_executions() {
    let clocked = Clocked::new();
    let probe = Arc::new(Probe::default());
    let runtime = stepper(clocked.runtime(), &probe).start().await.unwrap();
    let (clock, journal) = (&clocked.clock, &clocked.journal);
    let in_an_hour = StartOptions::default().deadline(Deadline::In(Duration::from_hours(1)));
    let later = clocked.now() + Duration::from_hours(2);
    let queued = start_elsewhere(&runtime, in_an_hour.clone().not_before(later)).await;
    let waiting = parked_sleeper(&runtime, in_an_hour.clone()).await;
    let id = durably_journal::new_execution_id();
    let running = runtime
        .start::<_, String>("stepper", id, &(), in_an_hour)
        .await
        .unwrap();
    probe.entered.notified().await;

    clock.advance(Duration::from_secs(3599));
    assert_eq!(queued.status().unwrap(), Status::Queued);
    clock.advance(Duration::from_secs(1));
    assert_eq!(cancelled_reason(&queued).await, "timeout");
    assert_eq!(cancelled_reason(&waiting).await, "timeout");
    assert_eq!(cancelled_reason(&running).await, "timeout");
    assert_eq!(probe.calls(), [1, 1, 0]);
    for handle in [&queued, &waiting, &running] {
        assert_eq!(deadline_at(journal, handle.id()), None);
    }

    let again = ResumeOptions::default().deadline(Deadline::In(Duration::from_hours(1)));
    runtime.resume(id, again).await.unwrap();
    assert!(deadline_at(journal, id).is_some());
    assert_eq!(running.result().await.unwrap(), "done");
    assert_eq!(deadline_at(journal, id), None, "cleared at the end");
}

/// Bad cancels and resumes are typed errors, not retryable, and change nothing: an unknown
/// id, an ended execution, an oversized reason; a resume of a running, completed, or failed
/// (by its workflow) execution, or with a deadline already past.
#[tokio::test]
async fn bad_cancels_and_resumes_change_nothing() {
    let scratch = Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register(
            "echo",
            1,
            |_context: WorkflowContext, ok: bool| async move {
                if ok {
                    Ok("echo".to_owned())
                } else {
                    Err(WorkflowError::new("asked to fail"))
                }
            },
        )
        .start()
        .await
        .unwrap();
    let start = |ok: bool| {
        let runtime = runtime.clone();
        async move {
            let id = durably_journal::new_execution_id();
            let handle = runtime
                .start::<_, String>("echo", id, &ok, StartOptions::default())
                .await
                .unwrap();
            let _ = handle.result().await;
            id
        }
    };
    let (completed, failed) = (start(true).await, start(false).await);
    let (running, _execution) = scratch.runtime_execution().await;
    let nobody = durably_journal::new_execution_id();

    scratch
        .refused(
            runtime.cancel(nobody, "who"),
            |error| matches!(error, Error::NotFound(id) if *id == nobody),
        )
        .await;
    scratch
        .refused(runtime.cancel(completed, "late"), |error| {
            matches!(
                error,
                Error::AlreadyEnded {
                    status: Status::Completed,
                    ..
                }
            )
        })
        .await;
    let long = "x".repeat(durably_journal::lifecycle::CANCEL_REASON_BYTES_MAX + 1);
    scratch
        .refused(runtime.cancel(running, &long), |error| {
            matches!(error, Error::PayloadTooLarge { .. })
        })
        .await;
    for (id, status) in [
        (running, Status::Running),
        (completed, Status::Completed),
        (failed, Status::Failed),
    ] {
        scratch
            .refused(runtime.resume(id, ResumeOptions::default()), |error| {
                matches!(error, Error::NotResumable { status: found, .. } if *found == status)
            })
            .await;
    }
    scratch
        .refused(runtime.resume(nobody, ResumeOptions::default()), |error| {
            matches!(error, Error::NotFound(_))
        })
        .await;
    let past = chrono::Utc::now() - Duration::from_secs(1);
    scratch
        .refused(
            runtime.resume(
                failed,
                ResumeOptions::default().deadline(Deadline::At(past)),
            ),
            |error| matches!(error, Error::InvalidOption(_)),
        )
        .await;
}
