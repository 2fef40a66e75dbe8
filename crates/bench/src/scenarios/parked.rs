//! `parked`: what 100,000 parked executions (10,000 with `--quick`) cost a runtime process
//! that serves their kind. A parked execution must be a row, not a task: the issue bounds the
//! resident memory it adds to a runtime process at 10 MiB for all of them together.
//!
//! Two journals are prepared: one with the parked executions, one with none. Each parked
//! execution has exactly the rows a workflow that parked on a long sleep leaves (status
//! `waiting` with a far-future `due_at` and a status detail; its `runtime_executions` row; the
//! recorded sleep step `durably:sleep/nap` with its wake time; its released lock; the `parked`
//! audit event), written by SQL in one transaction, since no sleep can be awaited faster. Then
//! a fresh process (this binary with the hidden `parked-worker` subcommand) opens each journal,
//! starts a runtime on it, idles 2 s (two passes of the dispatcher's safety tick), and reports
//! its start-up time, its resident memory and the CPU it used while idle. One op is a parked
//! execution brought up: ops/s is the parked rows over the parked process's start-up (journal
//! open and `RuntimeBuilder::start`), which is also the latency sample.

use std::path::Path;
use std::time::{Duration, Instant};

use durably::db::{Connection, params};
use durably::lock::{Clock, SystemClock, format_timestamp};
use durably::runtime::Client;
use durably::{Durability, IdempotencyKey, Journal};

use crate::args::ParkedWorkerArgs;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::rss;
use crate::scenarios::child;
use crate::scenarios::runtime_load::{self, KIND, StepSamples};
use crate::stats::Samples;

/// The bound on what the parked executions add to the process's RSS, in KiB.
const RSS_BOUND_KIB: i64 = 10 * 1024;

/// How long each runtime process idles before it reports.
const IDLE: Duration = Duration::from_secs(2);

/// The timer each parked execution sleeps on, and the step that records it.
const TIMER: &str = "nap";
const SLEEP_STEP: &str = "durably:sleep/nap";

/// When the parked executions wake: never, within the run.
const WAKE_AT: &str = "2999-12-31T00:00:00.000Z";

/// Linux reports process CPU time in clock ticks of this many milliseconds (`USER_HZ` = 100
/// is part of its ABI).
const TICK_MS: u64 = 10;

/// Prepares both journals, runs a runtime process on each, and compares them.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let rows: u32 = if context.quick { 10_000 } else { 100_000 };
    let (empty_path, parked_path) = (dir.join("empty.db"), dir.join("parked.db"));
    prepare(context, &empty_path, 0).await?;
    let fixture_time = prepare(context, &parked_path, rows).await?;
    let empty = WorkerReport::run(context, &empty_path).await?;
    let parked = WorkerReport::run(context, &parked_path).await?;
    let added_kib = parked.rss_kib as i64 - empty.rss_kib as i64;
    let verdict = if added_kib <= RSS_BOUND_KIB {
        "within"
    } else {
        "OVER"
    };
    let mut latencies = Samples::default();
    latencies.record(parked.startup);
    let mib = |kib: u64| kib as f64 / 1024.0;
    Ok(Outcome {
        ops: u64::from(rows),
        elapsed: parked.startup,
        latencies,
        notes: vec![
            format!(
                "{rows} parked executions (waiting on a sleep until {WAKE_AT}; 5 rows each) \
                 written in {:.1} s; a fresh runtime process per journal, idle {} s after its \
                 start",
                fixture_time.as_secs_f64(),
                IDLE.as_secs()
            ),
            format!(
                "RSS after idling: {:.1} MiB with the parked executions, {:.1} MiB with none: \
                 {:+.1} MiB, {verdict} the {} MiB bound (peaks {:.1} and {:.1} MiB)",
                mib(parked.rss_kib),
                mib(empty.rss_kib),
                added_kib as f64 / 1024.0,
                RSS_BOUND_KIB / 1024,
                mib(parked.peak_kib),
                mib(empty.peak_kib),
            ),
            format!(
                "start-up (journal open + RuntimeBuilder::start): {} with the parked \
                 executions, {} with none; CPU while idle: {} ms and {} ms",
                parked.startup_parts(),
                empty.startup_parts(),
                parked.idle_cpu_ms,
                empty.idle_cpu_ms
            ),
        ],
        peak_rss_kib_elsewhere: Some(parked.peak_kib),
    })
}

/// Creates the journal at `path` with the runtime's tables and `rows` parked executions, and
/// checkpoints it, so the runtime process starts on a settled file. Returns the time the rows
/// took.
async fn prepare(context: &Context, path: &Path, rows: u32) -> Result<Duration> {
    let journal = context.journal(path)?;
    drop(Client::new(journal.clone()).await?);
    let began = Instant::now();
    journal.write(move |conn| park(conn, rows)).await?;
    let took = began.elapsed();
    drop(journal);
    let conn = durably::sqlite::rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(took)
}

/// Writes `rows` parked executions in the caller's transaction: for each, the rows a park on
/// a long sleep leaves.
fn park(conn: &Connection, rows: u32) -> durably::Result<()> {
    let now = format_timestamp(SystemClock.now());
    // The workflow's input: one idempotent step (`runtime_load::Input`).
    let input = serde_json::json!([1, false]).to_string();
    // As the runtime's park on a timer writes them (`crate::timers` of durably-runtime).
    let detail = serde_json::json!({ "timer": TIMER, "wake_at": WAKE_AT });
    let event = serde_json::json!({ "due_at": WAKE_AT, "detail": detail }).to_string();
    let (detail, result) = (
        detail.to_string(),
        serde_json::json!({ "wake_at": WAKE_AT }).to_string(),
    );
    let mut executions = conn.prepare_cached(
        "INSERT INTO executions (execution_id, kind, name, status, input, opens, created_at,
                                 updated_at, due_at, status_detail)
         VALUES (?1, ?2, ?2, 'waiting', ?3, 1, ?4, ?4, ?5, ?6)",
    )?;
    let mut runtime_rows = conn
        .prepare_cached("INSERT INTO runtime_executions (execution_id, version) VALUES (?1, 1)")?;
    let mut steps = conn.prepare_cached(
        "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key, result,
                            attempts, result_at)
         VALUES (?1, 0, ?2, 'pure', 'completed', ?3, ?4, 1, ?5)",
    )?;
    let mut locks =
        conn.prepare_cached("INSERT INTO locks (resource, epoch, released_at) VALUES (?1, 1, ?2)")?;
    let mut events = conn.prepare_cached(
        "INSERT INTO events (at, execution_id, kind, detail) VALUES (?1, ?2, 'parked', ?3)",
    )?;
    for _ in 0..rows {
        let id = durably::new_execution_id();
        let key = IdempotencyKey::derive(id, 0, SLEEP_STEP).0.to_string();
        let id = id.to_string();
        executions.execute(params![id, KIND, input, now, WAKE_AT, detail])?;
        runtime_rows.execute(params![id])?;
        steps.execute(params![id, SLEEP_STEP, key, result, now])?;
        locks.execute(params![id, now])?;
        events.execute(params![now, id, event])?;
    }
    Ok(())
}

/// What a runtime process of this scenario reported.
struct WorkerReport {
    /// The journal's open, the first part of the start-up.
    open: Duration,
    /// The journal's open and `RuntimeBuilder::start`.
    startup: Duration,
    rss_kib: u64,
    peak_kib: u64,
    idle_cpu_ms: u64,
}

impl WorkerReport {
    /// Runs a runtime process on the journal at `path` and reads its report.
    async fn run(context: &Context, path: &Path) -> Result<Self> {
        let printed = child::finish(child::spawn(context, "parked-worker", path, &[])?).await?;
        Ok(Self {
            open: Duration::from_micros(child::field(&printed, "open_us")?),
            startup: Duration::from_micros(child::field(&printed, "startup_us")?),
            rss_kib: child::field(&printed, "rss_kib")?,
            peak_kib: child::field(&printed, "peak_kib")?,
            idle_cpu_ms: child::field(&printed, "idle_cpu_ms")?,
        })
    }

    /// The start-up and its two parts, for a note.
    fn startup_parts(&self) -> String {
        let ms = |time: Duration| time.as_secs_f64() * 1e3;
        format!(
            "{:.1} ms ({:.1} + {:.1})",
            ms(self.startup),
            ms(self.open),
            ms(self.startup.saturating_sub(self.open))
        )
    }
}

/// The runtime process: opens the journal, starts a runtime serving the parked executions'
/// kind, idles, and prints its start-up time, RSS, peak RSS and CPU time while idle.
pub async fn worker(args: &ParkedWorkerArgs, durability: Durability) -> Result<()> {
    let began = Instant::now();
    let journal = Journal::builder(&args.db).durability(durability).open()?;
    let opened = began.elapsed();
    let runtime = runtime_load::builder(journal, &StepSamples::default(), None)
        .start()
        .await?;
    let startup = began.elapsed();
    let cpu_before = cpu_ticks()?;
    tokio::time::sleep(IDLE).await;
    let idle_ticks = cpu_ticks()?.saturating_sub(cpu_before);
    println!(
        "open_us={} startup_us={} rss_kib={} peak_kib={} idle_cpu_ms={}",
        opened.as_micros(),
        startup.as_micros(),
        rss::current_kib().unwrap_or(0),
        rss::peak_kib().unwrap_or(0),
        idle_ticks * TICK_MS
    );
    runtime.shutdown();
    Ok(())
}

/// This process's CPU time so far (user and system, every thread), in clock ticks, from
/// `/proc/self/stat`.
fn cpu_ticks() -> Result<u64> {
    let path = "/proc/self/stat";
    let stat =
        std::fs::read_to_string(path).map_err(|source| BenchError::io("read", path, source))?;
    // The fields after the command name (which may hold spaces) start with the state, the
    // third field; utime and stime are the 14th and 15th.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let mut fields = after_name.split_whitespace().skip(11);
    let mut next = || fields.next().and_then(|field| field.parse::<u64>().ok());
    match (next(), next()) {
        (Some(user), Some(system)) => Ok(user + system),
        _ => Err(BenchError::Unexpected(format!("{path} reads {stat:.200}"))),
    }
}
