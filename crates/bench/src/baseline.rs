//! The raw-SQLite baseline: one small row per committed transaction, on its own file in the
//! same directory, with the journal's pragmas (WAL, the same `synchronous`). It measures the
//! commit rate this disk allows right now, so each scenario is compared with the limit measured
//! minutes, not days, away from it.

use std::path::Path;
use std::time::{Duration, Instant};

use durably::Durability;
use durably::sqlite::rusqlite::{Connection, params};

use crate::error::Result;
use crate::stats::Samples;

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

/// Commits one small row per transaction for `duration` and returns the rate.
pub fn measure(dir: &Path, durability: Durability, duration: Duration) -> Result<Baseline> {
    let path = dir.join("baseline.db");
    let conn = open_like_journal(&path, durability)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, value TEXT NOT NULL) STRICT",
    )?;
    let mut samples = Samples::with_capacity(4096);
    let start = Instant::now();
    let mut commits = 0_u64;
    while start.elapsed() < duration {
        let began = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO rows (value) VALUES (?1)")?
            .execute(params!["{\"n\":1}"])?;
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
    dir: &Path,
    durability: Durability,
    duration: Duration,
) -> Result<Baseline> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || measure(&dir, durability, duration)).await?
}
