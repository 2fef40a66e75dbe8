//! Guarantee: the loop accounts for every slot of a job, whatever else happens. Each slot after
//! the high-water mark ends fired once or recorded skipped, never silently lost: when an
//! explicit fire ran a slot ahead of the mark, when two schedulers plan from the same stale
//! mark, and when many earlier fires' executions are parked (waiting for a message, or
//! awaiting an operator) under `Overlap::Allow`, which neither stops later slots from firing
//! nor keeps an old `pending` fire from being started or an ended fire's end from being copied
//! into its row. And once the loop's shutdown future has resolved, the loop starts no fire.
//!
//! Method: in-process schedulers over in-process runtimes on a scratch journal file with an
//! injected clock (`ManualClock`), driven pass by pass with `run_once`; the ledger and the
//! executions are read back with plain SQL. Parked executions are real ones: a workflow that
//! waits for a message (parked at once, `park_after` zero) or whose guarded step times out
//! under `Policy::Fail` (awaiting an operator). A wait for the runtime polls with a bound,
//! never sleeps and hopes; the shutdown future resolves on a ledger row the loop wrote, so the
//! shutdown lands inside a pass deterministically.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::task::Poll;
use std::time::Duration;

use durably_journal::{Guarded, Policy, StepError};
use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
use durably_scheduler::{CatchUp, Error, Fire, FireOutcome, FireState, Job, JobId, Overlap};
use support::{
    Calls, Harness, MINUTE_MS, ManualClock, Scratch, T0_MS, World, count_in, counting_job, slot,
    world,
};

/// The bound of every wait on the runtime.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// Polls `done` every few milliseconds until it holds, failing the test after [`WAIT_MAX`].
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn all_window() -> CatchUp {
    CatchUp::All {
        window: Duration::from_hours(24),
        max: 1000,
    }
}

/// Opens a write transaction on `journal`'s writer and holds it until the returned sender
/// sends: on SQLite every other writer of the file queues behind it. Returns once it is open.
async fn hold_a_write(
    journal: &durably_journal::Journal,
) -> (
    std::sync::mpsc::Sender<()>,
    tokio::task::JoinHandle<durably_journal::Result<()>>,
) {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (opened, is_open) = tokio::sync::oneshot::channel::<()>();
    let writer = journal.clone();
    let hold = tokio::spawn(async move {
        writer
            .write(move |_conn| {
                let _ = opened.send(());
                // The writer's own thread waits here, inside the transaction.
                let _ = released.recv();
                Ok(())
            })
            .await
    });
    is_open.await.unwrap();
    (release, hold)
}

/// The slots (minutes after T0) of the job's fires, and of its skipped runs expanded.
fn handled_minutes(scratch: &Scratch, job: &str) -> (Vec<i64>, Vec<i64>) {
    let (fired_ms, runs): (Vec<i64>, Vec<(i64, i64)>) = scratch
        .probe()
        .read(|conn| {
            let fired_ms = conn
                .prepare("SELECT slot_ms FROM fires WHERE job = ?1 ORDER BY slot_ms")?
                .query_map([job], |row| row.get::<_, i64>(0))?
                .collect::<durably_db::Result<_>>()?;
            let runs = conn
                .prepare("SELECT first_slot_ms, last_slot_ms FROM skipped_slots WHERE job = ?1")?
                .query_map([job], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<durably_db::Result<_>>()?;
            Ok((fired_ms, runs))
        })
        .unwrap();
    let fired = fired_ms.iter().map(|ms| (ms - T0_MS) / MINUTE_MS).collect();
    let mut skipped = Vec::new();
    for (first, last) in runs {
        skipped.extend((first - T0_MS) / MINUTE_MS..=(last - T0_MS) / MINUTE_MS);
    }
    skipped.sort_unstable();
    (fired, skipped)
}

/// An explicit fire of a slot ahead of the high-water mark must not hide the slots between
/// the mark and it from the loop. A slot past the upcoming one is refused with
/// `SlotInFuture`; a due one is fired but leaves the mark where it was, so the next pass
/// fires every slot after the mark and finds the explicitly fired one started, not twice.
#[tokio::test(flavor = "multi_thread")]
async fn explicit_fire_ahead_of_the_mark_loses_no_slot() {
    let job = counting_job("j").catch_up(all_window()).build().unwrap();
    let World {
        scratch,
        clock,
        calls,
        harness,
    } = world(T0_MS, job).await;
    let id = JobId::new("j").unwrap();
    assert_eq!(harness.run_once().await.started().len(), 1); // T0; mark = T0

    let future = harness.fire(&id, slot(T0_MS + 3 * MINUTE_MS)).await;
    assert!(
        matches!(future, Err(Error::SlotInFuture { .. })),
        "{future:?}"
    );
    assert_eq!(harness.high_water_mark(&id).unwrap(), Some(slot(T0_MS)));

    // At +3m the slot is due: an explicit fire starts it but leaves the mark at T0.
    clock.set_millis(T0_MS + 3 * MINUTE_MS);
    let ran = harness
        .fire(&id, slot(T0_MS + 3 * MINUTE_MS))
        .await
        .unwrap();
    assert!(matches!(ran, FireOutcome::Started { .. }), "{ran:?}");
    assert_eq!(harness.high_water_mark(&id).unwrap(), Some(slot(T0_MS)));

    clock.set_millis(T0_MS + 5 * MINUTE_MS);
    let pass = harness.run_once().await;
    let started: Vec<i64> = pass
        .started()
        .iter()
        .map(|(_, slot)| (slot.as_millis() - T0_MS) / MINUTE_MS)
        .collect();
    assert_eq!(started, [1, 2, 4, 5], "{pass:?}");
    let per_slot: Vec<(i64, usize)> = calls
        .per_slot()
        .into_iter()
        .map(|(ms, count)| ((ms - T0_MS) / MINUTE_MS, count))
        .collect();
    assert_eq!(per_slot, [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]);
    assert_eq!(scratch.count("SELECT count(*) FROM skipped_slots"), 0);
    assert_eq!(
        harness.high_water_mark(&id).unwrap(),
        Some(slot(T0_MS + 5 * MINUTE_MS))
    );
}

/// Two schedulers planning from the same stale mark never lose a slot: the due slots are
/// decided in the starting transaction against the mark read there, so whatever the
/// interleaving every slot is fired or recorded skipped.
#[tokio::test(flavor = "multi_thread")]
async fn stale_mark_planning_loses_no_skipped_slot() {
    for round in 0..4 {
        let scratch = Scratch::new();
        let (clock_a, clock_b) = (ManualClock::at_millis(T0_MS), ManualClock::at_millis(T0_MS));
        let (calls_a, calls_b) = (Calls::default(), Calls::default());
        let a = scratch.scheduler(&clock_a, &calls_a).await;
        let b = scratch.scheduler(&clock_b, &calls_b).await;
        let _ = a
            .register(counting_job("x").build().unwrap())
            .await
            .unwrap();
        let _ = b
            .register(counting_job("x").build().unwrap())
            .await
            .unwrap();
        let _ = a.run_once().await;
        assert_eq!(
            a.high_water_mark(&JobId::new("x").unwrap()).unwrap(),
            Some(slot(T0_MS)),
            "round {round}"
        );
        // Downtime; A's clock is one slot behind B's.
        clock_a.set_millis(T0_MS + 10 * MINUTE_MS + 30_000);
        clock_b.set_millis(T0_MS + 11 * MINUTE_MS + 30_000);
        // Hold the writer so both passes queue up behind it; the assertion below holds for
        // every interleaving, the hold only makes the concurrent one likely.
        let (release, hold) = hold_a_write(scratch.probe()).await;
        let pass_a = tokio::spawn({
            let a = a.scheduler.clone();
            async move { a.run_once().await }
        });
        let pass_b = tokio::spawn({
            let b = b.scheduler.clone();
            async move { b.run_once().await }
        });
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        hold.await.unwrap().unwrap();
        let (report_a, report_b) = (pass_a.await.unwrap(), pass_b.await.unwrap());
        assert!(
            report_a.errors.is_empty() && report_b.errors.is_empty(),
            "round {round}: {report_a:?} {report_b:?}"
        );
        // Right after the race, every slot up to the mark is fired or recorded skipped. A
        // scheduler whose plan went stale wrote nothing; its next pass decides the rest.
        let handled = |scratch: &Scratch| {
            let (fired, skipped) = handled_minutes(scratch, "x");
            let mut all: Vec<i64> = fired.iter().chain(&skipped).copied().collect();
            all.sort_unstable();
            (fired, skipped, all)
        };
        let mark = a
            .high_water_mark(&JobId::new("x").unwrap())
            .unwrap()
            .unwrap();
        let (fired, skipped, all) = handled(&scratch);
        assert_eq!(
            all,
            (1..=(mark.as_millis() - T0_MS) / MINUTE_MS).collect::<Vec<_>>(),
            "round {round}: fired {fired:?}, skipped {skipped:?}"
        );
        let (report_a2, report_b2) = (a.run_once().await, b.run_once().await);
        for fire in [&report_a, &report_b, &report_a2, &report_b2]
            .into_iter()
            .flat_map(|report| &report.fires)
        {
            a.settle(&fire.outcome).await;
        }
        let (fired, skipped, all) = handled(&scratch);
        assert_eq!(
            all,
            (1..=11).collect::<Vec<_>>(),
            "round {round}: fired {fired:?}, skipped {skipped:?}"
        );
        let mut called: Vec<i64> = calls_a.per_slot().into_keys().collect();
        called.extend(calls_b.per_slot().into_keys());
        called.sort_unstable();
        let fired_ms: Vec<i64> = fired.iter().map(|m| T0_MS + m * MINUTE_MS).collect();
        assert_eq!(called, fired_ms, "round {round}: each fired slot ran once");
    }
}

/// The workflow kind of the parking job.
const PARKS_KIND: &str = "parks";

/// The slots (minutes after T0) through which the parking job's fires park.
const PARKED_THROUGH_MINUTE: i64 = 100;

/// A fire at or before [`PARKED_THROUGH_MINUTE`] parks: an even minute waits a week for a
/// message, an odd one leaves a guarded step ambiguous under `Policy::Fail`, so its
/// execution awaits an operator. A later fire completes at once.
async fn parks(ctx: WorkflowContext, fire: Fire) -> Result<i64, WorkflowError> {
    let minute = (fire.slot.as_millis() - T0_MS) / MINUTE_MS;
    if minute <= PARKED_THROUGH_MINUTE {
        if minute % 2 == 0 {
            let _: Option<bool> = ctx.recv("release", Duration::from_hours(168)).await?;
        } else {
            let _: Guarded<()> = ctx
                .step("hang")
                .timeout(Duration::from_millis(20))
                .guarded(Policy::Fail, |_| {
                    std::future::pending::<Result<(), StepError>>()
                })
                .await?;
        }
    }
    Ok(minute)
}

/// Fires whose executions are parked (waiting for a message, or awaiting an operator) never
/// stop later slots from firing under `Overlap::Allow`, nor keep the loop from starting an old
/// `pending` fire newer than them, nor from copying a later fire's end into its row: more
/// parked fires than one transaction scans come first.
#[tokio::test(flavor = "multi_thread")]
async fn recovery_is_not_starved_by_parked_fires() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS + PARKED_THROUGH_MINUTE * MINUTE_MS + 30_000);
    let runtime = Runtime::builder(scratch.journal(&clock))
        .register(PARKS_KIND, 1, parks)
        .park_after(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let Harness { runtime, scheduler } = Harness::over(runtime).await;
    let job = Job::builder("p")
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .catch_up(all_window())
        .overlap(Overlap::Allow)
        .workflow(PARKS_KIND)
        .build()
        .unwrap();
    let _ = scheduler.register(job).await.unwrap();
    let id = JobId::new("p").unwrap();
    let set_mark = async |mark: i64| {
        scratch
            .probe()
            .write(move |conn| {
                conn.execute(
                    "UPDATE jobs SET last_slot = ?1, last_slot_ms = ?2 WHERE job = 'p'",
                    durably_db::params![slot(mark).to_rfc3339(), mark],
                )?;
                Ok(())
            })
            .await
            .unwrap();
    };
    // Back from downtime: T0 ..= +100m are due, and all park.
    set_mark(T0_MS - MINUTE_MS).await;
    let pass = scheduler.run_once().await;
    let parked = PARKED_THROUGH_MINUTE as usize + 1;
    assert_eq!(pass.started().len(), parked, "{:?}", pass.errors);
    let waiting = PARKED_THROUGH_MINUTE / 2 + 1;
    let awaiting = PARKED_THROUGH_MINUTE + 1 - waiting;
    wait_for("every fire to park", || {
        scratch.count("SELECT count(*) FROM executions WHERE status = 'waiting'") == waiting
            && scratch.count("SELECT count(*) FROM executions WHERE status = 'awaiting_operator'")
                == awaiting
    })
    .await;

    // A scheduler from before fires were workflows registered +101m and died before opening
    // it: a `pending` row, the mark raised past it.
    let old = slot(T0_MS + (PARKED_THROUGH_MINUTE + 1) * MINUTE_MS);
    scratch.insert_pending_fire("p", old).await;
    set_mark(old.as_millis()).await;

    // Later slots come due: the pass starts them and the old pending fire alongside.
    clock.set_millis(old.as_millis() + 2 * MINUTE_MS + 30_000);
    let pass = scheduler.run_once().await;
    let later: Vec<_> = (1..=3)
        .map(|n| slot(T0_MS + (PARKED_THROUGH_MINUTE + n) * MINUTE_MS))
        .collect();
    let mut started: Vec<_> = pass.started().into_iter().map(|(_, slot)| slot).collect();
    started.sort_unstable();
    assert_eq!(started, later, "{pass:?}");
    for fire in &pass.fires {
        let handle = runtime.handle::<i64>(fire.outcome.execution_id());
        tokio::time::timeout(WAIT_MAX, handle.result())
            .await
            .expect("a later fire ends")
            .unwrap();
    }
    for slot in &later {
        assert_eq!(
            scheduler.fire_state(&id, *slot).unwrap(),
            Some((FireState::Completed, 1))
        );
    }
    // The next pass that decides a slot copies their ends into their rows, past the parked
    // fires before them.
    clock.set_millis(clock.millis() + MINUTE_MS);
    let pass = scheduler.run_once().await;
    assert_eq!(pass.started().len(), 1, "{pass:?}");
    assert_eq!(
        scratch.count(
            "SELECT count(*) FROM fires WHERE state = 'completed' AND finished_at IS NOT NULL"
        ),
        3
    );
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'running'"),
        parked as i64 + 1
    );
    runtime.shutdown();
}

/// Once the loop's shutdown future has resolved, the loop starts no fire: not in the pass
/// under way when it resolved (the next job's slot is left for a later pass), and not at all
/// when it had resolved before `run` was called. The slots left are started by the next pass.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_starts_no_new_fire() {
    let World {
        scratch,
        clock: _,
        calls: _,
        harness,
    } = world(
        T0_MS,
        counting_job("a").catch_up(all_window()).build().unwrap(),
    )
    .await;
    let _ = harness
        .register(counting_job("b").catch_up(all_window()).build().unwrap())
        .await
        .unwrap();
    let (a, b) = (JobId::new("a").unwrap(), JobId::new("b").unwrap());

    // Already resolved: `run` returns and nothing is started.
    tokio::time::timeout(WAIT_MAX, harness.scheduler.run(std::future::ready(())))
        .await
        .unwrap();
    assert_eq!(scratch.count("SELECT count(*) FROM fires"), 0);

    // Resolved inside the first pass, once job "a" (the first in order) has its fire.
    let probe = scratch.probe().clone();
    let fired_a = std::future::poll_fn(move |_| {
        if count_in(&probe, "SELECT count(*) FROM fires WHERE job = 'a'") > 0 {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    tokio::time::timeout(WAIT_MAX, harness.scheduler.run(fired_a))
        .await
        .unwrap();
    assert!(harness.fire_state(&a, slot(T0_MS)).unwrap().is_some());
    assert_eq!(harness.fire_state(&b, slot(T0_MS)).unwrap(), None);

    // The next pass starts what the loop left.
    let pass = harness.run_once().await;
    assert_eq!(pass.started(), [(b.clone(), slot(T0_MS))], "{pass:?}");
}
