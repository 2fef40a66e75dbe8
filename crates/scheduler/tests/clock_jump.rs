//! Guarantee: a wall clock that jumps backward by an hour never makes the loop fire a slot a
//! second time, and the job continues with new slots once the clock passes its high-water mark;
//! a jump forward is treated as downtime, under the catch-up policy.
//!
//! Method: an injected clock is stepped minute by minute through loop passes (`run_once`), set
//! back one hour and stepped forward again past the old time; the body counts calls per slot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_scheduler::{CatchUp, JobId};
use support::{Calls, MINUTE_MS, ManualClock, Scratch, T0_MS, counting_job, slot};

#[tokio::test(flavor = "multi_thread")]
async fn a_clock_jumped_back_an_hour_fires_no_slot_twice() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS + 1_000);
    let calls = Calls::default();
    let scheduler = scratch.scheduler(&clock, &calls).await;
    let job = counting_job("tick")
        .catch_up(CatchUp::Latest)
        .build()
        .unwrap();
    let _ = scheduler.register(job).await.unwrap();
    for minute in 0..=5 {
        clock.set_millis(T0_MS + minute * MINUTE_MS + 1_000);
        let _ = scheduler.run_once().await;
    }
    assert_eq!(calls.total(), 6);
    let job_id = JobId::new("tick").unwrap();
    assert_eq!(
        scheduler.high_water_mark(&job_id).unwrap(),
        Some(slot(T0_MS + 5 * MINUTE_MS))
    );

    // Back one hour, then forward minute by minute to where it was: nothing fires.
    let back = T0_MS + 5 * MINUTE_MS + 1_000 - 60 * MINUTE_MS;
    for minute in 0..=60 {
        clock.set_millis(back + minute * MINUTE_MS);
        let report = scheduler.run_once().await;
        assert!(report.started().is_empty(), "minute {minute}: {report:?}");
    }
    assert_eq!(calls.total(), 6);
    assert_eq!(
        scheduler.high_water_mark(&job_id).unwrap(),
        Some(slot(T0_MS + 5 * MINUTE_MS))
    );

    // Past the mark, the next slot fires once; a forward jump of 30 minutes fires only the
    // latest slot under `Latest`.
    clock.set_millis(T0_MS + 6 * MINUTE_MS + 1_000);
    assert_eq!(scheduler.run_once().await.started().len(), 1);
    clock.set_millis(T0_MS + 36 * MINUTE_MS + 1_000);
    let jumped = scheduler.run_once().await;
    assert_eq!(jumped.started(), [(job_id, slot(T0_MS + 36 * MINUTE_MS))]);
    assert_eq!(jumped.skipped.len(), 1);
    assert!(calls.per_slot().values().all(|&count| count == 1));
    assert_eq!(calls.total(), 8);
}
