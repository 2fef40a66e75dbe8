//! Parallel steps in registered workflows: two receives joined keep their two steps each
//! together in call order, whichever message arrives first, and each consumes its own
//! message; a wait longer than `park_after` that starts while a sibling step is in flight
//! waits in memory instead of parking (a park would end the sibling's run with it), and the
//! run finishes without a park.
//!
//! Everything runs on a `TestClock` the test moves. The sibling step is held in flight by a
//! `Notify` its closure waits on; the test sees the sleep waiting through the clock's count of
//! sleepers, never by sleeping itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::LazyLock;
use std::time::Duration;

use durably_journal::Status;
use durably_runtime::{WorkflowContext, WorkflowError};
use support::{Clocked, assert_steps_in_order, consumption, event_kinds, start_queued, wait_until};
use tokio::sync::Notify;

/// Two receives at once: seqs 0 and 1 are `a`'s, 2 and 3 are `b`'s.
async fn two_receives(
    context: WorkflowContext,
    (): (),
) -> Result<(Option<String>, Option<String>), WorkflowError> {
    let (a, b) = tokio::join!(
        context.recv::<String>("a", Duration::from_mins(1)),
        context.recv::<String>("b", Duration::from_mins(1)),
    );
    Ok((a?, b?))
}

#[tokio::test]
async fn two_receives_joined_keep_their_steps_together_in_call_order() {
    let f = Clocked::new();
    let (client, id) = start_queued(&f.journal, "two receives", &()).await;
    // `b`'s message arrives first.
    client.send(id, "b", &"for b", None).await.unwrap();
    client.send(id, "a", &"for a", None).await.unwrap();
    let runtime = f
        .runtime()
        .register("two receives", 1, two_receives)
        .start()
        .await
        .unwrap();
    let output = runtime
        .handle::<(Option<String>, Option<String>)>(id)
        .result()
        .await
        .unwrap();
    assert_eq!(output, (Some("for a".to_owned()), Some("for b".to_owned())));
    assert_steps_in_order(
        &f.journal,
        id,
        &[
            "durably:recv-deadline/a",
            "durably:recv/a",
            "durably:recv-deadline/b",
            "durably:recv/b",
        ],
    );
    assert_eq!(
        consumption(&f.journal, id),
        [("b".to_owned(), Some(3)), ("a".to_owned(), Some(1))]
    );
}

/// Released by the test once the sleep waits: until then the sibling step is in flight.
static RELEASE: LazyLock<Notify> = LazyLock::new(Notify::new);

/// An hour's sleep, joined with a pure step that waits for [`RELEASE`].
async fn sleep_beside_a_step(context: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let (slept, worked) = tokio::join!(
        context.sleep("nap", Duration::from_hours(1)),
        context.pure("work", || async {
            RELEASE.notified().await;
            Ok(7_u32)
        }),
    );
    slept?;
    Ok(worked?)
}

#[tokio::test]
async fn a_long_wait_beside_a_step_in_flight_waits_in_memory_instead_of_parking() {
    let f = Clocked::new();
    let (_client, id) = start_queued(&f.journal, "sleep beside a step", &()).await;
    let runtime = f
        .runtime()
        .register("sleep beside a step", 1, sleep_beside_a_step)
        .start()
        .await
        .unwrap();
    // The sleep is longer than `park_after` (1 s by default), yet waits on the clock.
    let clock = std::sync::Arc::clone(&f.clock);
    wait_until(&f.journal, "the sleep waiting in memory", move |_| {
        clock.sleepers() > 0
    })
    .await;
    assert_eq!(f.journal.get(id).unwrap().unwrap().status, Status::Running);
    RELEASE.notify_one();
    f.clock.advance(Duration::from_hours(1));
    let output = runtime.handle::<u32>(id).result().await.unwrap();
    assert_eq!(output, 7);
    let record = f.journal.get(id).unwrap().unwrap();
    assert_eq!((record.status, record.opens), (Status::Completed, 1));
    assert!(!event_kinds(&f.journal, id).contains(&"parked".to_owned()));
}
