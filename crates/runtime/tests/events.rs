//! Workflow events (plan §5.3): `set_event` publishes a value in the transaction of its step;
//! `get_event` returns it, waits for it when it is not there yet (woken by the publishing
//! commit, not by polling the table), and returns `None` at its timeout on the client's clock.
//! A replayed `set_event` writes nothing, so the published value is the last one a run set.
//!
//! Runs on a `TestClock`; a future is polled once by hand where the test must know that a wait
//! has begun before it moves the clock or starts the publisher.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::pin::pin;
use std::task::{Context, Waker};
use std::time::Duration;

use durably_journal::Status;
use durably_runtime::{Error, StartOptions, WorkflowContext, WorkflowError};
use support::{Clocked, wait_for_status};

/// Publishes its progress, parks for an hour, publishes again.
async fn progress(context: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    context.set_event("progress", &1_u32).await?;
    context.sleep("pause", Duration::from_hours(1)).await?;
    context.set_event("progress", &2_u32).await?;
    Ok(())
}

async fn progress_runtime(f: &Clocked) -> durably_runtime::Runtime {
    f.runtime()
        .register("progress", 1, progress)
        .start()
        .await
        .unwrap()
}

fn pending<F: Future>(future: std::pin::Pin<&mut F>) -> bool {
    future
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending()
}

/// A `get_event` begun before the value is published returns it once the workflow sets it;
/// after a park and a replay (which does not publish again), the value is the last one set.
#[tokio::test]
async fn get_event_waits_for_the_value_and_sees_the_last_one() {
    let f = Clocked::new();
    let runtime = progress_runtime(&f).await;
    let id = durably_journal::new_execution_id();
    let not_before = f.now() + Duration::from_secs(1);
    let handle = runtime
        .start::<_, ()>(
            "progress",
            id,
            &(),
            StartOptions::default().not_before(not_before),
        )
        .await
        .unwrap();
    let mut waiting = pin!(runtime.get_event::<u32>(id, "progress", Duration::from_hours(24)));
    assert!(
        pending(waiting.as_mut()),
        "nothing is published before the start"
    );
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(waiting.await.unwrap(), Some(1));

    wait_for_status(&f.journal, id, Status::Waiting).await;
    f.clock.advance(Duration::from_hours(1));
    handle.result().await.unwrap();
    let stored: (String, u32) = f
        .journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT value, seq FROM workflow_events WHERE execution_id = ?1 AND key = 'progress'",
                [id.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .unwrap();
    assert_eq!(
        stored,
        ("2".to_owned(), 2),
        "set by step 2, not re-set by the replay of step 0"
    );
}

/// A `get_event` of a key never set returns `None` when its timeout has passed on the clock,
/// and not before; one of an unknown execution is `NotFound` at once.
#[tokio::test]
async fn get_event_times_out_on_the_clock() {
    let f = Clocked::new();
    let runtime = progress_runtime(&f).await;
    let id = durably_journal::new_execution_id();
    runtime
        .start::<_, ()>("progress", id, &(), StartOptions::default())
        .await
        .unwrap();
    let mut waiting = pin!(runtime.get_event::<u32>(id, "never", Duration::from_mins(10)));
    assert!(pending(waiting.as_mut()));
    f.clock.advance(Duration::from_mins(9));
    assert!(pending(waiting.as_mut()), "a minute early");
    f.clock.advance(Duration::from_mins(1));
    assert_eq!(waiting.await.unwrap(), None);

    let nobody = durably_journal::new_execution_id();
    let error = runtime
        .get_event::<u32>(nobody, "progress", Duration::from_hours(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::NotFound(id) if id == nobody),
        "{error:?}"
    );
}
