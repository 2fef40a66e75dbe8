//! Guarantee: under `Overlap::Skip`, a slot that comes due while the job's previous fire's
//! execution has not ended is not started; the loop records it in the ledger as skipped with
//! the reason "previous fire still running", in this scheduler and in another one on the same
//! file. Once the execution ends, the next slot starts. Under `Overlap::Allow` the next slot
//! starts alongside.
//!
//! Method: the job's workflow (`gated`) waits, for the slot at T0 only, for a message the test
//! sends; the test fires T0 explicitly, moves the injected clock past the next slots and runs
//! loop passes, then releases the first fire, awaits its result, and checks outcomes and the
//! `fires` rows. Nothing sleeps and hopes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_scheduler::{FireOutcome, Job, JobId, Overlap};
use support::{Calls, GATED_KIND, Harness, MINUTE_MS, ManualClock, Scratch, T0_MS, slot};

fn gated_job(overlap: Overlap) -> Job {
    Job::builder("long")
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .overlap(overlap)
        .workflow(GATED_KIND)
        .build()
        .unwrap()
}

/// Registers the gated job and fires its slot T0; returns the first fire's id.
async fn fire_first_slot(harness: &Harness, overlap: Overlap) -> uuid::Uuid {
    let _ = harness.register(gated_job(overlap)).await.unwrap();
    let first = harness
        .scheduler
        .fire(&JobId::new("long").unwrap(), slot(T0_MS))
        .await
        .unwrap();
    assert!(matches!(first, FireOutcome::Started { .. }), "{first:?}");
    first.execution_id()
}

async fn release(harness: &Harness, first: uuid::Uuid) {
    let _ = harness
        .runtime
        .send(first, "release", &true, Some("release-1"))
        .await
        .unwrap();
    let handle = harness.runtime.handle::<i64>(first);
    tokio::time::timeout(Duration::from_secs(30), handle.result())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_fire_makes_the_next_slot_skip_with_the_reason() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let harness = scratch.scheduler(&clock, &calls).await;
    let first = fire_first_slot(&harness, Overlap::Skip).await;

    // The loop, seeing the next slot come due, skips it; so does a second scheduler.
    clock.set_millis(T0_MS + MINUTE_MS + 500);
    let pass = harness.run_once().await;
    assert!(pass.started().is_empty(), "{pass:?}");
    let [fire] = &pass.fires[..] else {
        panic!("{pass:?}")
    };
    let FireOutcome::Skipped { reason, .. } = &fire.outcome else {
        panic!("{pass:?}")
    };
    assert_eq!(reason, "previous fire still running");
    clock.set_millis(T0_MS + 2 * MINUTE_MS + 500);
    let other = scratch.scheduler(&clock, &calls).await;
    let _ = other.register(gated_job(Overlap::Skip)).await.unwrap();
    let pass = other.run_once().await;
    assert!(pass.started().is_empty(), "{pass:?}");

    // Released, the first fire ends; the next slot starts.
    release(&harness, first).await;
    clock.set_millis(T0_MS + 3 * MINUTE_MS + 500);
    let pass = harness.run_once().await;
    assert_eq!(pass.started().len(), 1, "{pass:?}");
    assert_eq!(calls.total(), 2);
    assert_eq!(
        scratch.count(
            "SELECT count(*) FROM fires WHERE state = 'skipped'
               AND reason = 'previous fire still running' AND finished_at IS NOT NULL"
        ),
        2
    );
    // The first fire's end was copied into its row by the pass.
    assert_eq!(
        scratch.count(&format!(
            "SELECT count(*) FROM fires WHERE state = 'completed' AND slot_ms = {T0_MS}"
        )),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_starts_the_next_slot_alongside() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let harness = scratch.scheduler(&clock, &calls).await;
    let first = fire_first_slot(&harness, Overlap::Allow).await;
    clock.set_millis(T0_MS + MINUTE_MS + 500);
    let pass = harness.run_once().await;
    assert_eq!(pass.started().len(), 1, "{pass:?}");
    release(&harness, first).await;
    assert_eq!(calls.total(), 2);
}
