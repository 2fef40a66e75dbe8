//! Guarantee: `Scheduler::fire` starts a fire's execution once and only once per (job, slot):
//! the execution has the fire id, is of the job's workflow kind and gets the `Fire` as input;
//! a second fire of the slot, from this scheduler or another one on the same file, finds it
//! and starts nothing; the fire's state follows its execution (running, then completed, or
//! skipped when an operator cancels it); the ledger row and the execution's start commit in
//! one writer transaction; a start the runtime refuses (an unknown kind) writes nothing; a
//! changed job definition is detected from its stored hash and keeps the high-water mark; an
//! old `pending` row (from before fires were workflows) is started once by the next pass.
//!
//! Method: real journals on a scratch file, a hand-moved clock and a runtime serving the
//! test workflows; results are awaited through workflow handles, and the `fires`,
//! `executions` and `events` tables are read back with plain SQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_scheduler::{
    CatchUp, Error, Fire, FireOutcome, FireState, JobId, Overlap, Registration, fire_id,
};
use support::{GATED_KIND, MINUTE_MS, T0_MS, World, counting_job, slot, world};

#[tokio::test(flavor = "multi_thread")]
async fn a_fire_starts_once_then_is_found_everywhere() {
    let World {
        scratch,
        clock,
        calls,
        harness,
    } = world(T0_MS, counting_job("report").build().unwrap()).await;
    let job = JobId::new("report").unwrap();

    let first = harness.fire(&job, slot(T0_MS)).await.unwrap();
    assert_eq!(
        first,
        FireOutcome::Started {
            execution_id: fire_id(&job, slot(T0_MS))
        }
    );
    let input: String = scratch
        .probe()
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT input FROM executions WHERE execution_id = ?1 AND kind = 'count'",
                [first.execution_id().to_string()],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    let decoded: Fire = serde_json::from_str(&input).unwrap();
    assert_eq!(decoded, Fire::new(&job, slot(T0_MS)));

    let again = harness.fire(&job, slot(T0_MS)).await.unwrap();
    assert_eq!(
        again,
        FireOutcome::Existing {
            execution_id: first.execution_id(),
            state: FireState::Completed
        }
    );
    let other = scratch.scheduler(&clock, &calls).await;
    let _ = other
        .register(counting_job("report").build().unwrap())
        .await
        .unwrap();
    let elsewhere = other.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(
        matches!(elsewhere, FireOutcome::Existing { .. }),
        "{elsewhere:?}"
    );
    assert_eq!(calls.per_slot().get(&T0_MS), Some(&1));
    assert_eq!(calls.total(), 1);
    assert_eq!(scratch.count("SELECT count(*) FROM executions"), 1);
    assert_eq!(
        harness.fire_state(&job, slot(T0_MS)).unwrap(),
        Some((FireState::Completed, 1))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_row_and_the_start_commit_in_one_transaction() {
    let World {
        scratch,
        clock,
        calls: _,
        harness,
    } = world(T0_MS, counting_job("report").build().unwrap()).await;
    let job = JobId::new("report").unwrap();
    // A scheduler on a journal handle of its own, so its writer counts only its own requests
    // (the harness's runtime writes on the other handle).
    let client = durably_runtime::Client::new(scratch.journal(&clock))
        .await
        .unwrap();
    let own = durably_scheduler::Scheduler::new(client).await.unwrap();
    let _ = own
        .register(counting_job("report").build().unwrap())
        .await
        .unwrap();
    let before = own.journal().writer_stats().requests;
    let started = own.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(started.started_here());
    assert_eq!(own.journal().writer_stats().requests, before + 1);
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'running' AND attempts = 1"),
        1
    );
    harness.settle(&started).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_start_writes_nothing() {
    let job = counting_job("report")
        .workflow("nobody-serves-this")
        .catch_up(CatchUp::Latest)
        .build()
        .unwrap();
    let World {
        scratch,
        clock,
        calls: _,
        harness,
    } = world(T0_MS, job).await;
    let id = JobId::new("report").unwrap();
    let refused = harness.fire(&id, slot(T0_MS)).await.unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Start(durably_runtime::Error::UnknownKind { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(scratch.count("SELECT count(*) FROM fires"), 0);
    assert_eq!(scratch.count("SELECT count(*) FROM executions"), 0);
    assert_eq!(
        scratch.count("SELECT count(*) FROM jobs WHERE last_slot_ms IS NULL"),
        1
    );
    // The loop's pass reports the refusal and writes nothing either: no row, no mark.
    clock.set_millis(T0_MS + MINUTE_MS + 500);
    let pass = harness.run_once().await;
    assert_eq!(pass.errors.len(), 1, "{pass:?}");
    assert!(pass.errors[0].1.contains("nobody-serves-this"), "{pass:?}");
    assert_eq!(scratch.count("SELECT count(*) FROM fires"), 0);
    assert_eq!(
        scratch.count("SELECT count(*) FROM jobs WHERE last_slot_ms IS NULL"),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_definition_is_detected_and_keeps_the_high_water_mark() {
    let World {
        scratch,
        clock: _,
        calls,
        harness,
    } = world(T0_MS, counting_job("report").build().unwrap()).await;
    let job = JobId::new("report").unwrap();
    let _ = harness.fire(&job, slot(T0_MS)).await.unwrap();

    let changed = counting_job("report")
        .overlap(Overlap::Allow)
        .build()
        .unwrap();
    let registration = harness.register(changed).await.unwrap();
    let Registration::Changed {
        previous_definition,
        last_handled,
    } = registration
    else {
        panic!("{registration:?}");
    };
    assert!(
        previous_definition.contains(r#""overlap":"skip""#),
        "{previous_definition}"
    );
    assert_eq!(last_handled, Some(slot(T0_MS)));
    assert_eq!(
        scratch.count("SELECT count(*) FROM events WHERE kind = 'scheduler_job_redefined'"),
        1
    );
    let again = harness.fire(&job, slot(T0_MS)).await.unwrap();
    assert!(matches!(again, FireOutcome::Existing { .. }));
    assert_eq!(calls.total(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_fire_is_skipped_and_its_state_follows_its_execution() {
    let job = counting_job("long").workflow(GATED_KIND).build().unwrap();
    let World {
        scratch,
        clock,
        calls: _,
        harness,
    } = world(T0_MS, job).await;
    let id = JobId::new("long").unwrap();
    let started = harness.scheduler.fire(&id, slot(T0_MS)).await.unwrap();
    assert_eq!(
        harness.fire_state(&id, slot(T0_MS)).unwrap(),
        Some((FireState::Running, 1))
    );
    let _ = harness
        .runtime
        .cancel(started.execution_id(), "not wanted")
        .await
        .unwrap();
    let handle = harness.runtime.handle::<i64>(started.execution_id());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), handle.result())
        .await
        .unwrap();
    assert_eq!(
        harness
            .fire_state(&id, slot(T0_MS))
            .unwrap()
            .map(|state| state.0),
        Some(FireState::Skipped)
    );
    // The pass that decides the next slot copies the end into the row.
    clock.set_millis(T0_MS + MINUTE_MS + 500);
    let _ = harness.run_once().await;
    assert_eq!(
        scratch.count(
            "SELECT count(*) FROM fires WHERE state = 'skipped'
               AND reason = 'its execution was cancelled' AND finished_at IS NOT NULL"
        ),
        1
    );
}

/// A file from before fires were workflows may hold a `pending` row: registered by the old
/// scheduler, never opened, no execution. The next pass starts it as a workflow, once.
#[tokio::test(flavor = "multi_thread")]
async fn an_old_pending_fire_is_started_once_by_the_next_pass() {
    let job = counting_job("report")
        .catch_up(CatchUp::Latest)
        .build()
        .unwrap();
    let World {
        scratch,
        clock: _,
        calls,
        harness,
    } = world(T0_MS + 500, job).await;
    assert_eq!(harness.run_once().await.started().len(), 1);
    let old = slot(T0_MS - MINUTE_MS);
    let id = JobId::new("report").unwrap();
    scratch.insert_pending_fire("report", old).await;
    let pass = harness.run_once().await;
    assert_eq!(pass.started(), [(id.clone(), old)]);
    assert!(harness.run_once().await.fires.is_empty());
    assert_eq!(calls.per_slot().get(&old.as_millis()), Some(&1));
    assert_eq!(
        harness.fire_state(&id, old).unwrap(),
        Some((FireState::Completed, 1))
    );
}
