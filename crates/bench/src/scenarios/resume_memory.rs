//! `resume-memory`: the memory a process needs to resume a very long execution. An execution
//! with 1,000,000 committed steps (`--resume-steps`) is written by SQL, as the `replay` fixture
//! is, then a fresh process (the harness re-executed with the hidden `resume-worker`
//! subcommand) opens the journal, reopens the execution and replays every step. That process's
//! peak RSS over its whole life is the figure: the journal holds one bounded window of recorded
//! steps at a time, so it must not grow with the execution ([`RESUME_RSS_BOUND_MIB`]). The rate
//! is replayed steps per second in that process, reopen excluded.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use durably::Durability;

use crate::args::{EffectArg, ResumeWorkerArgs};
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::rss;
use crate::scenarios::multiprocess::WorkerReport;
use crate::scenarios::replay::write_committed_steps;
use crate::scenarios::{open_running, step};
use crate::stats::Samples;

/// The most a process resuming an execution of any length may need, in MiB.
pub const RESUME_RSS_BOUND_MIB: u64 = 64;

/// Steps the fixture writes per transaction, so the WAL is checkpointed as it goes.
const FIXTURE_STEPS_PER_TRANSACTION: u32 = 100_000;

/// The resuming process times one step in this many. Keeping every latency would cost it 8 bytes
/// a step, which is the kind of growth this scenario measures. The stride is odd, so the steps
/// that read a new replay window (every 1,024th) are sampled in their own proportion.
const LATENCY_STRIDE: u32 = 97;

/// Writes the fixture, then has a fresh process resume it and reports what that process says.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let path = dir.join("journal.db");
    let (id, steps) = (context.new_id(), context.resume_steps);
    let began = Instant::now();
    {
        let journal = context.journal(&path)?;
        let execution = open_running(&journal, id).await?;
        for first in (0..steps).step_by(FIXTURE_STEPS_PER_TRANSACTION as usize) {
            let last = first
                .saturating_add(FIXTURE_STEPS_PER_TRANSACTION)
                .min(steps);
            write_committed_steps(&journal, id, first..last).await?;
        }
        // Dropped without finalizing: the execution stays running, its lock released.
        drop(execution);
    }
    let fixture_time = began.elapsed();
    // This process only waits from here on; its own peak is not the figure.
    rss::reset_peak();
    let report = resume_in_a_fresh_process(context, &path, id, steps).await?;
    let peak_mib = report.peak_kib as f64 / 1024.0;
    let verdict = if report.peak_kib <= RESUME_RSS_BOUND_MIB * 1024 {
        "within"
    } else {
        "OVER"
    };
    Ok(Outcome {
        ops: report.steps,
        elapsed: report.elapsed,
        latencies: report.latencies,
        notes: vec![
            format!(
                "an execution of {steps} committed steps (written in {:.1} s) resumed by a fresh \
                 process; ops/s is its replayed steps per second, the reopen excluded; latencies \
                 are one step in {LATENCY_STRIDE}",
                fixture_time.as_secs_f64()
            ),
            format!(
                "the resuming process's peak RSS over its whole life: {peak_mib:.1} MiB, {verdict} \
                 the {RESUME_RSS_BOUND_MIB} MiB bound; the row's peak is the larger of it and \
                 this process's own while it waited"
            ),
        ],
        peak_rss_kib_elsewhere: Some(report.peak_kib),
    })
}

/// Re-executes this binary with `resume-worker` on the fixture and parses its report.
async fn resume_in_a_fresh_process(
    context: &Context,
    path: &Path,
    id: uuid::Uuid,
    steps: u32,
) -> Result<WorkerReport> {
    let program = std::env::current_exe()
        .map_err(|source| BenchError::io("find the benchmark binary", "current_exe", source))?;
    let child = Command::new(&program)
        .args([
            "--durability",
            context.durability.as_str(),
            "resume-worker",
            "--db",
        ])
        .arg(path)
        .args([
            "--execution-id",
            &id.to_string(),
            "--steps",
            &steps.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| BenchError::io("start the resuming process", &program, source))?;
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await?
        .map_err(|source| BenchError::io("wait for the resuming process", &program, source))?;
    if !output.status.success() {
        return Err(BenchError::Worker(format!(
            "the resuming process exited with {}",
            output.status
        )));
    }
    let report = WorkerReport::parse(&String::from_utf8_lossy(&output.stdout))?;
    if report.steps != u64::from(steps) {
        return Err(BenchError::Unexpected(format!(
            "the resuming process replayed {} of {steps} steps",
            report.steps
        )));
    }
    Ok(report)
}

/// The resuming process: reopens the execution, replays every step, and prints its step
/// count, replay time and peak RSS (as a `multiprocess` worker does), then the sampled
/// latencies.
pub async fn worker(args: &ResumeWorkerArgs, durability: Durability) -> Result<()> {
    let journal = durably::Journal::builder(&args.db)
        .durability(durability)
        .open()?;
    let mut execution = open_running(&journal, args.execution_id).await?;
    let mut latencies = Samples::with_capacity((args.steps / LATENCY_STRIDE + 1) as usize);
    let start = Instant::now();
    for seq in 0..args.steps {
        let began = Instant::now();
        step(&mut execution, EffectArg::Idempotent).await?;
        if seq % LATENCY_STRIDE == 0 {
            latencies.record(began.elapsed());
        }
    }
    let elapsed = start.elapsed();
    if !execution.is_resume() || execution.next_seq() != args.steps {
        return Err(BenchError::Unexpected(
            "the resumed execution did not replay every recorded step".to_owned(),
        ));
    }
    drop(execution);
    println!(
        "steps={} elapsed_us={} peak_kib={}",
        args.steps,
        elapsed.as_micros(),
        rss::peak_kib().unwrap_or(0)
    );
    println!("latencies_ns={}", latencies.to_nanos_line());
    Ok(())
}
