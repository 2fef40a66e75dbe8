//! Shared helpers of the in-process scheduler tests: a clock the test moves by hand, journals
//! on a scratch database (the testkit's), a runtime serving a workflow (`count`) that counts its runs per slot,
//! and a scheduler over it whose passes wait for the fires they started to end.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_journal::Journal;
use durably_lock::Clock;
use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
use durably_scheduler::{Fire, FireOutcome, JobBuilder, PassReport, Scheduler, Slot};
use durably_testkit::TestDb;

/// The workflow kind test jobs start: it counts its run in one step.
pub const COUNT_KIND: &str = "count";

/// A workflow kind that counts its run, then, for the slot at T0 only, waits for a message on
/// topic `release` before it ends.
pub const GATED_KIND: &str = "gated";

/// 2026-01-01T00:00:00.000Z.
pub const T0_MS: i64 = 1_767_225_600_000;
pub const MINUTE_MS: i64 = 60_000;

/// A clock that stands still until the test moves it.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn at_millis(millis: i64) -> Arc<Self> {
        Arc::new(Self(Mutex::new(
            DateTime::from_timestamp_millis(millis).unwrap(),
        )))
    }

    pub fn set_millis(&self, millis: i64) {
        *self.0.lock().unwrap() = DateTime::from_timestamp_millis(millis).unwrap();
    }

    pub fn millis(&self) -> i64 {
        self.0.lock().unwrap().timestamp_millis()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// A scratch database (the testkit's, on the backend `DURABLY_TEST_BACKEND` names) that each
/// scheduler process of a test opens a journal of its own on.
pub struct Scratch {
    /// The first journal opened here, which the test's own reads and writes go through.
    /// Declared before `db`, so it is dropped first: a PostgreSQL schema is dropped only once no
    /// session works in it.
    probe: OnceLock<Journal>,
    db: TestDb,
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            probe: OnceLock::new(),
            db: TestDb::new(),
        }
    }

    /// A journal (and so a lock instance) of its own on the shared database.
    pub fn journal(&self, clock: &Arc<ManualClock>) -> Journal {
        let clock: Arc<dyn Clock> = clock.clone();
        let journal = self.db.builder().clock(clock).open().unwrap();
        let _ = self.probe.set(journal.clone());
        journal
    }

    /// The journal the test reads and plants rows through: the first one opened here, or a
    /// new one on the system clock when the test has opened none.
    pub fn probe(&self) -> &Journal {
        self.probe.get_or_init(|| self.db.open())
    }

    /// A runtime serving `count` (recording into `calls`) on a journal of its own, and a
    /// scheduler over it.
    pub async fn scheduler(&self, clock: &Arc<ManualClock>, calls: &Calls) -> Harness {
        let (calls, calls_gated) = (calls.clone(), calls.clone());
        let runtime = Runtime::builder(self.journal(clock))
            .register(COUNT_KIND, 1, move |ctx: WorkflowContext, fire: Fire| {
                let calls = calls.clone();
                async move {
                    let slot = fire.slot.as_millis();
                    let counted = ctx
                        .pure("count", move || {
                            calls.record(&fire);
                            async move { Ok(slot) }
                        })
                        .await?;
                    Ok::<i64, WorkflowError>(counted)
                }
            })
            .register(GATED_KIND, 1, {
                let calls = calls_gated;
                move |ctx: WorkflowContext, fire: Fire| {
                    let calls = calls.clone();
                    async move {
                        let at_t0 = fire.slot.as_millis() == T0_MS;
                        ctx.pure("count", move || {
                            calls.record(&fire);
                            async move { Ok(()) }
                        })
                        .await?;
                        if at_t0 {
                            let _: Option<bool> =
                                ctx.recv("release", Duration::from_hours(1)).await?;
                        }
                        Ok::<i64, WorkflowError>(0)
                    }
                }
            })
            .start()
            .await
            .unwrap();
        Harness::over(runtime).await
    }

    /// Inserts the `pending` row a scheduler from before fires were workflows left for `job`
    /// at `slot`: registered, never opened, no execution.
    pub async fn insert_pending_fire(&self, job: &str, slot: Slot) {
        let id = durably_scheduler::JobId::new(job).unwrap();
        let params = (
            job.to_owned(),
            slot.to_rfc3339(),
            slot.as_millis(),
            durably_scheduler::fire_id(&id, slot).to_string(),
        );
        self.probe()
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO fires (job, slot, slot_ms, execution_id, state, registered_at)
                     VALUES (?1, ?2, ?3, ?4, 'pending', '2025-12-31T23:59:00.000Z')",
                    durably_db::params![params.0, params.1, params.2, params.3],
                )?;
                Ok(())
            })
            .await
            .unwrap();
    }

    /// Reads one integer with plain SQL.
    pub fn count(&self, sql: &str) -> i64 {
        count_in(self.probe(), sql)
    }
}

/// Reads one integer from `journal` with plain SQL.
pub fn count_in(journal: &Journal, sql: &str) -> i64 {
    journal
        .read(|conn| Ok(conn.query_row(sql, [], |row| row.get(0))?))
        .unwrap()
}

/// One test's world: a scratch database, a clock, the workflow runs counted, and a harness.
pub struct World {
    /// Declared first, so it is dropped before the database under it.
    pub harness: Harness,
    pub scratch: Scratch,
    pub clock: Arc<ManualClock>,
    pub calls: Calls,
}

/// A world whose clock reads `at_ms`, with `job` registered.
pub async fn world(at_ms: i64, job: durably_scheduler::Job) -> World {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(at_ms);
    let calls = Calls::default();
    let harness = scratch.scheduler(&clock, &calls).await;
    let _ = harness.register(job).await.unwrap();
    World {
        harness,
        scratch,
        clock,
        calls,
    }
}

/// A runtime and a scheduler over it. Derefs to the scheduler; `run_once` and `fire` wait
/// for the executions they started to end, so the test reads settled counts.
pub struct Harness {
    pub runtime: Runtime,
    pub scheduler: Scheduler,
}

impl std::ops::Deref for Harness {
    type Target = Scheduler;

    fn deref(&self) -> &Scheduler {
        &self.scheduler
    }
}

impl Harness {
    /// A scheduler over `runtime`, whose loop wakes at least every 20 ms.
    pub async fn over(runtime: Runtime) -> Self {
        let scheduler = Scheduler::builder((*runtime).clone())
            .tick_max(Duration::from_millis(20))
            .build()
            .await
            .unwrap();
        Self { runtime, scheduler }
    }

    pub async fn run_once(&self) -> PassReport {
        let report = self.scheduler.run_once().await;
        for fire in &report.fires {
            self.settle(&fire.outcome).await;
        }
        report
    }

    pub async fn fire(
        &self,
        job: &durably_scheduler::JobId,
        slot: Slot,
    ) -> durably_scheduler::Result<FireOutcome> {
        let outcome = self.scheduler.fire(job, slot).await?;
        self.settle(&outcome).await;
        Ok(outcome)
    }

    /// Waits for a started fire's execution to end.
    pub async fn settle(&self, outcome: &FireOutcome) {
        if outcome.started_here() {
            let handle = self.runtime.handle::<i64>(outcome.execution_id());
            tokio::time::timeout(Duration::from_secs(30), handle.result())
                .await
                .expect("the fire ended within 30 s")
                .unwrap();
        }
    }
}

/// Counts workflow runs per slot (epoch milliseconds).
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<BTreeMap<i64, Vec<Fire>>>>);

impl Calls {
    pub fn record(&self, fire: &Fire) {
        self.0
            .lock()
            .unwrap()
            .entry(fire.slot.as_millis())
            .or_default()
            .push(fire.clone());
    }

    /// Slots called, each with its number of calls.
    pub fn per_slot(&self) -> BTreeMap<i64, usize> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(slot, calls)| (*slot, calls.len()))
            .collect()
    }

    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// A job on a one-minute grid through T0 whose fires start `count`.
pub fn counting_job(id: &str) -> JobBuilder {
    durably_scheduler::Job::builder(id)
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .workflow(COUNT_KIND)
}

pub fn slot(millis: i64) -> Slot {
    Slot::from_millis(millis).unwrap()
}
