//! Durable timers (plan §5.1, §4.1): a sleep records its wake time as a step before it waits,
//! never ends before that time on the runtime's clock, stays in memory when it is short and
//! parks the execution (`waiting`, no lock) when it is longer than `park_after`, to be woken
//! by the due pass and resumed by replay, which keeps the recorded wake time.
//!
//! Everything runs on a `TestClock` the test moves. "Never before its wake time" is read from
//! the journal: the step after a sleep is stamped by the same clock, which only the test moves,
//! so a wake before the last move would stamp it before the wake time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_journal::{Status, StepState};
use durably_runtime::{StartOptions, WorkflowContext, WorkflowError};
use support::{Clocked, event_kinds, locked, wait_for_status, wait_for_steps};
use uuid::Uuid;

/// Sleeps `minutes`, then records a step.
async fn nap(context: WorkflowContext, minutes: u64) -> Result<String, WorkflowError> {
    context
        .sleep("nap", Duration::from_secs(minutes * 60))
        .await?;
    context
        .pure("after", || async { Ok("woke".to_owned()) })
        .await
        .map_err(Into::into)
}

/// The wake time recorded by the sleep step (step 0), and the time the step after it was
/// recorded.
fn recorded_times(f: &Clocked, id: Uuid) -> (DateTime<Utc>, DateTime<Utc>) {
    let steps = f.journal.steps(id).unwrap();
    assert_eq!(steps[0].name, "durably:sleep/nap");
    assert_eq!(steps[0].state, StepState::Completed);
    let recorded: serde_json::Value = steps[0].result.as_ref().unwrap().decode().unwrap();
    let wake_at = durably_lock::parse_timestamp(recorded["wake_at"].as_str().unwrap()).unwrap();
    (wake_at, steps[1].result_at.unwrap())
}

async fn start(runtime: &durably_runtime::Runtime, minutes: u64) -> Uuid {
    let id = durably_journal::new_execution_id();
    runtime
        .start::<_, String>("nap", id, &minutes, StartOptions::default())
        .await
        .unwrap();
    id
}

/// A sleep shorter than `park_after` waits in memory, holding the execution, and ends when
/// the clock reaches its wake time.
#[tokio::test]
async fn a_short_sleep_waits_in_memory_until_its_wake_time() {
    let f = Clocked::new();
    let runtime = f
        .runtime()
        .register("nap", 1, nap)
        .park_after(Duration::from_hours(2))
        .start()
        .await
        .unwrap();
    let started = f.now();
    let id = start(&runtime, 60).await;
    wait_for_steps(&f.journal, id, 1).await;
    assert_eq!(f.journal.get(id).unwrap().unwrap().status, Status::Running);
    assert!(locked(&f.journal, id), "an in-memory wait keeps its lock");

    f.clock.advance(Duration::from_secs(3599));
    f.clock.advance(Duration::from_secs(1));
    let handle = runtime.handle::<String>(id);
    assert_eq!(handle.result().await.unwrap(), "woke");
    let (wake_at, after) = recorded_times(&f, id);
    assert_eq!(wake_at, started + Duration::from_hours(1));
    assert!(
        after >= wake_at,
        "the step after the sleep ran at {after}, before {wake_at}"
    );
    assert!(!event_kinds(&f.journal, id).contains(&"parked".to_owned()));
}

/// A sleep longer than `park_after` parks: `waiting` until the wake time, no lock held, its
/// status detail naming the timer. The due pass wakes it at the wake time, not a second
/// before; it is claimed again and replays the recorded wake time instead of sleeping anew.
#[tokio::test]
async fn a_long_sleep_parks_and_the_due_pass_wakes_it() {
    let f = Clocked::new();
    let runtime = f.runtime().register("nap", 1, nap).start().await.unwrap();
    let started = f.now();
    let id = start(&runtime, 60).await;
    wait_for_status(&f.journal, id, Status::Waiting).await;
    let record = f.journal.get(id).unwrap().unwrap();
    assert_eq!(record.due_at, Some(started + Duration::from_hours(1)));
    assert_eq!(record.wait_topic, None);
    let detail = record.status_detail.unwrap();
    assert_eq!(detail["timer"], "nap", "{detail}");
    assert!(!locked(&f.journal, id), "a parked execution holds no lock");
    assert_eq!(
        f.journal.steps(id).unwrap().len(),
        1,
        "the park carried the timer's step"
    );

    f.clock.advance(Duration::from_secs(3599));
    assert_eq!(f.journal.get(id).unwrap().unwrap().status, Status::Waiting);
    f.clock.advance(Duration::from_secs(1));
    let handle = runtime.handle::<String>(id);
    assert_eq!(handle.result().await.unwrap(), "woke");

    let (wake_at, after) = recorded_times(&f, id);
    assert_eq!(
        wake_at,
        started + Duration::from_hours(1),
        "replay kept the wake time"
    );
    assert!(
        after >= wake_at,
        "the step after the sleep ran at {after}, before {wake_at}"
    );
    let record = f.journal.get(id).unwrap().unwrap();
    assert_eq!(
        record.opens, 2,
        "claimed once to sleep, once after the wake"
    );
    let kinds = event_kinds(&f.journal, id);
    let parked = kinds.iter().position(|k| k == "parked").unwrap();
    let woken = kinds.iter().position(|k| k == "woken").unwrap();
    assert!(parked < woken, "{kinds:?}");
    let event = &f.journal.events(id).unwrap()[woken];
    assert_eq!(event.detail.to_value().unwrap()["by"], "due");
}

/// A sleep until an instant already past returns at once, and is recorded like any timer.
#[tokio::test]
async fn a_sleep_until_the_past_returns_at_once() {
    let f = Clocked::new();
    let runtime = f
        .runtime()
        .register("late", 1, |context: WorkflowContext, (): ()| async move {
            let past = durably_lock::parse_timestamp("2020-01-01T00:00:00Z").unwrap();
            context.sleep_until("late", past).await?;
            Ok::<_, WorkflowError>(())
        })
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, ()>("late", id, &(), StartOptions::default())
        .await
        .unwrap();
    handle.result().await.unwrap();
    let steps = f.journal.steps(id).unwrap();
    assert_eq!(steps[0].name, "durably:sleep/late");
    assert_eq!(
        f.journal.get(id).unwrap().unwrap().opens,
        1,
        "it never parked"
    );
}

/// Two parked timers of different executions wake in the order of their wake times, each
/// only when the clock reaches it.
#[tokio::test]
async fn parked_timers_wake_each_at_its_own_time() {
    let f = Clocked::new();
    let runtime = f.runtime().register("nap", 1, nap).start().await.unwrap();
    let long = start(&runtime, 120).await;
    let short = start(&runtime, 30).await;
    wait_for_status(&f.journal, long, Status::Waiting).await;
    wait_for_status(&f.journal, short, Status::Waiting).await;

    f.clock.advance(Duration::from_mins(30));
    assert_eq!(
        runtime.handle::<String>(short).result().await.unwrap(),
        "woke"
    );
    assert_eq!(
        f.journal.get(long).unwrap().unwrap().status,
        Status::Waiting
    );
    f.clock.advance(Duration::from_mins(90));
    assert_eq!(
        runtime.handle::<String>(long).result().await.unwrap(),
        "woke"
    );
}
