//! The baseline: one small row per committed transaction, on SQLite in a file of its own in the
//! same directory, with the journal's pragmas (WAL, the same `synchronous`), or on PostgreSQL in
//! a table of the scenario's schema on the same server, with the journal's
//! `synchronous_commit`. It measures the commit rate the storage allows right now, so each
//! scenario is compared with the limit measured minutes, not days, away from it.
//!
//! Both go through [`durably::db::Connection`], the path the journal's own writes take, with
//! the transaction shape of the journal's writer: `BEGIN` (`IMMEDIATE` on SQLite), one cached
//! `INSERT`, `COMMIT`.

use std::path::Path;
use std::time::{Duration, Instant};

use durably::Durability;
use durably::db::{Connection as DbConnection, Sql, Target};
use durably::sqlite::rusqlite::Connection;

use crate::error::Result;
use crate::stats::Samples;

/// The baseline's table.
const CREATE: Sql = Sql {
    sqlite: "CREATE TABLE IF NOT EXISTS bench_baseline (id INTEGER PRIMARY KEY, \
             value TEXT NOT NULL) STRICT",
    postgres: "CREATE TABLE IF NOT EXISTS bench_baseline \
               (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, value text NOT NULL)",
};

/// How the journal's writer begins a transaction on each backend.
const BEGIN: Sql = Sql {
    sqlite: "BEGIN IMMEDIATE",
    postgres: "BEGIN",
};

/// The baseline's result.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    /// Committed transactions per second.
    pub commits_per_s: f64,
    /// The 99th percentile of one commit, in microseconds.
    pub commit_p99_us: f64,
    /// The longest single commit, in microseconds: this disk's fsync tail right now, which
    /// bounds from below the worst latency any scenario can show.
    pub commit_max_us: f64,
}

/// Opens a connection with the journal's write pragmas.
pub fn open_like_journal(path: &Path, durability: Durability) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    debug_assert_eq!(mode, "wal");
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::ProcessCrash => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
    ))?;
    Ok(conn)
}

/// A session on `target` with the journal's settings for `durability`.
fn open(target: &Target, durability: Durability) -> Result<DbConnection> {
    match target {
        Target::Sqlite(path) => Ok(DbConnection::from(open_like_journal(path, durability)?)),
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => crate::postgres::connect_like_journal(url, durability),
        #[cfg(not(feature = "postgres"))]
        Target::Postgres(_) => Err(crate::error::BenchError::Setup(
            crate::context::POSTGRES_NOT_BUILT.to_owned(),
        )),
    }
}

/// Commits one small row per transaction to `target` (a SQLite file, or a PostgreSQL schema)
/// for `duration` and returns the rate.
pub fn measure(target: &Target, durability: Durability, duration: Duration) -> Result<Baseline> {
    let conn = open(target, durability)?;
    conn.execute_batch(conn.pick(&CREATE))?;
    let begin = conn.pick(&BEGIN);
    let mut samples = Samples::with_capacity(4096);
    let start = Instant::now();
    let mut commits = 0_u64;
    while start.elapsed() < duration {
        let began = Instant::now();
        conn.execute_batch(begin)?;
        conn.prepare_cached("INSERT INTO bench_baseline (value) VALUES (?1)")?
            .execute(["{\"n\":1}"])?;
        conn.execute_batch("COMMIT")?;
        samples.record(began.elapsed());
        commits += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Baseline {
        commits_per_s: commits as f64 / elapsed,
        commit_p99_us: samples.quantile_us(0.99),
        commit_max_us: samples.max_us(),
    })
}

/// Measures the baseline on a blocking thread, so the runtime's workers stay free.
pub async fn measure_async(
    target: &Target,
    durability: Durability,
    duration: Duration,
) -> Result<Baseline> {
    let target = target.clone();
    tokio::task::spawn_blocking(move || measure(&target, durability, duration)).await?
}
