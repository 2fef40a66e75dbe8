//! Cancellation, resume and deadlines in one process (plan §4.6, §9): a running execution
//! asked to stop ends `cancelled` before its next step, with no step recorded after the
//! request; queued and parked executions are cancelled at once; a deadline cancels parked and
//! running executions with reason `timeout`; a resume continues from the last recorded step;
//! bad cancels and resumes are typed errors that change nothing.
//!
//! Method: workflows report to the test through a shared probe and hold inside a step until
//! the test releases them, so each cancel lands at a known point without sleeping. Time is a
//! `TestClock` the test moves. Parked statuses the runtime cannot reach yet without a timer
//! (`waiting`, `stuck`) are set with SQL, as parking writes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::testing::TestClock;
use durably_runtime::{
    CancelOutcome, Client, Deadline, Error, ResumeOptions, Runtime, RuntimeBuilder, StartOptions,
    WorkflowContext, WorkflowError, WorkflowHandle,
};
use support::{Scratch, cancelled_reason, on_test_clock, request_and_newest_row};
use tokio::sync::Notify;
use uuid::Uuid;

/// What the `stepper` workflow shares with the test.
#[derive(Default)]
struct Probe {
    /// Closure calls of steps `a`, `b`, `c`.
    calls: [AtomicU32; 3],
    /// Notified when step `b`'s closure runs for the first time.
    entered: Notify,
    /// Step `b`'s first call waits for this.
    release: Notify,
}

impl Probe {
    fn calls(&self) -> [u32; 3] {
        self.calls
            .each_ref()
            .map(|calls| calls.load(Ordering::SeqCst))
    }
}

/// Registers `stepper`: pure steps `a`, `b` (whose first call holds until released) and `c`.
fn stepper(builder: RuntimeBuilder, probe: &Arc<Probe>) -> RuntimeBuilder {
    let probe = Arc::clone(probe);
    builder.register("stepper", 1, move |mut context: WorkflowContext, (): ()| {
        let probe = Arc::clone(&probe);
        async move {
            let step = |index: usize| {
                let probe = Arc::clone(&probe);
                move || {
                    let probe = Arc::clone(&probe);
                    async move {
                        let calls = probe.calls[index].fetch_add(1, Ordering::SeqCst) + 1;
                        if index == 1 && calls == 1 {
                            probe.entered.notify_one();
                            probe.release.notified().await;
                        }
                        Ok(u32::try_from(index).unwrap())
                    }
                }
            };
            context.pure("a", step(0)).await?;
            context.pure("b", step(1)).await?;
            context.pure("c", step(2)).await?;
            Ok::<_, WorkflowError>("done".to_owned())
        }
    })
}

fn step_names(journal: &Journal, id: Uuid) -> Vec<String> {
    journal
        .steps(id)
        .unwrap()
        .into_iter()
        .map(|step| step.name)
        .collect()
}

/// A run asked to stop inside step `b` records nothing after the request and never starts
/// `c`; resumed, it continues from `b`, the last step not recorded, and `a` replays.
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
    probe.release.notify_one();
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

/// Sets execution `id` (queued) to a parked status with SQL, as parking writes it.
async fn park(journal: &Journal, id: Uuid, status: &'static str) {
    journal
        .write(move |conn| {
            let (due_at, topic) = if status == "waiting" {
                (Some("2099-01-01T00:00:00.000Z"), Some("approval"))
            } else {
                (None, None)
            };
            conn.execute(
                "UPDATE executions SET status = ?2, due_at = ?3, wait_topic = ?4,
                                       status_detail = '{\"parked\":true}'
                 WHERE execution_id = ?1",
                durably_journal::rusqlite::params![id.to_string(), status, due_at, topic],
            )?;
            Ok(())
        })
        .await
        .unwrap();
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

/// Queued, waiting and stuck executions are cancelled at once, their wait cleared, and their
/// handles return the reason.
#[tokio::test]
async fn queued_and_parked_executions_are_cancelled_at_once() {
    let scratch = Scratch::new();
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    for status in [Status::Queued, Status::Waiting, Status::Stuck] {
        let handle = start_elsewhere(&client, StartOptions::default()).await;
        if status != Status::Queued {
            park(&scratch.journal, handle.id(), status.as_str()).await;
        }
        let outcome = client.cancel(handle.id(), "withdrawn").await.unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled { was: status });
        assert_eq!(cancelled_reason(&handle).await, "withdrawn");
        let record = scratch.journal.get(handle.id()).unwrap().unwrap();
        assert_eq!((record.due_at, record.wait_topic), (None, None));
    }
}

/// A runtime on a `TestClock`, serving `stepper`.
async fn stepper_on_test_clock(scratch: &Scratch, probe: &Arc<Probe>) -> (Arc<TestClock>, Runtime) {
    let (clock, journal) = on_test_clock(scratch.journal.path());
    let runtime = stepper(Runtime::builder(journal), probe)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    (clock, runtime)
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
/// runtime does not even serve) or waiting at once, running before its next step. Resumed
/// with a new deadline, it runs to its end and the deadline is cleared.
#[tokio::test]
async fn a_deadline_cancels_parked_and_running_executions() {
    let scratch = Scratch::new();
    let probe = Arc::new(Probe::default());
    let (clock, runtime) = stepper_on_test_clock(&scratch, &probe).await;
    let in_an_hour = StartOptions::default().deadline(Deadline::In(Duration::from_hours(1)));
    let later = durably_lock::Clock::now(clock.as_ref()) + Duration::from_hours(2);
    let queued = start_elsewhere(&runtime, in_an_hour.clone().not_before(later)).await;
    let waiting = start_elsewhere(&runtime, in_an_hour.clone()).await;
    park(&scratch.journal, waiting.id(), "waiting").await;
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
    // The pass that cancelled those asked the running one to stop in the same transaction.
    probe.release.notify_one();
    assert_eq!(cancelled_reason(&running).await, "timeout");
    assert_eq!(probe.calls(), [1, 1, 0]);
    for handle in [&queued, &waiting, &running] {
        assert_eq!(deadline_at(&scratch.journal, handle.id()), None);
    }

    let again = ResumeOptions::default().deadline(Deadline::In(Duration::from_hours(1)));
    runtime.resume(id, again).await.unwrap();
    assert!(deadline_at(&scratch.journal, id).is_some());
    assert_eq!(running.result().await.unwrap(), "done");
    assert_eq!(
        deadline_at(&scratch.journal, id),
        None,
        "cleared at the end"
    );
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
