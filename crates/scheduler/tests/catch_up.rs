//! Guarantee: after a scheduler was down across 10 slots, the loop fires 0, 1 or the capped
//! number of missed slots according to the job's catch-up policy, each exactly once, and records
//! the rest as one bounded `skipped_slots` row; a second scheduler on the same file, or another
//! pass, fires none of them again.
//!
//! Method: an injected clock is set, one loop pass (`run_once`) runs, the clock is moved 10.5
//! slots forward (the "downtime"), and passes run again; the body counts its calls per slot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_scheduler::{CatchUp, SlotCount};
use support::{Calls, MINUTE_MS, ManualClock, Scratch, T0_MS, counting_job};

/// Runs the downtime scenario under `policy`; returns the slots fired after the downtime (as
/// minutes after T0) and the skipped row (first minute, last minute, count).
async fn after_downtime(policy: CatchUp) -> (Vec<i64>, (i64, i64, i64)) {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS + 5_000);
    let calls = Calls::default();
    let scheduler = scratch.scheduler(&clock, &calls).await;
    let job = counting_job("report").catch_up(policy).build().unwrap();
    let _ = scheduler.register(job).await.unwrap();
    // Up at T0 + 5 s: the slot at T0 fires (Latest and All), or is waited past (Skip).
    let _ = scheduler.run_once().await;
    let before = calls.total();

    // Down from T0 + 5 s until 10.5 minutes later: slots T0+1 .. T0+10 were missed.
    clock.set_millis(T0_MS + 10 * MINUTE_MS + 30_000);
    let report = scheduler.run_once().await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // More passes, and another scheduler process's pass, fire nothing more.
    let _ = scheduler.run_once().await;
    let other = scratch.scheduler(&clock, &calls).await;
    let _ = other
        .register(counting_job("report").catch_up(policy).build().unwrap())
        .await;
    let again = other.run_once().await;
    assert!(again.started().is_empty(), "{again:?}");

    let per_slot = calls.per_slot();
    assert!(per_slot.values().all(|&count| count == 1), "{per_slot:?}");
    let fired: Vec<i64> = per_slot
        .keys()
        .map(|ms| (ms - T0_MS) / MINUTE_MS)
        .skip(before)
        .collect();
    assert_eq!(report.started().len(), fired.len());
    let skipped: (i64, i64, i64) = scratch
        .probe()
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT first_slot_ms, last_slot_ms, slot_count FROM skipped_slots",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?)
        })
        .unwrap();
    let minutes = (
        (skipped.0 - T0_MS) / MINUTE_MS,
        (skipped.1 - T0_MS) / MINUTE_MS,
        skipped.2,
    );
    assert_eq!(scratch.count("SELECT count(*) FROM skipped_slots"), 1);
    assert_eq!(report.skipped.len(), 1);
    assert!(
        matches!(report.skipped[0].1.count, SlotCount::Exact(count) if count as i64 == skipped.2)
    );
    (fired, minutes)
}

#[tokio::test(flavor = "multi_thread")]
async fn skip_fires_no_missed_slot() {
    let (fired, skipped) = after_downtime(CatchUp::Skip).await;
    assert_eq!(fired, Vec::<i64>::new());
    assert_eq!(skipped, (1, 10, 10));
}

#[tokio::test(flavor = "multi_thread")]
async fn latest_fires_the_latest_missed_slot_once() {
    let (fired, skipped) = after_downtime(CatchUp::Latest).await;
    assert_eq!(fired, [10]);
    assert_eq!(skipped, (1, 9, 9));
}

#[tokio::test(flavor = "multi_thread")]
async fn all_fires_the_capped_number_of_missed_slots_oldest_first() {
    let policy = CatchUp::All {
        window: Duration::from_hours(1),
        max: 3,
    };
    let (fired, skipped) = after_downtime(policy).await;
    assert_eq!(fired, [8, 9, 10]);
    assert_eq!(skipped, (1, 7, 7));
}
