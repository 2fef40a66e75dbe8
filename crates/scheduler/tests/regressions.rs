//! Regression tests for the scheduler review's bugs: every slot is fired once or recorded as
//! skipped (never silently lost), a fire waiting for an operator is left alone, a panicking body
//! is a bounded failure, recovery is never starved, and shutdown starts nothing new.
//!
//! Method: in-process schedulers on a scratch journal file with an injected clock
//! (`ManualClock`), driven pass by pass with `run_once`; the ledger is read back with plain SQL.
//! Where a test waits for the loop it polls with a bound (`wait_for`), never sleeps and hopes.
//! A crash inside a body is simulated by dropping the running fire (the shutdown grace of
//! `Scheduler::run` set to zero), which leaves the step's intent without a result exactly as
//! a killed process does, and releases the lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use durably_journal::Resolution;
use durably_scheduler::{
    CatchUp, Error, FireOutcome, FireState, Job, JobId, Overlap, Policy, RetryPolicy, Scheduler,
    StepError, fire_id,
};
use support::{Calls, MINUTE_MS, ManualClock, Scratch, T0_MS, counting_job, slot};

/// The bound of every wait on the loop.
const WAIT_MAX: Duration = Duration::from_secs(20);

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

/// `Scheduler::run` on its own task, until [`Running::shut_down`].
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    runner: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(scheduler: &Scheduler) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let scheduler = scheduler.clone();
        let runner = tokio::spawn(async move {
            scheduler
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self { stop, runner }
    }

    /// Asks the loop to stop and waits, at most [`WAIT_MAX`], until `run` has returned.
    async fn shut_down(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(WAIT_MAX, self.runner)
            .await
            .unwrap()
            .unwrap();
    }
}

fn all_window() -> CatchUp {
    CatchUp::All {
        window: Duration::from_hours(24),
        max: 1000,
    }
}

/// The slots (minutes after T0) of the job's fires, and of its skipped runs expanded.
fn handled_minutes(scratch: &Scratch, job: &str) -> (Vec<i64>, Vec<i64>) {
    let conn = rusqlite::Connection::open(scratch.path()).unwrap();
    let fired = conn
        .prepare("SELECT slot_ms FROM fires WHERE job = ?1 ORDER BY slot_ms")
        .unwrap()
        .query_map([job], |row| row.get::<_, i64>(0))
        .unwrap()
        .map(|ms| (ms.unwrap() - T0_MS) / MINUTE_MS)
        .collect();
    let mut skipped = Vec::new();
    let runs: Vec<(i64, i64)> = conn
        .prepare("SELECT first_slot_ms, last_slot_ms FROM skipped_slots WHERE job = ?1")
        .unwrap()
        .query_map([job], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (first, last) in runs {
        skipped.extend((first - T0_MS) / MINUTE_MS..=(last - T0_MS) / MINUTE_MS);
    }
    skipped.sort_unstable();
    (fired, skipped)
}

/// A one-minute job whose body counts its calls and, while `hang` is set, never returns (so a
/// zero shutdown grace drops it mid-body: the crash of a fire body).
fn hanging_job(
    id: &str,
    policy: Policy,
    overlap: Overlap,
    calls: &Calls,
    hang: &Arc<AtomicBool>,
) -> Job {
    let (calls, hang) = (calls.clone(), Arc::clone(hang));
    Job::builder(id)
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .catch_up(all_window())
        .overlap(overlap)
        .policy(policy)
        .body(move |context| {
            let (calls, hang) = (calls.clone(), Arc::clone(&hang));
            async move {
                calls.record(&context);
                if hang.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok::<_, StepError>(serde_json::Value::Null)
            }
        })
        .build()
        .unwrap()
}

/// Runs the loop until `calls` reaches `started` body calls, then shuts it down with no grace:
/// every body still running is dropped in its ambiguous window. `mark`, if given, is stored as
/// the job's high-water mark first (epoch ms), so the loop catches up from there.
async fn crash_inside_bodies(
    scratch: &Scratch,
    clock: &Arc<ManualClock>,
    job: Job,
    mark: Option<i64>,
    calls: &Calls,
    started: usize,
) {
    let scheduler = Scheduler::builder(scratch.journal(clock))
        .tick_max(Duration::from_millis(20))
        .shutdown_grace(Duration::ZERO)
        .build()
        .await
        .unwrap();
    scheduler.register(job).await.unwrap();
    if let Some(mark) = mark {
        let conn = rusqlite::Connection::open(scratch.path()).unwrap();
        conn.execute(
            "UPDATE jobs SET last_slot = ?1, last_slot_ms = ?2",
            rusqlite::params![slot(mark).to_rfc3339(), mark],
        )
        .unwrap();
    }
    let running = Running::start(&scheduler);
    wait_for("the bodies to start", || calls.total() >= started).await;
    running.shut_down().await;
}

/// Bug 1 (HIGH): an explicit fire of a slot ahead of the high-water mark raised the mark, so
/// the loop never fired nor recorded the slots in between. Now a slot past the upcoming one is
/// refused with `SlotInFuture`, and an explicit fire raises the mark only when no slot lies
/// between: the loop still handles every slot after the mark, and the explicitly fired one is
/// replayed, not run twice.
#[tokio::test(flavor = "multi_thread")]
async fn explicit_fire_ahead_of_the_mark_loses_no_slot() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let scheduler = scratch.scheduler(&clock).await;
    scheduler
        .register(
            counting_job("j", &calls)
                .catch_up(all_window())
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let id = JobId::new("j").unwrap();
    let _ = scheduler.run_once().await; // fires T0; mark = T0

    let future = scheduler.fire(&id, slot(T0_MS + 3 * MINUTE_MS)).await;
    assert!(
        matches!(future, Err(Error::SlotInFuture { .. })),
        "{future:?}"
    );
    assert_eq!(scheduler.high_water_mark(&id).unwrap(), Some(slot(T0_MS)));

    // At +3m the slot is due: an explicit fire runs it but leaves the mark at T0.
    clock.set_millis(T0_MS + 3 * MINUTE_MS);
    let ran = scheduler
        .fire(&id, slot(T0_MS + 3 * MINUTE_MS))
        .await
        .unwrap();
    assert!(matches!(ran, FireOutcome::Ran { .. }), "{ran:?}");
    assert_eq!(scheduler.high_water_mark(&id).unwrap(), Some(slot(T0_MS)));

    clock.set_millis(T0_MS + 5 * MINUTE_MS);
    let _ = scheduler.run_once().await;
    let per_slot: Vec<(i64, usize)> = calls
        .per_slot()
        .into_iter()
        .map(|(ms, count)| ((ms - T0_MS) / MINUTE_MS, count))
        .collect();
    assert_eq!(per_slot, [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]);
    assert_eq!(scratch.count("SELECT count(*) FROM skipped_slots"), 0);
    assert_eq!(
        scheduler.high_water_mark(&id).unwrap(),
        Some(slot(T0_MS + 5 * MINUTE_MS))
    );
}

/// Bug 2 (HIGH): two processes planning from the same stale mark lost the slots between their
/// two skipped runs. The due slots are now decided inside the registering transaction, from
/// the mark read there, so whatever the interleaving every slot is fired or recorded skipped,
/// exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn stale_mark_planning_loses_no_skipped_slot() {
    for round in 0..4 {
        let scratch = Scratch::new();
        let (clock_a, clock_b) = (ManualClock::at_millis(T0_MS), ManualClock::at_millis(T0_MS));
        let (calls_a, calls_b) = (Calls::default(), Calls::default());
        let a = scratch.scheduler(&clock_a).await;
        let b = scratch.scheduler(&clock_b).await;
        a.register(counting_job("x", &calls_a).build().unwrap())
            .await
            .unwrap();
        b.register(counting_job("x", &calls_b).build().unwrap())
            .await
            .unwrap();
        let _ = a.run_once().await; // mark = T0
        // Downtime; A's clock is one slot behind B's.
        clock_a.set_millis(T0_MS + 10 * MINUTE_MS + 30_000);
        clock_b.set_millis(T0_MS + 11 * MINUTE_MS + 30_000);
        // Hold the writer so both passes queue up behind it; the assertion below holds for
        // every interleaving, the hold only makes the concurrent one likely.
        let hold = rusqlite::Connection::open(scratch.path()).unwrap();
        hold.execute_batch("BEGIN IMMEDIATE").unwrap();
        let pass_a = tokio::spawn({
            let a = a.clone();
            async move { a.run_once().await }
        });
        let pass_b = tokio::spawn({
            let b = b.clone();
            async move { b.run_once().await }
        });
        tokio::task::yield_now().await;
        hold.execute_batch("COMMIT").unwrap();
        let (report_a, report_b) = (pass_a.await.unwrap(), pass_b.await.unwrap());
        assert!(
            report_a.errors.is_empty() && report_b.errors.is_empty(),
            "round {round}"
        );
        let (fired, skipped) = handled_minutes(&scratch, "x");
        let mut all: Vec<i64> = fired.iter().chain(&skipped).copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (1..=11).collect::<Vec<_>>(),
            "round {round}: fired {fired:?}, skipped {skipped:?}"
        );
    }
}

/// Bug 3 (HIGH): a `Policy::Fail` fire left ambiguous was reopened by recovery on every pass
/// (an `ambiguity_failed` event each time) and, under `Overlap::Skip`, made every later slot
/// skip. Now its first recovery notes it once as waiting for an operator; later passes leave it
/// alone, later slots fire normally, and `durably resolve` makes it resumable again.
#[tokio::test(flavor = "multi_thread")]
async fn fail_policy_fire_waiting_for_an_operator_is_left_alone() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let (calls, hang) = (Calls::default(), Arc::new(AtomicBool::new(true)));
    let job = || hanging_job("f", Policy::Fail, Overlap::Skip, &calls, &hang);
    crash_inside_bodies(&scratch, &clock, job(), None, &calls, 1).await;
    hang.store(false, Ordering::SeqCst);

    let scheduler = scratch.scheduler(&clock).await;
    scheduler.register(job()).await.unwrap();
    for minute in 1..=5 {
        clock.set_millis(T0_MS + minute * MINUTE_MS);
        let report = scheduler.run_once().await;
        if minute == 1 {
            assert_eq!(report.errors.len(), 1, "{report:?}"); // the one Ambiguous
        } else {
            assert!(report.errors.is_empty(), "{report:?}");
        }
    }
    for _ in 0..10 {
        let report = scheduler.run_once().await;
        assert!(
            report.fires.is_empty() && report.errors.is_empty(),
            "{report:?}"
        );
    }
    assert_eq!(
        scratch.count("SELECT count(*) FROM events WHERE kind = 'ambiguity_failed'"),
        1
    );
    assert_eq!(
        calls.per_slot().get(&T0_MS),
        Some(&1),
        "the ambiguous body never re-ran"
    );
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'skipped'"),
        0
    );
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'completed'"),
        5
    );
    assert_eq!(
        scratch.count(&format!(
            "SELECT count(*) FROM fires WHERE slot_ms = {T0_MS} AND state = 'running'
               AND awaiting_operator = 1 AND reason LIKE 'waiting for an operator%'"
        )),
        1
    );

    // The operator finds the effect did not happen: the next pass runs the body again.
    let id = JobId::new("f").unwrap();
    scheduler
        .journal()
        .operator()
        .resolve(fire_id(&id, slot(T0_MS)), 0, Resolution::NotDone)
        .await
        .unwrap();
    let report = scheduler.run_once().await;
    assert_eq!(report.ran(), [(id.clone(), slot(T0_MS))], "{report:?}");
    assert_eq!(
        scheduler
            .fire_state(&id, slot(T0_MS))
            .unwrap()
            .map(|(state, _)| state),
        Some(FireState::Completed)
    );
}

/// A job whose body panics on every call.
fn panicking_job(id: &str, policy: Policy, calls: &Arc<AtomicUsize>) -> Job {
    let calls = Arc::clone(calls);
    Job::builder(id)
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .catch_up(all_window())
        .policy(policy)
        .retry(RetryPolicy {
            attempts_max: 2,
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(1),
        })
        .body(move |_context| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                panic!("the body panics");
            }
        })
        .build()
        .unwrap()
}

/// Bug 4 (HIGH): a panicking body under `Policy::Retry` left its intent ambiguous and was
/// re-run by every recovery without bound (15 calls with `attempts_max = 2`), and
/// `fires.attempts` misreported. A panic is now an ordinary recorded failure of the attempt:
/// two attempts, then the fire is failed, with `attempts = 2`. Under `Policy::Fail` it is a
/// failure too, not an ambiguity for an operator.
#[tokio::test(flavor = "multi_thread")]
async fn panicking_body_is_a_bounded_recorded_failure() {
    for (name, policy) in [("retry", Policy::Retry), ("fail", Policy::Fail)] {
        let scratch = Scratch::new();
        let clock = ManualClock::at_millis(T0_MS);
        let calls = Arc::new(AtomicUsize::new(0));
        let scheduler = scratch.scheduler(&clock).await;
        scheduler
            .register(panicking_job(name, policy, &calls))
            .await
            .unwrap();
        let first = scheduler.run_once().await;
        assert!(
            matches!(
                &first.fires[..],
                [durably_scheduler::FireReport { outcome: FireOutcome::Failed { attempts: 2, error, .. }, .. }]
                    if error.message.contains("panicked") && !error.retryable
            ),
            "{first:?}"
        );
        for _ in 0..14 {
            let _ = scheduler.run_once().await;
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "policy {name}");
        let id = JobId::new(name).unwrap();
        assert_eq!(
            scheduler.fire_state(&id, slot(T0_MS)).unwrap(),
            Some((FireState::Failed, 2)),
            "policy {name}"
        );
        assert_eq!(
            scratch.count("SELECT count(*) FROM steps WHERE state = 'intent'"),
            0
        );
        assert_eq!(
            scratch.count("SELECT count(*) FROM events WHERE kind LIKE 'ambiguity%'"),
            0
        );
    }
}

/// Bug 5 (MEDIUM): recovery scanned only the 100 oldest unfinished fires, so 100 fires stuck
/// waiting for an operator hid a newer abandoned fire for good. Fires waiting for an operator
/// are no longer scanned, and the scan pages with a cursor across passes.
#[tokio::test(flavor = "multi_thread")]
async fn recovery_is_not_starved_by_fires_waiting_for_an_operator() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS + 100 * MINUTE_MS);
    let (calls, hang) = (Calls::default(), Arc::new(AtomicBool::new(true)));
    let job = || hanging_job("a", Policy::Fail, Overlap::Allow, &calls, &hang);
    // 101 fires (T0 ..= +100m) crash in their bodies.
    crash_inside_bodies(
        &scratch,
        &clock,
        job(),
        Some(T0_MS - MINUTE_MS),
        &calls,
        101,
    )
    .await;
    hang.store(false, Ordering::SeqCst);
    assert_eq!(
        scratch.count("SELECT count(*) FROM steps WHERE state = 'intent'"),
        101
    );

    let scheduler = scratch.scheduler(&clock).await;
    scheduler.register(job()).await.unwrap();
    // A process registered +101m and died before opening it: a pending row, the mark raised.
    let abandoned = slot(T0_MS + 101 * MINUTE_MS);
    {
        let conn = rusqlite::Connection::open(scratch.path()).unwrap();
        let id = fire_id(&JobId::new("a").unwrap(), abandoned).to_string();
        conn.execute(
            "INSERT INTO fires (job, slot, slot_ms, execution_id, state, registered_at)
             VALUES ('a', ?1, ?2, ?3, 'pending', '2026-01-01T01:41:00.000Z')",
            rusqlite::params![abandoned.to_rfc3339(), abandoned.as_millis(), id],
        )
        .unwrap();
        conn.execute(
            "UPDATE jobs SET last_slot = ?1, last_slot_ms = ?2 WHERE job = 'a'",
            rusqlite::params![abandoned.to_rfc3339(), abandoned.as_millis()],
        )
        .unwrap();
    }
    clock.set_millis(abandoned.as_millis());
    for _ in 0..3 {
        let _ = scheduler.run_once().await;
    }
    let id = JobId::new("a").unwrap();
    assert_eq!(
        scheduler.fire_state(&id, abandoned).unwrap(),
        Some((FireState::Completed, 1))
    );
    // Each stuck fire was opened once, found ambiguous once, and then left alone.
    assert_eq!(
        scratch.count("SELECT count(*) FROM events WHERE kind = 'ambiguity_failed'"),
        101
    );
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE awaiting_operator = 1"),
        101
    );
}

/// Bug 6 (MEDIUM): after shutdown a sequence of catch-up fires kept starting new fires, and a
/// failing fire kept retrying. Now shutdown starts nothing new: the running body sees
/// `shutting_down()`, the unstarted fires stay `pending`, and the next pass runs them.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_starts_no_new_fire_or_attempt() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let job = {
        let calls = calls.clone();
        Job::builder("s")
            .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
            .catch_up(CatchUp::All {
                window: Duration::from_hours(1),
                max: 10,
            })
            .overlap(Overlap::Skip)
            .body(move |context| {
                let calls = calls.clone();
                async move {
                    calls.record(&context);
                    if context.slot.as_millis() == T0_MS + MINUTE_MS {
                        // A long body that stops cooperatively.
                        context.shutdown_requested().await;
                        assert!(context.shutting_down());
                    }
                    Ok::<_, StepError>(serde_json::Value::Null)
                }
            })
            .build()
            .unwrap()
    };
    let scheduler = Scheduler::builder(scratch.journal(&clock))
        .tick_max(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    scheduler.register(job).await.unwrap();
    let _ = scheduler.run_once().await; // T0
    clock.set_millis(T0_MS + 10 * MINUTE_MS);
    let running = Running::start(&scheduler);
    wait_for("the first catch-up fire to start", || calls.total() == 2).await;
    running.shut_down().await;
    assert_eq!(calls.total(), 2, "no fire started after shutdown");
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'pending'"),
        9
    );

    // The next pass resumes the fires left pending, each once.
    let report = scheduler.run_once().await;
    assert_eq!(report.ran().len(), 9, "{report:?}");
    assert_eq!(
        scratch.count("SELECT count(*) FROM fires WHERE state = 'completed'"),
        11
    );
    assert!(calls.per_slot().values().all(|&count| count == 1));
}

/// Bug 6 (MEDIUM), retries: a failing fire waiting out its backoff makes no further attempt
/// once shutdown is asked for; it stays `running` with one attempt, for the next pass.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_interrupts_the_retry_backoff() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Arc::new(AtomicUsize::new(0));
    let job = {
        let calls = Arc::clone(&calls);
        Job::builder("b")
            .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
            .catch_up(CatchUp::Latest)
            .retry(RetryPolicy {
                attempts_max: 5,
                backoff_initial: Duration::from_hours(1),
                backoff_max: Duration::from_hours(1),
            })
            .body(move |_context| {
                let calls = Arc::clone(&calls);
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err::<serde_json::Value, _>(StepError::fatal("down"))
                }
            })
            .build()
            .unwrap()
    };
    let scheduler = scratch.scheduler(&clock).await;
    scheduler.register(job).await.unwrap();
    let running = Running::start(&scheduler);
    wait_for("the first attempt", || calls.load(Ordering::SeqCst) == 1).await;
    // The hour of backoff is cut short: `run` returns well within the wait bound.
    running.shut_down().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let id = JobId::new("b").unwrap();
    assert_eq!(
        scheduler.fire_state(&id, slot(T0_MS)).unwrap(),
        Some((FireState::Running, 1))
    );
}
