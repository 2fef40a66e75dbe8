//! Guarantee: schedules are managed from the ledger alone, by a process that does not run the
//! jobs' code: `schedules` lists every job (schedule, next and last slot, paused, fires per
//! state); `pause` stops every scheduler from firing the job and `resume` applies its catch-up
//! policy to the slots it missed; `trigger` starts the upcoming slot now, once, and the loop
//! does not start it again; `backfill` starts every slot of a range not fired yet, each once.
//! Every bad input (an unknown job, a reversed, empty, future or oversized range, a paused
//! job, a schedule with no slot left) is a typed error and leaves the journal unchanged.
//!
//! Method: one runtime-backed scheduler (the harness, which runs the workflows) and one
//! management-only scheduler over a plain runtime `Client` on its own journal handle, on one
//! scratch file with a hand-moved clock. Workflow runs are counted per slot; the journal's
//! tables are dumped as text before and after each bad input and compared.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fmt::Write as _;
use std::sync::Arc;

use durably_runtime::Client;
use durably_scheduler::{
    BACKFILL_SLOTS_MAX, CatchUp, Error, FireOutcome, FireState, JobId, SLOT_MILLIS_MAX, Scheduler,
};
use support::{Harness, MINUTE_MS, ManualClock, Scratch, T0_MS, World, counting_job, slot, world};

/// A scheduler that only manages: a plain client, no workflow registered, no job registered.
async fn manager(scratch: &Scratch, clock: &Arc<ManualClock>) -> Scheduler {
    let client = Client::new(scratch.journal(clock)).await.unwrap();
    Scheduler::new(client).await.unwrap()
}

/// Every row of the ledger's and the journal's tables, as text.
fn snapshot(scratch: &Scratch) -> String {
    let mut text = String::new();
    scratch
        .probe()
        .read(|conn| {
            for table in [
                "jobs",
                "fires",
                "skipped_slots",
                "executions",
                "events",
                "steps",
            ] {
                let mut statement = conn.prepare(&format!("SELECT * FROM {table} ORDER BY 1"))?;
                let columns = statement.column_count();
                let mut rows = statement.query([])?;
                while let Some(row) = rows.next()? {
                    for column in 0..columns {
                        write!(text, "{:?}|", row.get_ref(column)?).unwrap();
                    }
                    text.push('\n');
                }
            }
            Ok(())
        })
        .unwrap();
    text
}

async fn settle_all(harness: &Harness, outcomes: &[(durably_scheduler::Slot, FireOutcome)]) {
    for (_, outcome) in outcomes {
        harness.settle(outcome).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_stops_every_scheduler_and_resume_applies_catch_up() {
    let job = counting_job("report")
        .catch_up(CatchUp::Latest)
        .build()
        .unwrap();
    let World {
        scratch,
        clock,
        calls,
        harness,
    } = world(T0_MS + 500, job).await;
    let id = JobId::new("report").unwrap();
    assert_eq!(harness.run_once().await.started().len(), 1);

    let manager = manager(&scratch, &clock).await;
    assert!(manager.pause(&id).await.unwrap());
    assert!(!manager.pause(&id).await.unwrap());
    clock.set_millis(T0_MS + 5 * MINUTE_MS + 500);
    let paused = harness.run_once().await;
    assert!(
        paused.fires.is_empty() && paused.skipped.is_empty(),
        "{paused:?}"
    );
    assert_eq!(harness.high_water_mark(&id).unwrap(), Some(slot(T0_MS)));
    let refused = manager.trigger(&id).await.unwrap_err();
    assert!(matches!(refused, Error::JobPaused { .. }), "{refused:?}");
    let refused = harness
        .fire(&id, slot(T0_MS + MINUTE_MS))
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::JobPaused { .. }), "{refused:?}");
    let listed = manager.schedules().unwrap();
    assert!(listed[0].paused);

    assert!(manager.resume(&id).await.unwrap());
    assert!(!manager.resume(&id).await.unwrap());
    let resumed = harness.run_once().await;
    assert_eq!(
        resumed.started(),
        [(id.clone(), slot(T0_MS + 5 * MINUTE_MS))]
    );
    let skipped = resumed.skipped[0].1;
    assert_eq!(
        (skipped.first, skipped.last),
        (slot(T0_MS + MINUTE_MS), slot(T0_MS + 4 * MINUTE_MS))
    );
    assert!(harness.run_once().await.started().is_empty());
    assert_eq!(calls.total(), 2);
    assert!(calls.per_slot().values().all(|&count| count == 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn trigger_starts_the_upcoming_slot_once() {
    let World {
        scratch,
        clock,
        calls,
        harness,
    } = world(T0_MS + 10_000, counting_job("report").build().unwrap()).await;
    let _ = harness.run_once().await;
    let id = JobId::new("report").unwrap();
    let manager = manager(&scratch, &clock).await;

    let (slot_fired, first) = manager.trigger(&id).await.unwrap();
    assert_eq!(slot_fired, slot(T0_MS + MINUTE_MS));
    assert!(first.started_here(), "{first:?}");
    harness.settle(&first).await;
    let (_, again) = manager.trigger(&id).await.unwrap();
    assert_eq!(
        again,
        FireOutcome::Existing {
            execution_id: first.execution_id(),
            state: FireState::Completed
        }
    );
    // When the slot's time comes, the loop does not start it again.
    clock.set_millis(T0_MS + MINUTE_MS + 500);
    assert!(harness.run_once().await.started().is_empty());
    assert_eq!(calls.per_slot().get(&(T0_MS + MINUTE_MS)), Some(&1));
    assert_eq!(calls.total(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn backfill_starts_each_missing_slot_once() {
    let World {
        scratch,
        clock,
        calls,
        harness,
    } = world(T0_MS + 500, counting_job("report").build().unwrap()).await;
    let _ = harness.run_once().await;
    // Down for ten minutes: under catch-up Skip the missed slots are recorded skipped.
    clock.set_millis(T0_MS + 10 * MINUTE_MS + 30_000);
    let pass = harness.run_once().await;
    assert_eq!(pass.skipped.len(), 1, "{pass:?}");
    assert_eq!(calls.total(), 0);
    let id = JobId::new("report").unwrap();
    let manager = manager(&scratch, &clock).await;

    let minute = |n: i64| slot(T0_MS + n * MINUTE_MS);
    let first = manager.backfill(&id, minute(2), minute(5)).await.unwrap();
    assert_eq!(first.len(), 4);
    assert!(first.iter().all(|(_, outcome)| outcome.started_here()));
    settle_all(&harness, &first).await;
    let wider = manager.backfill(&id, minute(0), minute(6)).await.unwrap();
    let started: Vec<_> = wider
        .iter()
        .filter(|(_, outcome)| outcome.started_here())
        .map(|(slot, _)| *slot)
        .collect();
    assert_eq!(started, [minute(0), minute(1), minute(6)]);
    settle_all(&harness, &wider).await;
    assert_eq!(calls.total(), 7);
    assert!(calls.per_slot().values().all(|&count| count == 1));
    // A backfill of a range not starting on the grid starts at its first slot.
    let off = manager
        .backfill(&id, slot(T0_MS + 6 * MINUTE_MS + 1), minute(7))
        .await
        .unwrap();
    assert_eq!(off.len(), 1);
    settle_all(&harness, &off).await;

    let listed = manager.schedules().unwrap();
    let summary = &listed[0];
    assert_eq!(summary.job, id);
    assert_eq!(summary.workflow.as_deref(), Some(support::COUNT_KIND));
    assert_eq!(summary.next_slot, Some(minute(11)));
    assert!(!summary.paused);
    assert_eq!(summary.fires, [(FireState::Completed, 8)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_management_input_is_typed_and_changes_nothing() {
    let World {
        scratch,
        clock,
        calls,
        harness,
    } = world(
        T0_MS + 10 * MINUTE_MS + 500,
        counting_job("report").build().unwrap(),
    )
    .await;
    let daily = counting_job("daily")
        .interval(std::time::Duration::from_hours(24), 0)
        .build()
        .unwrap();
    let _ = harness.register(daily).await.unwrap();
    let _ = harness.run_once().await;
    let id = JobId::new("report").unwrap();
    let nobody = JobId::new("nobody").unwrap();
    let manager = manager(&scratch, &clock).await;
    let minute = |n: i64| slot(T0_MS + n * MINUTE_MS);
    let before = snapshot(&scratch);

    let unknown = [
        manager.pause(&nobody).await.unwrap_err(),
        manager.resume(&nobody).await.unwrap_err(),
        manager.trigger(&nobody).await.map(|_| ()).unwrap_err(),
        manager
            .backfill(&nobody, minute(1), minute(2))
            .await
            .map(|_| ())
            .unwrap_err(),
    ];
    for error in unknown {
        assert!(matches!(error, Error::UnknownJob { .. }), "{error:?}");
    }
    let reversed = manager
        .backfill(&id, minute(3), minute(2))
        .await
        .unwrap_err();
    assert!(
        matches!(reversed, Error::RangeReversed { .. }),
        "{reversed:?}"
    );
    let empty = manager
        .backfill(&id, slot(T0_MS + 1), slot(T0_MS + 2))
        .await
        .unwrap_err();
    assert!(matches!(empty, Error::EmptyRange { .. }), "{empty:?}");
    let future = manager
        .backfill(&id, minute(1), minute(20))
        .await
        .unwrap_err();
    assert!(matches!(future, Error::RangeInFuture { .. }), "{future:?}");
    clock.set_millis(T0_MS + 2_000 * MINUTE_MS);
    let too_many = manager
        .backfill(&id, minute(0), minute(1_500))
        .await
        .unwrap_err();
    assert!(
        matches!(
            too_many,
            Error::TooManySlots {
                max: BACKFILL_SLOTS_MAX,
                ..
            }
        ),
        "{too_many:?}"
    );

    // A schedule with no slot left after now is refused at registration.
    clock.set_millis(SLOT_MILLIS_MAX - 3_600_000);
    let ended = counting_job("ended")
        .interval(std::time::Duration::from_hours(24), 0)
        .build()
        .unwrap();
    let error = harness.register(ended).await.unwrap_err();
    assert!(matches!(error, Error::NoSlotsLeft { .. }), "{error:?}");
    assert!(error.to_string().contains("never fires again"), "{error}");
    // A stored job whose schedule has ended has nothing to trigger.
    let error = manager
        .trigger(&JobId::new("daily").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(error, Error::NoSlotsLeft { .. }), "{error:?}");

    assert_eq!(snapshot(&scratch), before);
    assert_eq!(calls.total(), 0);
}
