//! On PostgreSQL the fire ledger holds one fire per slot across hosts: two schedulers, each on
//! a journal of its own (two hosts) on one schema, register the same job at once and then run
//! their passes at the same moments; every due slot is started by exactly one of them and its
//! workflow runs once. An explicit `fire` of one slot by both at once starts it once, the
//! other finding it.
//!
//! Method: a hand-moved clock shared by both; the passes of both schedulers run concurrently
//! (`join!`) at each slot, racing on the job's row lock (`lock_job`) and the fire's insert
//! (`ON CONFLICT (job, slot_ms) DO NOTHING`); the reports are merged and the workflow's runs
//! counted per slot once every started fire has ended.
//! Needs `DURABLY_POSTGRES_URL` (`eval "$(.ci/pg start)"`); fails without it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use durably_journal::Journal;
use durably_lock::Clock;
use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
use durably_scheduler::{Fire, FireOutcome, JobId};
use durably_testkit::{Backend, TestDb};
use support::{COUNT_KIND, Calls, Harness, MINUTE_MS, ManualClock, T0_MS, counting_job, slot};

/// Slots both schedulers pass over.
const SLOTS: i64 = 5;

/// A host: a journal of its own on `db`, a runtime serving `count` (recording into `calls`)
/// and a scheduler over it.
async fn host(db: &TestDb, clock: &Arc<ManualClock>, calls: &Calls) -> Harness {
    let clock: Arc<dyn Clock> = clock.clone();
    let journal = Journal::builder(db.target()).clock(clock).open().unwrap();
    let calls = calls.clone();
    let runtime = Runtime::builder(journal)
        .register(COUNT_KIND, 1, move |ctx: WorkflowContext, fire: Fire| {
            let calls = calls.clone();
            async move {
                ctx.pure("count", move || {
                    calls.record(&fire);
                    async move { Ok(()) }
                })
                .await?;
                Ok::<i64, WorkflowError>(0)
            }
        })
        .start()
        .await
        .unwrap();
    Harness::over(runtime).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_schedulers_on_two_hosts_fire_each_slot_once() {
    let db = TestDb::on(Backend::Postgres);
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let (a, b) = tokio::join!(host(&db, &clock, &calls), host(&db, &clock, &calls));
    let job = counting_job("report").build().unwrap();
    let (registered_a, registered_b) = tokio::join!(a.register(job.clone()), b.register(job));
    registered_a.unwrap();
    registered_b.unwrap();

    let mut started: BTreeMap<i64, usize> = BTreeMap::new();
    for at in 0..SLOTS {
        clock.set_millis(T0_MS + at * MINUTE_MS);
        let (report_a, report_b) = tokio::join!(a.run_once(), b.run_once());
        for report in [&report_a, &report_b] {
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            for (_, slot) in report.started() {
                *started.entry(slot.as_millis()).or_default() += 1;
            }
        }
    }
    // Which slots a first pass fires is the catch-up policy's business; every slot from the
    // second pass on is due, and each is started once, by one of the two.
    for at in 1..SLOTS {
        assert!(
            started.contains_key(&(T0_MS + at * MINUTE_MS)),
            "{started:?}"
        );
    }
    assert!(started.values().all(|&count| count == 1), "{started:?}");
    assert_eq!(
        calls.per_slot(),
        started,
        "each started slot's workflow ran once"
    );

    // An explicit fire of a new slot by both at once: one starts it, the other finds it.
    let id = JobId::new("report").unwrap();
    let later = slot(T0_MS + SLOTS * MINUTE_MS);
    let (fired_a, fired_b) = tokio::join!(a.fire(&id, later), b.fire(&id, later));
    let outcomes = [fired_a.unwrap(), fired_b.unwrap()];
    let started_here = outcomes.iter().filter(|o| o.started_here()).count();
    assert_eq!(started_here, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, FireOutcome::Existing { .. })),
        "{outcomes:?}"
    );
    assert_eq!(calls.per_slot().get(&later.as_millis()), Some(&1));

    for harness in [&a, &b] {
        harness.runtime.drain().await;
    }
}
