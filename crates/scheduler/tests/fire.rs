//! Guarantee: `Scheduler::fire` runs a fire's body once and only once per (job, slot): a second
//! fire of the slot, from this scheduler or from another one on the same file, replays the
//! recorded outcome without calling the body; a fire held by another live scheduler is reported
//! as `LockedBy` and runs nothing; a failing body is retried up to the job's bound, each attempt
//! recorded as its own guarded step and in the ledger's `attempts`; a changed job definition is
//! detected from its stored hash and keeps the high-water mark; a fire's state is read from
//! its ledger row, never from its execution; a fire whose execution an operator cancels while
//! it runs is recorded skipped, its running attempt finished and no further attempt started.
//!
//! Method: real journals on a scratch file and a hand-moved clock; the body counts its calls,
//! and the `fires`, `steps` and `events` tables are read back with plain SQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use durably_scheduler::{
    FIRE_RETRY_DEFAULT, FireOutcome, FireState, Job, JobId, Registration, RetryPolicy, Scheduler,
    StepError,
};
use support::{Calls, MINUTE_MS, ManualClock, Scratch, T0_MS, counting_job, slot};
use tokio::sync::Notify;

/// Three attempts with millisecond backoffs, so retries cost the tests no time.
const THREE_QUICK_ATTEMPTS: RetryPolicy = RetryPolicy {
    attempts_max: 3,
    backoff_initial: Duration::from_millis(1),
    backoff_max: Duration::from_millis(5),
};

/// A scheduler on `scratch` with the counting job `report` registered.
async fn registered_report(
    scratch: &Scratch,
    clock: &Arc<ManualClock>,
    calls: &Calls,
) -> (Scheduler, JobId) {
    let scheduler = scratch.scheduler(clock).await;
    let _ = scheduler
        .register(counting_job("report", calls).build().unwrap())
        .await
        .unwrap();
    (scheduler, JobId::new("report").unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fire_runs_once_then_replays_everywhere() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let scheduler = scratch.scheduler(&clock).await;
    let registration = scheduler.register(counting_job("report", &calls).build().unwrap());
    assert_eq!(registration.await.unwrap(), Registration::New);
    let job = JobId::new("report").unwrap();

    let first = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(
        matches!(
            first,
            FireOutcome::Ran {
                attempts: 1,
                resumed: false,
                ..
            }
        ),
        "{first:?}"
    );
    let again = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(matches!(
        again,
        FireOutcome::Replayed {
            state: FireState::Completed,
            ..
        }
    ));

    // Another scheduler (its own journal handle and lock instance) on the same file.
    let other = scratch.scheduler(&clock).await;
    let calls_elsewhere = Calls::default();
    let registration = other.register(counting_job("report", &calls_elsewhere).build().unwrap());
    assert!(matches!(
        registration.await.unwrap(),
        Registration::Unchanged { .. }
    ));
    let elsewhere = other.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(
        matches!(elsewhere, FireOutcome::Replayed { .. }),
        "{elsewhere:?}"
    );
    assert!(!elsewhere.ran_here());

    assert_eq!(calls.total() + calls_elsewhere.total(), 1);
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'completed'"),
        1
    );
    assert_eq!(
        scratch.count(
            "SELECT count(*) FROM executions WHERE kind = 'scheduled' AND status = 'completed'"
        ),
        1
    );
    assert_eq!(scheduler.high_water_mark(&job).unwrap(), Some(slot(T0_MS)));
}

/// Fires `job`'s slot at T0 in a task of its own, and waits until its body has `started`.
async fn fire_until_started(
    scheduler: &Scheduler,
    job: &JobId,
    started: &Notify,
) -> tokio::task::JoinHandle<durably_scheduler::Result<FireOutcome>> {
    let running = tokio::spawn({
        let (scheduler, job) = (scheduler.clone(), job.clone());
        async move { scheduler.fire(&job, slot(T0_MS)).await }
    });
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .unwrap();
    running
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fire_held_by_another_live_scheduler_is_locked_by_and_runs_nothing() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (started_in_body, release_in_body) = (started.clone(), release.clone());
    let blocking = Job::builder("slow")
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .body(move |_| {
            let (started, release) = (started_in_body.clone(), release_in_body.clone());
            async move {
                started.notify_one();
                release.notified().await;
                Ok::<_, StepError>(serde_json::Value::Null)
            }
        })
        .build()
        .unwrap();
    let first = scratch.scheduler(&clock).await;
    let _ = first.register(blocking).await.unwrap();
    let job = JobId::new("slow").unwrap();
    let running = fire_until_started(&first, &job, &started).await;

    let calls = Calls::default();
    let second = scratch.scheduler(&clock).await;
    let _ = second
        .register(counting_job("slow", &calls).build().unwrap())
        .await
        .unwrap();
    let locked = second.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(
        matches!(locked, FireOutcome::LockedBy { pid, .. } if pid == i64::from(std::process::id())),
        "{locked:?}"
    );
    release.notify_one();
    let done = running.await.unwrap().unwrap();
    assert!(matches!(done, FireOutcome::Ran { .. }), "{done:?}");
    assert_eq!(calls.total(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_body_is_retried_to_its_bound_and_every_attempt_is_recorded() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let flaky = {
        let calls = calls.clone();
        Job::builder("flaky")
            .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
            .retry(THREE_QUICK_ATTEMPTS)
            .body(move |context| {
                let calls = calls.clone();
                async move {
                    calls.record(&context);
                    // Attempts 1 and 2 fail at slot T0; every attempt fails at later slots.
                    if context.slot.as_millis() == T0_MS && context.attempt == 3 {
                        Ok(serde_json::json!("third time lucky"))
                    } else {
                        Err(StepError::retryable(format!(
                            "attempt {} failed",
                            context.attempt
                        )))
                    }
                }
            })
            .build()
            .unwrap()
    };
    let scheduler = scratch.scheduler(&clock).await;
    let _ = scheduler.register(flaky).await.unwrap();
    let job = JobId::new("flaky").unwrap();

    let lucky = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    let FireOutcome::Ran {
        attempts: 3,
        execution_id,
        ..
    } = lucky
    else {
        panic!("{lucky:?}");
    };
    let steps = scheduler.journal().steps(execution_id).unwrap();
    let states: Vec<&str> = steps.iter().map(|step| step.state.as_str()).collect();
    assert_eq!(states, ["failed", "failed", "completed"]);
    assert!(
        steps
            .iter()
            .all(|step| step.name == "fire" && step.effect == durably_journal::Effect::Guarded)
    );
    assert_eq!(
        scheduler.fire_state(&job, slot(T0_MS)).unwrap(),
        Some((FireState::Completed, 3))
    );

    let later = slot(T0_MS + MINUTE_MS);
    let failed = scheduler.fire(&job, later).await.unwrap();
    let FireOutcome::Failed {
        attempts: 3, error, ..
    } = failed
    else {
        panic!("{failed:?}")
    };
    assert_eq!(error.message, "attempt 3 failed");
    assert_eq!(
        scheduler.fire_state(&job, later).unwrap(),
        Some((FireState::Failed, 3))
    );
    // A failed fire is final: firing it again replays the failure and calls nothing.
    let replay = scheduler.fire(&job, later).await.unwrap();
    assert!(matches!(
        replay,
        FireOutcome::Replayed {
            state: FireState::Failed,
            ..
        }
    ));
    assert_eq!(
        calls.per_slot().values().copied().collect::<Vec<_>>(),
        [3, 3]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_definition_is_detected_and_keeps_the_high_water_mark() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let (scheduler, job) = registered_report(&scratch, &clock, &calls).await;
    let _ = scheduler.fire(&job, slot(T0_MS)).await.unwrap();

    let changed = counting_job("report", &calls)
        .retry(RetryPolicy {
            attempts_max: 5,
            ..FIRE_RETRY_DEFAULT
        })
        .build()
        .unwrap();
    let registration = scheduler.register(changed).await.unwrap();
    let Registration::Changed {
        previous_definition,
        last_handled,
    } = registration
    else {
        panic!("{registration:?}");
    };
    assert!(
        previous_definition.contains(r#""attempts_max":3"#),
        "{previous_definition}"
    );
    assert_eq!(last_handled, Some(slot(T0_MS)));
    assert_eq!(
        scratch.count("SELECT count(*) FROM events WHERE kind = 'scheduler_job_redefined'"),
        1
    );
    // The already fired slot still replays under the new definition.
    let replay = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(matches!(replay, FireOutcome::Replayed { .. }));
    assert_eq!(calls.total(), 1);
}

/// The ledger's final state is written in the transaction that finalizes the fire's execution,
/// and its "running" mark in the transaction of the body's intent: a fire that runs once costs
/// five writer requests (register, open, the body's intent with the mark, its result, and the
/// end of both), and the two rows end at the same instant.
#[tokio::test(flavor = "multi_thread")]
async fn a_fire_ends_its_execution_and_its_ledger_row_in_one_transaction() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let (scheduler, job) = registered_report(&scratch, &clock, &calls).await;

    let before = scheduler.journal().writer_stats().requests;
    let ran = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(
        matches!(ran, FireOutcome::Ran { attempts: 1, .. }),
        "{ran:?}"
    );
    let requests = scheduler.journal().writer_stats().requests - before;
    assert_eq!(
        requests, 5,
        "register, open, intent and running, result, end"
    );
    assert_eq!(
        scratch.count(
            "SELECT count(*) FROM fires AS f JOIN executions AS e USING (execution_id)
             WHERE f.state = 'completed' AND e.status = 'completed'
               AND f.finished_at = e.finalized_at"
        ),
        1
    );
}

/// A fire's state is its `fires` row: a row that says `skipped` replays as skipped whatever the
/// execution's output says, and a row still `running` whose execution the journal reports
/// finished (the ledger and the journal disagree) is a `Ledger` error that leaves the row as it
/// was, never a repair from the execution.
#[tokio::test(flavor = "multi_thread")]
async fn a_finished_fire_is_reported_from_its_row_and_a_disagreement_is_an_error() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let (scheduler, job) = registered_report(&scratch, &clock, &calls).await;
    let _ = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    let set_state = |state: &str| {
        let conn = rusqlite::Connection::open(scratch.path()).unwrap();
        conn.execute(
            "UPDATE fires SET state = ?1,
                              finished_at = CASE WHEN ?1 = 'running' THEN NULL ELSE finished_at END",
            [state],
        )
        .unwrap();
    };

    set_state("skipped");
    let replayed = scheduler.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(
        matches!(
            replayed,
            FireOutcome::Replayed {
                state: FireState::Skipped,
                ..
            }
        ),
        "{replayed:?}"
    );

    set_state("running");
    let refused = scheduler.fire(&job, slot(T0_MS)).await.unwrap_err();
    assert!(
        matches!(refused, durably_scheduler::Error::Ledger(_)),
        "{refused:?}"
    );
    assert_eq!(
        scheduler.fire_state(&job, slot(T0_MS)).unwrap(),
        Some((FireState::Running, 1)),
        "the row is left for a person to look at"
    );
    assert_eq!(calls.total(), 1, "the body never ran again");
}

/// An operator cancels a fire's execution while its body runs: the running attempt finishes
/// and is recorded (a guarded step in flight finishes its protocol), no further attempt starts,
/// and the fire is recorded skipped with the execution cancelled. Both ways the request is
/// seen: at the completion (the attempt succeeded), and at the next attempt's intent (it
/// failed with a retryable error).
#[tokio::test(flavor = "multi_thread")]
async fn a_fire_cancelled_while_it_runs_is_recorded_skipped() {
    for succeeds in [true, false] {
        let scratch = Scratch::new();
        let clock = ManualClock::at_millis(T0_MS);
        let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let calls = Calls::default();
        let job = {
            let (started, release, calls) = (started.clone(), release.clone(), calls.clone());
            Job::builder("cancelled")
                .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
                .retry(THREE_QUICK_ATTEMPTS)
                .body(move |context| {
                    let (started, release, calls) =
                        (started.clone(), release.clone(), calls.clone());
                    async move {
                        calls.record(&context);
                        started.notify_one();
                        release.notified().await;
                        if succeeds {
                            Ok(serde_json::Value::Null)
                        } else {
                            Err(StepError::retryable("try again"))
                        }
                    }
                })
                .build()
                .unwrap()
        };
        let scheduler = scratch.scheduler(&clock).await;
        let _ = scheduler.register(job).await.unwrap();
        let job = JobId::new("cancelled").unwrap();
        let running = fire_until_started(&scheduler, &job, &started).await;
        let operator = scratch.journal(&clock);
        let id = scheduler
            .journal()
            .list(&durably_journal::ListFilter::default())
            .unwrap()[0]
            .execution_id;
        let outcome = operator.operator().cancel(id, "not today").await.unwrap();
        assert!(
            matches!(outcome, durably_journal::CancelOutcome::Requested { .. }),
            "{outcome:?}"
        );
        release.notify_one();

        let done = running.await.unwrap().unwrap();
        let FireOutcome::Skipped { reason, .. } = &done else {
            panic!("{done:?}");
        };
        assert!(
            reason.contains("cancelled by an operator: not today"),
            "{reason}"
        );
        assert_eq!(
            scheduler.fire_state(&job, slot(T0_MS)).unwrap().unwrap().0,
            FireState::Skipped
        );
        let record = operator.get(id).unwrap().unwrap();
        assert_eq!(record.status, durably_journal::Status::Cancelled);
        let states: Vec<_> = operator
            .steps(id)
            .unwrap()
            .iter()
            .map(|step| step.state.as_str())
            .collect();
        let expected = if succeeds { "completed" } else { "failed" };
        assert_eq!(states, [expected], "one attempt, recorded");
        assert_eq!(calls.total(), 1);
    }
}
