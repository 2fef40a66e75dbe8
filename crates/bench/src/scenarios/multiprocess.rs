//! `multiprocess`: several processes (default four) write steps to one file at once. The
//! harness re-executes itself with a hidden `multiprocess-worker` subcommand; each worker opens
//! its own journal on the shared file, waits for a common start time, runs idempotent steps for
//! the run time, and prints its count, its peak RSS and its latencies on stdout.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durably::{Durability, Journal};

use crate::args::{EffectArg, WorkerArgs};
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::rss;
use crate::scenarios::{open_running, step};
use crate::stats::Samples;

/// How long after spawning the workers start writing, so every one has opened its journal.
pub const START_DELAY_MS: u64 = 1_500;

/// Spawns the workers and adds up what they report.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let path = dir.join("journal.db");
    // Create the schema once, before the workers race to open the file.
    drop(context.journal(&path)?);
    let reports = run_workers(
        context,
        "multiprocess-worker",
        &path,
        context.run_time,
        context.processes,
    )
    .await?;
    let mut outcome = Outcome::default();
    for report in reports {
        outcome.ops += report.steps;
        outcome.elapsed = outcome.elapsed.max(report.elapsed);
        outcome.latencies.merge(&report.latencies);
        outcome.peak_rss_kib_elsewhere = outcome.peak_rss_kib_elsewhere.max(Some(report.peak_kib));
    }
    outcome.notes.push(format!(
        "{} processes, idempotent steps, one journal each on one file; peak RSS is the largest \
         worker's",
        context.processes
    ));
    Ok(outcome)
}

/// Re-executes this binary `count` times with the hidden `subcommand` on the journal at `path`,
/// all starting together after [`START_DELAY_MS`] and writing for `run_time`, and returns what
/// each printed.
pub async fn run_workers(
    context: &Context,
    subcommand: &str,
    path: &Path,
    run_time: Duration,
    count: u32,
) -> Result<Vec<WorkerReport>> {
    let program = std::env::current_exe()
        .map_err(|source| BenchError::io("find the benchmark binary", "current_exe", source))?;
    let start_at_ms = unix_millis() + START_DELAY_MS;
    let mut children = Vec::new();
    for _ in 0..count {
        let child = Command::new(&program)
            .args([
                "--durability",
                context.durability.as_str(),
                subcommand,
                "--db",
            ])
            .arg(path)
            .args(["--millis", &run_time.as_millis().to_string()])
            .args(["--start-at-ms", &start_at_ms.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| BenchError::io("start a worker", &program, source))?;
        children.push(tokio::task::spawn_blocking(move || {
            child.wait_with_output()
        }));
    }
    let mut reports = Vec::with_capacity(children.len());
    for child in children {
        let output = child
            .await?
            .map_err(|source| BenchError::io("wait for a worker", &program, source))?;
        if !output.status.success() {
            return Err(BenchError::Worker(format!("exited with {}", output.status)));
        }
        reports.push(WorkerReport::parse(&String::from_utf8_lossy(
            &output.stdout,
        ))?);
    }
    Ok(reports)
}

/// What one worker printed.
pub struct WorkerReport {
    /// Operations it completed.
    pub steps: u64,
    /// The time it wrote for.
    pub elapsed: Duration,
    /// Its peak RSS, in KiB.
    pub peak_kib: u64,
    /// One latency per operation.
    pub latencies: Samples,
}

impl WorkerReport {
    /// Parses a worker's stdout.
    pub fn parse(stdout: &str) -> Result<Self> {
        let bad = || BenchError::Worker(format!("unexpected output: {stdout:.200}"));
        let mut lines = stdout.lines();
        let mut fields = lines.next().ok_or_else(bad)?.split_whitespace();
        let mut number = |key: &str| -> Result<u64> {
            fields
                .next()
                .and_then(|word| word.strip_prefix(key))
                .and_then(|value| value.parse().ok())
                .ok_or_else(bad)
        };
        let steps = number("steps=")?;
        let elapsed = Duration::from_micros(number("elapsed_us=")?);
        let peak_kib = number("peak_kib=")?;
        let latencies = lines
            .next()
            .and_then(|line| line.strip_prefix("latencies_ns="))
            .and_then(Samples::from_nanos_line)
            .ok_or_else(bad)?;
        Ok(Self {
            steps,
            elapsed,
            peak_kib,
            latencies,
        })
    }
}

/// The worker: writes steps to the shared file from the common start time for `millis`.
pub async fn worker(args: &WorkerArgs, durability: Durability) -> Result<()> {
    let journal = Journal::builder(&args.db).durability(durability).open()?;
    let mut execution = open_running(&journal, durably::new_execution_id()).await?;
    let wait_ms = args.start_at_ms.saturating_sub(unix_millis());
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    rss::reset_peak();
    let mut latencies = Samples::with_capacity(8192);
    let run_time = Duration::from_millis(args.millis);
    let start = Instant::now();
    while start.elapsed() < run_time {
        let began = Instant::now();
        step(&mut execution, EffectArg::Idempotent).await?;
        latencies.record(began.elapsed());
    }
    let elapsed = start.elapsed();
    execution.complete(&latencies.len()).await?;
    println!(
        "steps={} elapsed_us={} peak_kib={}",
        latencies.len(),
        elapsed.as_micros(),
        rss::peak_kib().unwrap_or(0)
    );
    println!("latencies_ns={}", latencies.to_nanos_line());
    Ok(())
}

/// Now, in Unix epoch milliseconds.
pub fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}
