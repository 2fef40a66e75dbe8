//! `scale`: open, step and finalize latencies on a journal pre-filled with many finalized
//! executions (default 1,000,000 with 10 steps each) against an empty one; then a retention
//! sweep of all of them while another task writes steps, reporting that writer's longest
//! stall and the sweep's memory.
//!
//! The pre-fill is plain SQL on the file, in big transactions, before the journal opens it:
//! the rows have the shape the journal writes, and building them through the step protocol
//! would take hours of fsyncs.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use durably::Journal;
use durably::defaults::GC_BATCH_EXECUTIONS_DEFAULT;
use durably::operator::{GcOptions, GcReport};
use durably::sqlite::rusqlite::{Connection, params};
use uuid::Uuid;

use crate::args::{EffectArg, IdsArg};
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::rss;
use crate::scenarios::{open_running, step};
use crate::stats::Samples;

/// Executions inserted per pre-fill transaction.
const PREFILL_BATCH_EXECUTIONS: u64 = 50_000;

/// The bound on the writer's longest stall during the retention sweep.
const STALL_TARGET: Duration = Duration::from_millis(50);

/// Latencies of one open / step / finalize cycle each.
#[derive(Debug, Default)]
struct Cycle {
    open: Samples,
    step: Samples,
    finalize: Samples,
    /// The time spent in steps, so ops/s is steps per second of stepping.
    step_total: Duration,
}

/// Runs the comparison and the sweep.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let cycles = if context.quick { 100 } else { 300 };
    let full_path = dir.join("full.db");
    drop(context.journal(&full_path)?);
    // Let the dropped journal's writer thread close its connection before the bulk load.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (executions, steps_each) = (context.scale_executions, context.scale_steps_per_execution);
    let prefill_began = Instant::now();
    let path = full_path.clone();
    tokio::task::spawn_blocking(move || prefill(&path, executions, steps_each)).await??;
    let prefill_time = prefill_began.elapsed();
    let file_mib = std::fs::metadata(&full_path).map_or(0, |meta| meta.len()) / (1024 * 1024);
    rss::reset_peak();

    let full = context.journal(&full_path)?;
    // One cycle on each journal in turn, so both see the same disk: a shared disk's commit
    // latency drifts within minutes, and measuring one journal after the other would compare
    // two moments of the disk rather than two journals.
    let empty = context.journal(&dir.join("empty.db"))?;
    let (mut on_empty, mut on_full) = (Cycle::default(), Cycle::default());
    for _ in 0..cycles {
        on_empty.record(&empty, context.execution_ids).await?;
        on_full.record(&full, context.execution_ids).await?;
    }
    drop(empty);
    let mut notes = vec![format!(
        "pre-filled {executions} executions, {} steps ({file_mib} MiB) in {:.1} s",
        executions * u64::from(steps_each),
        prefill_time.as_secs_f64()
    )];
    for (what, empty_samples, full_samples) in [
        ("open", &mut on_empty.open, &mut on_full.open),
        ("step", &mut on_empty.step, &mut on_full.step),
        ("finalize", &mut on_empty.finalize, &mut on_full.finalize),
    ] {
        let (empty_p50, full_p50) = (
            empty_samples.quantile_us(0.5),
            full_samples.quantile_us(0.5),
        );
        notes.push(format!(
            "{what}: p50 {empty_p50:.0} µs empty vs {full_p50:.0} µs full ({:.2}x); p99 {:.0} vs \
             {:.0} µs",
            full_p50 / empty_p50.max(1.0),
            empty_samples.quantile_us(0.99),
            full_samples.quantile_us(0.99),
        ));
    }
    notes.push(format!(
        "for reference, the longest step with no sweep running: {:.1} ms empty, {:.1} ms full",
        on_empty.step.max_us() / 1000.0,
        on_full.step.max_us() / 1000.0
    ));
    notes.extend(sweep_while_writing(&full, context.execution_ids.new_id()).await?);
    Ok(Outcome {
        ops: on_full.step.len() as u64,
        elapsed: on_full.step_total,
        latencies: on_full.step,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

impl Cycle {
    /// Runs one execution of one idempotent step on `journal` and records its latencies.
    async fn record(&mut self, journal: &Journal, ids: IdsArg) -> Result<()> {
        let began = Instant::now();
        let mut execution = open_running(journal, ids.new_id()).await?;
        let opened = Instant::now();
        step(&mut execution, EffectArg::Idempotent).await?;
        let stepped = Instant::now();
        execution.complete(&1_u32).await?;
        let finalized = Instant::now();
        self.open.record(opened - began);
        self.step.record(stepped - opened);
        self.step_total += stepped - opened;
        self.finalize.record(finalized - stepped);
        Ok(())
    }
}

/// Fills the journal file with `executions` completed executions finalized in 2020, each with
/// its released lock row and `steps_each` completed idempotent steps. Ids are canonical UUID
/// text, generated in key order (and `CROSS JOIN` keeps executions outermost), so the load
/// appends to each B-tree without a sort.
fn prefill(path: &Path, executions: u64, steps_each: u32) -> Result<()> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // A scratch file: no rollback journal and no fsync while loading. The journal turns WAL
    // back on when it opens the file.
    conn.query_row("PRAGMA journal_mode = OFF", [], |_| Ok(()))?;
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -65536;")?;
    let mut first = 0_u64;
    while first < executions {
        let last = (first + PREFILL_BATCH_EXECUTIONS).min(executions) - 1;
        if last + 1 == executions {
            // The last transaction syncs the file, so the load's dirty pages are on disk
            // before anything is timed and the kernel's writeback does not skew the fsyncs.
            conn.execute_batch("PRAGMA synchronous = FULL")?;
        }
        conn.execute_batch("BEGIN")?;
        insert_range(&conn, first, last, steps_each)?;
        conn.execute_batch("COMMIT")?;
        first = last + 1;
    }
    Ok(())
}

fn insert_range(conn: &Connection, first: u64, last: u64, steps_each: u32) -> Result<()> {
    const IDS: &str =
        "WITH RECURSIVE n(x) AS (SELECT ?1 UNION ALL SELECT x + 1 FROM n WHERE x < ?2)";
    const ID: &str = "printf('%08x-0000-4000-8000-%012x', x >> 32, x)";
    const AT: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 1577836800 + x, 'unixepoch')";
    let (first, last) = (first as i64, last as i64);
    conn.execute(
        &format!(
            "{IDS} INSERT INTO executions (execution_id, kind, name, status, input, output, opens,
                                         created_at, updated_at, finalized_at)
             SELECT {ID}, 'bench', 'prefill', 'completed', '0', '1', 1, {AT}, {AT}, {AT} FROM n"
        ),
        params![first, last],
    )?;
    conn.execute(
        &format!(
            "{IDS} INSERT INTO locks (resource, epoch, released_at) SELECT {ID}, 1, {AT} FROM n"
        ),
        params![first, last],
    )?;
    if steps_each > 0 {
        conn.execute(
            &format!(
                "{IDS}, s(seq) AS (SELECT 0 UNION ALL SELECT seq + 1 FROM s WHERE seq < ?3 - 1)
                 INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key,
                                    result, attempts, result_at)
                 SELECT {ID}, seq, 'step', 'idempotent', 'completed',
                        printf('%08x-%04x-8000-8000-%012x', x >> 32, seq, x), '1', 1, {AT}
                 FROM n CROSS JOIN s"
            ),
            params![first, last, steps_each],
        )?;
    }
    Ok(())
}

/// Deletes every pre-filled execution with the retention sweep while one task writes steps;
/// returns notes on the sweep's speed, the writer's longest stall, and memory.
async fn sweep_while_writing(journal: &Journal, writer_id: Uuid) -> Result<Vec<String>> {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (journal, stop) = (journal.clone(), Arc::clone(&stop));
        tokio::spawn(async move { write_until(&journal, writer_id, &stop).await })
    };
    let day = Duration::from_hours(24);
    let options = GcOptions {
        completed_older_than: day,
        failed_older_than: day,
        dry_run: false,
        batch_executions_max: GC_BATCH_EXECUTIONS_DEFAULT,
    };
    let rss_start = rss::current_kib().unwrap_or(0);
    let mut rss_max = rss_start;
    let began = Instant::now();
    // One sample per batch: the time from one batch's acknowledgement to the next, which is
    // the batch's own transaction and commit.
    let mut batch_times = Samples::with_capacity(16_384);
    let mut batch_began = Instant::now();
    let swept = journal
        .operator()
        .collect_garbage(options, |report: &GcReport| {
            batch_times.record(batch_began.elapsed());
            batch_began = Instant::now();
            if report.batches.is_multiple_of(64) {
                rss_max = rss_max.max(rss::current_kib().unwrap_or(0));
            }
        })
        .await;
    let sweep_time = began.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut writes = writer.await??;
    let report = swept?;
    let deleted = report.completed + report.failed;
    if deleted == 0 {
        return Err(BenchError::Unexpected(
            "the retention sweep deleted nothing".to_owned(),
        ));
    }
    Ok(vec![
        format!(
            "retention sweep: {deleted} executions in {} batches, {:.1} s ({:.0} executions/s)",
            report.batches,
            sweep_time.as_secs_f64(),
            deleted as f64 / sweep_time.as_secs_f64()
        ),
        format!(
            "one sweep batch (its transaction and commit): p50 {:.0} µs, p99 {:.0} µs, longest \
             {:.1} ms",
            batch_times.quantile_us(0.5),
            batch_times.quantile_us(0.99),
            batch_times.max_us() / 1000.0
        ),
        format!(
            "writer during the sweep: {} steps, p50 {:.0} µs, p99 {:.0} µs, longest stall {:.1} \
             ms; {} steps waited over {} ms",
            writes.len(),
            writes.quantile_us(0.5),
            writes.quantile_us(0.99),
            writes.max_us() / 1000.0,
            writes.count_over(STALL_TARGET),
            STALL_TARGET.as_millis()
        ),
        format!(
            "RSS during the sweep: {:.1} MiB at start, {:.1} MiB at most",
            rss_start as f64 / 1024.0,
            rss_max as f64 / 1024.0
        ),
    ])
}

/// Writes idempotent steps to one execution until told to stop.
async fn write_until(journal: &Journal, id: Uuid, stop: &AtomicBool) -> Result<Samples> {
    let mut execution = open_running(journal, id).await?;
    let mut latencies = Samples::with_capacity(16_384);
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        step(&mut execution, EffectArg::Idempotent).await?;
        latencies.record(began.elapsed());
    }
    execution.complete(&latencies.len()).await?;
    Ok(latencies)
}
