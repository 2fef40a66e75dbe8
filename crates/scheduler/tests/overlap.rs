//! Guarantee: under `Overlap::Skip`, a slot that comes due while the job's previous fire is
//! still running is not run; it is recorded in the ledger as skipped with the reason "previous
//! fire still running", both for an explicit fire and in the loop. Under `Overlap::Allow` the
//! two run side by side.
//!
//! Method: the body of the first slot blocks on a `Notify` until the test releases it; the test
//! waits (bounded) for the ledger to show that fire running, then fires the next slot, and
//! checks the outcome and the `fires` row. Nothing sleeps and hopes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use durably_scheduler::{FireOutcome, FireState, Job, JobId, Overlap, Scheduler, StepError};
use support::{Calls, MINUTE_MS, ManualClock, Scratch, T0_MS, slot};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A job whose body at slot T0 blocks until `release`; other slots return at once.
fn blocking_job(overlap: Overlap, calls: &Calls, release: &Arc<Notify>) -> Job {
    let (calls, release) = (calls.clone(), release.clone());
    Job::builder("long")
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .overlap(overlap)
        .body(move |context| {
            let (calls, release) = (calls.clone(), release.clone());
            async move {
                calls.record(&context);
                if context.slot.as_millis() == T0_MS {
                    release.notified().await;
                }
                Ok::<_, StepError>(serde_json::Value::Null)
            }
        })
        .build()
        .unwrap()
}

async fn wait_running(scheduler: &Scheduler, job: &JobId) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while scheduler
        .fire_state(job, slot(T0_MS))
        .unwrap()
        .map(|state| state.0)
        != Some(FireState::Running)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first fire never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The task running the fire of slot T0.
type FirstFire = JoinHandle<durably_scheduler::Result<FireOutcome>>;

/// Registers the blocking job under `overlap` on a scheduler of its own and fires its slot T0 in
/// a task; returns once that fire is running, with the scheduler, the job's id, its calls, the
/// `Notify` that releases the fire, and the task.
async fn fire_first_slot(
    scratch: &Scratch,
    clock: &Arc<ManualClock>,
    overlap: Overlap,
) -> (Scheduler, JobId, Calls, Arc<Notify>, FirstFire) {
    let (calls, release) = (Calls::default(), Arc::new(Notify::new()));
    let scheduler = scratch.scheduler(clock).await;
    let _ = scheduler
        .register(blocking_job(overlap, &calls, &release))
        .await
        .unwrap();
    let job = JobId::new("long").unwrap();
    let first = tokio::spawn({
        let (scheduler, job) = (scheduler.clone(), job.clone());
        async move { scheduler.fire(&job, slot(T0_MS)).await }
    });
    wait_running(&scheduler, &job).await;
    (scheduler, job, calls, release, first)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_fire_makes_the_next_slot_skip_with_the_reason() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let (scheduler, job, calls, release, first) =
        fire_first_slot(&scratch, &clock, Overlap::Skip).await;

    // Explicit fire of the next slot.
    let next = slot(T0_MS + MINUTE_MS);
    let skipped = scheduler.fire(&job, next).await.unwrap();
    let FireOutcome::Skipped { reason, .. } = skipped else {
        panic!("{skipped:?}")
    };
    assert_eq!(reason, "previous fire still running");
    // The loop, seeing a slot come due, skips it too; a second scheduler sees the live holder.
    clock.set_millis(T0_MS + 2 * MINUTE_MS + 500);
    let other = scratch.scheduler(&clock).await;
    let _ = other
        .register(blocking_job(Overlap::Skip, &calls, &release))
        .await
        .unwrap();
    let pass = other.run_once().await;
    assert!(pass.ran().is_empty(), "{pass:?}");
    assert!(
        matches!(&pass.fires[..], [fire] if matches!(fire.outcome, FireOutcome::Skipped { .. }))
    );

    release.notify_one();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        FireOutcome::Ran { .. }
    ));
    assert_eq!(calls.total(), 1);
    assert_eq!(
        scratch.count(
            "SELECT count(*) FROM fires WHERE state = 'skipped'
               AND reason = 'previous fire still running' AND finished_at IS NOT NULL"
        ),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_runs_the_next_slot_alongside() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let (scheduler, job, calls, release, first) =
        fire_first_slot(&scratch, &clock, Overlap::Allow).await;
    let next = scheduler.fire(&job, slot(T0_MS + MINUTE_MS)).await.unwrap();
    assert!(matches!(next, FireOutcome::Ran { .. }), "{next:?}");
    release.notify_one();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        FireOutcome::Ran { .. }
    ));
    assert_eq!(calls.total(), 2);
}
