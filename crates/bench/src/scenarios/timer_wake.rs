//! `timer-wake`: how late a due timer wakes its execution on an idle runtime. 1,000 workflows
//! (100 with `--quick`) each sleep until an instant of their own, 5 to 20 ms after the one
//! before, on a runtime that parks every wait (`park_after(0)`): each sleep parks its
//! execution (a row, no task), and the runtime's due pass wakes it when its instant comes,
//! claims it, and replays it past the sleep. One op is a wake; its latency is its lateness:
//! the start of the step after the sleep (the instant the sleep returns in the resumed run)
//! less the wake time, both on the system clock. The target is p99 ≤ 20 ms.
//!
//! The workflows are started and parked before the first wake time ([`SETUP_MARGIN`] after
//! the first start), so that the wakes find the runtime idle; a run where they were not is
//! refused rather than reported. ops/s is the wakes over the time from the first wake time
//! to the last wake: it is set by the timers' spacing, not a rate to compare.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use durably::Journal;
use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};

use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::scenarios::runtime_load::{CONCURRENCY, PRODUCERS};
use crate::scenarios::{STEP_NAME, count};
use crate::stats::Samples;

/// The workflow kind of this scenario.
const KIND: &str = "timer";

/// The target for the p99 lateness.
const TARGET_P99: Duration = Duration::from_millis(20);

/// From the first start to the first wake time: room for every workflow to start and park.
const SETUP_MARGIN: Duration = Duration::from_secs(3);

/// How often the harness counts the parked executions while they park.
const POLL: Duration = Duration::from_millis(10);

/// The shortest and longest spacing between two wake times, in milliseconds.
const SPACING_MS: (u32, u32) = (5, 20);

/// What the workflows report: the lateness of each wake, the latest wake, and how many
/// sleeps returned on a run that had not parked (the scenario's setup was too slow).
#[derive(Debug, Default)]
struct Wakes {
    lateness: Samples,
    last: Option<DateTime<Utc>>,
    unparked: u32,
}

/// Starts the workflows, waits until all are parked, then until every wake has happened.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let workflows: u32 = if context.quick { 100 } else { 1_000 };
    let journal = context.journal(&dir.join("journal.db"))?;
    let wakes = Arc::new(Mutex::new(Wakes::default()));
    let runtime = runtime(&journal, &wakes).await?;
    let first = Utc::now() + TimeDelta::from_std(SETUP_MARGIN).unwrap_or_default();
    let instants: Vec<DateTime<Utc>> = (0..workflows)
        .scan(first, |at, index| {
            let this = *at;
            *at += TimeDelta::milliseconds(i64::from(spacing_ms(index)));
            Some(this)
        })
        .collect();
    let handles = start_all(&runtime, context, &instants);
    let parked_at = wait_until_parked(&journal, workflows, first).await?;
    if parked_at >= first {
        return Err(BenchError::Unexpected(format!(
            "the {workflows} workflows took past the first wake time to park ({} ms late); \
             the wakes would not find the runtime idle",
            (parked_at - first).num_milliseconds()
        )));
    }
    for handle in handles {
        handle.await??;
    }
    runtime.shutdown();
    let wakes = std::mem::take(&mut *wakes.lock().unwrap_or_else(PoisonError::into_inner));
    if wakes.unparked > 0 {
        return Err(BenchError::Unexpected(format!(
            "{} sleeps returned without parking",
            wakes.unparked
        )));
    }
    let last = wakes.last.unwrap_or(first);
    let elapsed = (last - first).to_std().unwrap_or_default();
    let mut lateness = wakes.lateness;
    let p99 = lateness.quantile_us(0.99);
    let verdict = if p99 <= TARGET_P99.as_micros() as f64 {
        "meets"
    } else {
        "MISSES"
    };
    let notes = vec![
        format!(
            "{workflows} workflows parked on timers {}-{} ms apart (runtime concurrency \
             {CONCURRENCY}, park_after 0), all parked {:.0} ms before the first was due; \
             lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, which {verdict} the {} ms \
             p99 target; {} of {} wakes later than 20 ms",
            SPACING_MS.0,
            SPACING_MS.1,
            (first - parked_at).num_milliseconds(),
            lateness.quantile_us(0.5) / 1e3,
            p99 / 1e3,
            lateness.max_us() / 1e3,
            TARGET_P99.as_millis(),
            lateness.count_over(TARGET_P99),
            lateness.len()
        ),
        format!(
            "wake phase {:.2} s, from the first wake time to the last wake",
            elapsed.as_secs_f64()
        ),
    ];
    Ok(Outcome {
        ops: u64::from(workflows),
        elapsed,
        latencies: lateness,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

/// The spacing before the wake time after the `index`th: 5 to 20 ms, spread evenly and the
/// same in every run.
fn spacing_ms(index: u32) -> u32 {
    let span = SPACING_MS.1 - SPACING_MS.0 + 1;
    SPACING_MS.0 + index.wrapping_mul(7) % span
}

/// A runtime that parks every wait, serving [`KIND`]: sleep until the input's instant (epoch
/// milliseconds), report the lateness of the wake, then one idempotent step.
async fn runtime(journal: &Journal, wakes: &Arc<Mutex<Wakes>>) -> Result<Runtime> {
    let wakes = Arc::clone(wakes);
    Ok(Runtime::builder(journal.clone())
        .concurrency_max(CONCURRENCY)
        .park_after(Duration::ZERO)
        .register(KIND, 1, move |context, wake_ms: i64| {
            sleeper(context, wake_ms, Arc::clone(&wakes))
        })
        .start()
        .await?)
}

async fn sleeper(
    context: WorkflowContext,
    wake_ms: i64,
    wakes: Arc<Mutex<Wakes>>,
) -> Result<u32, WorkflowError> {
    let at = DateTime::<Utc>::from_timestamp_millis(wake_ms)
        .ok_or_else(|| WorkflowError::new("a wake time out of range"))?;
    context.sleep_until("nap", at).await?;
    let woke = Utc::now();
    {
        let mut wakes = wakes.lock().unwrap_or_else(PoisonError::into_inner);
        if context.is_resume() {
            wakes
                .lateness
                .record((woke - at).to_std().unwrap_or_default());
            wakes.last = wakes.last.max(Some(woke));
        } else {
            wakes.unparked += 1;
        }
    }
    context
        .idempotent(STEP_NAME, |_key| async { Ok(1_u32) })
        .await?;
    Ok(1)
}

/// Starts one workflow per instant from [`PRODUCERS`] tasks; each task then awaits its
/// workflows' results.
fn start_all(
    runtime: &Runtime,
    context: &Context,
    instants: &[DateTime<Utc>],
) -> Vec<tokio::task::JoinHandle<Result<()>>> {
    let instants: Arc<[DateTime<Utc>]> = Arc::from(instants);
    let next = Arc::new(AtomicU32::new(0));
    let ids = context.execution_ids;
    (0..PRODUCERS)
        .map(|_| {
            let (runtime, next) = (runtime.clone(), Arc::clone(&next));
            let instants = Arc::clone(&instants);
            tokio::spawn(async move {
                let mut handles = Vec::new();
                while let Some(at) = instants.get(next.fetch_add(1, Ordering::Relaxed) as usize) {
                    let (id, wake_ms) = (ids.new_id(), at.timestamp_millis());
                    let options = StartOptions::default();
                    handles.push(runtime.start::<_, u32>(KIND, id, &wake_ms, options).await?);
                }
                for handle in handles {
                    handle.result().await?;
                }
                Ok(())
            })
        })
        .collect()
}

/// Waits until `workflows` executions are parked (`waiting`), or until `first`, whichever
/// comes first; returns when it stopped.
async fn wait_until_parked(
    journal: &Journal,
    workflows: u32,
    first: DateTime<Utc>,
) -> Result<DateTime<Utc>> {
    loop {
        let waiting = count(
            journal,
            "SELECT count(*) FROM executions WHERE status = 'waiting'",
        )?;
        let now = Utc::now();
        if waiting >= u64::from(workflows) || now >= first {
            return Ok(now);
        }
        tokio::time::sleep(POLL).await;
    }
}
