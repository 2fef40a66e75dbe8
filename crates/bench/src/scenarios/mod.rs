//! One file per scenario, and the step helpers they share.

pub mod child;
pub mod children;
pub mod concurrent;
pub mod multiprocess;
pub mod parallel;
pub mod parked;
pub mod queue;
pub mod recovery;
pub mod replay;
pub mod resume_memory;
pub mod runtime_load;
pub mod scale;
pub mod scheduler;
pub mod send_wake;
pub mod seq;
pub mod timer_wake;
pub mod workflows;

use std::path::Path;

use durably::db::Dialect;
use durably::{Execution, Guarded, Journal, Opened, Policy, StepError};
use uuid::Uuid;

use crate::args::EffectArg;
use crate::ceiling;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::proc_io;

/// The name every benchmark step has.
pub const STEP_NAME: &str = "step";

/// Opens a new execution and insists it is running.
pub async fn open_running(journal: &Journal, id: Uuid) -> Result<Execution> {
    match journal.open_execution(id, "bench", "bench", &0_u32).await? {
        Opened::Running(execution) => Ok(execution),
        Opened::Finished(finished) => Err(BenchError::Unexpected(format!(
            "execution {} was already finished",
            finished.execution_id
        ))),
    }
}

/// Runs one step of the given kind whose closure does nothing but return a small value.
pub async fn step(execution: &mut Execution, effect: EffectArg) -> Result<u32> {
    match effect {
        EffectArg::Pure => Ok(execution
            .pure(STEP_NAME, || async { Ok::<u32, StepError>(1) })
            .await?),
        EffectArg::Idempotent => Ok(execution
            .idempotent(STEP_NAME, |_key| async { Ok::<u32, StepError>(1) })
            .await?),
        EffectArg::Guarded => {
            match execution
                .guarded(STEP_NAME, Policy::Fail, |_key| async {
                    Ok::<u32, StepError>(1)
                })
                .await?
            {
                Guarded::Done(value) => Ok(value),
                Guarded::Skipped(skipped) => Err(BenchError::Unexpected(skipped.to_string())),
            }
        }
    }
}

/// The single number `sql` (a `SELECT count(*)` or the like) reads from `journal`.
pub fn count(journal: &Journal, sql: &'static str) -> Result<u64> {
    let count: i64 = journal.read(|conn| Ok(conn.query_row(sql, [], |row| row.get(0))?))?;
    Ok(count.unsigned_abs())
}

/// The execution ids `sql` (a `SELECT execution_id ...`) reads from `journal`, in its order.
pub fn execution_ids(journal: &Journal, sql: &'static str) -> Result<Vec<Uuid>> {
    let ids: Vec<String> = journal.read(|conn| {
        let mut statement = conn.prepare(sql)?;
        let ids = statement.query_map([], |row| row.get(0))?;
        Ok(ids.collect::<Result<_, _>>()?)
    })?;
    ids.iter()
        .map(|id| Uuid::parse_str(id))
        .collect::<Result<Vec<Uuid>, _>>()
        .map_err(|error| BenchError::Unexpected(format!("an execution id: {error}")))
}

/// Measures the storage ceiling (see [`ceiling`]) for transactions of one request from each
/// of `requests` executions' `effect` steps, on a blocking thread for as long as a baseline, and says how close
/// `steps_per_s` came to it.
pub async fn ceiling_note(
    context: &Context,
    dir: &Path,
    requests: usize,
    effect: EffectArg,
    steps_per_s: f64,
) -> Result<String> {
    if context.server.is_some() {
        return Ok("storage ceiling: not measured on PostgreSQL (it is raw SQLite's)".to_owned());
    }
    let path = dir.join("ceiling.db");
    let ids: Vec<Uuid> = (0..requests).map(|_| context.new_id()).collect();
    let (durability, duration) = (context.durability, context.baseline_time);
    let found = tokio::task::spawn_blocking(move || {
        ceiling::measure(&path, durability, &ids, effect, duration)
    })
    .await??;
    Ok(format!(
        "storage ceiling: raw SQLite writing the same rows into the journal's tables, \
         {requests} request(s) a transaction, no engine: {:.0} steps/s in {:.0} commits/s; \
         durably ran at {:.0} % of it",
        found.steps_per_s,
        found.commits_per_s,
        100.0 * steps_per_s / found.steps_per_s.max(f64::EPSILON)
    ))
}

/// The writer's counters and the bytes written so far, at one moment: this process's on
/// SQLite, the server's WAL on PostgreSQL (where this process writes nothing itself).
#[derive(Debug, Clone, Copy)]
pub struct WriterSnapshot {
    stats: durably::sqlite::WriterStats,
    written_bytes: Option<u64>,
    server_wal: bool,
}

impl WriterSnapshot {
    /// Takes a snapshot now.
    pub fn take(journal: &Journal) -> Self {
        let server_wal = matches!(journal.target().dialect(), Dialect::Postgres);
        #[cfg(feature = "postgres")]
        let written_bytes = if server_wal {
            crate::postgres::wal_position(journal)
        } else {
            proc_io::written_bytes()
        };
        #[cfg(not(feature = "postgres"))]
        let written_bytes = proc_io::written_bytes();
        Self {
            stats: journal.writer_stats(),
            written_bytes,
            server_wal,
        }
    }

    /// The writer's commits at the snapshot.
    pub fn commits(&self) -> u64 {
        self.stats.commits
    }
}

/// Requests per commit of the writer since `before`, a request's mean life split at the moment
/// the writer took it, and the bytes written per commit, as a note. The bytes are nearly all
/// WAL frames (a page plus a 24-byte frame header each), so they say how many pages a commit
/// wrote: the cost that clustering the B-trees saves.
pub fn batching_note(journal: &Journal, before: WriterSnapshot) -> String {
    let after = WriterSnapshot::take(journal);
    let commits = after.stats.commits.saturating_sub(before.stats.commits);
    let requests = after.stats.requests.saturating_sub(before.stats.requests);
    let per_commit = |amount: f64| {
        if commits > 0 {
            amount / commits as f64
        } else {
            0.0
        }
    };
    let mut note = format!(
        "writer: {requests} requests in {commits} commits ({:.1} requests/commit)",
        per_commit(requests as f64)
    );
    let syncs = after.stats.syncs.saturating_sub(before.stats.syncs);
    if syncs > 0 {
        note = format!(
            "{note}, {syncs} WAL fsyncs ({:.1} requests/fsync)",
            requests as f64 / syncs as f64
        );
    }
    let answered = after.stats.answered.saturating_sub(before.stats.answered);
    if answered > 0 {
        let mean_ms = |total_ns: u64| total_ns as f64 / answered as f64 / 1e6;
        note = format!(
            "{note}; a request's life, from submission to its caller having the answer: {:.2} ms \
             on average, {:.2} ms of it queued",
            mean_ms(after.stats.waited_ns.saturating_sub(before.stats.waited_ns)),
            mean_ms(after.stats.queued_ns.saturating_sub(before.stats.queued_ns)),
        );
    }
    if let (Some(first), Some(last)) = (before.written_bytes, after.written_bytes) {
        let bytes = per_commit(last.saturating_sub(first) as f64);
        if before.server_wal {
            return format!(
                "{note}; {:.1} KiB of server WAL per commit (the whole server's, as \
                 pg_current_wal_insert_lsn moved)",
                bytes / 1024.0
            );
        }
        note = format!(
            "{note}; {:.1} KiB written per commit (~{:.1} WAL frames of {} bytes)",
            bytes / 1024.0,
            bytes / proc_io::WAL_FRAME_BYTES as f64,
            proc_io::WAL_FRAME_BYTES
        );
    }
    note
}
