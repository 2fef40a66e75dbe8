//! `send-wake`: how soon a message sent from one process runs the parked receiver in
//! another. A runtime process (this binary with the hidden `send-wake-worker` subcommand)
//! starts 1,000 workflows (100 with `--quick`) that each wait on `recv` with an hour's
//! timeout, so each parks (a row, no task). Once all are parked, the harness sends each one
//! message, one at a time, from this process, through a [`Client`]: the send's transaction
//! wakes the receiver (`waiting` → `queued`); the runtime process notices the commit at its
//! watcher's next poll of `data_version`, claims the receiver, replays it, and its `recv`
//! consumes the message and returns. One op is a wake; its latency runs from the start of
//! the `send` call to the start of the receiver's next step (the instant its `recv` returns),
//! both read on `CLOCK_MONOTONIC`, which the two processes share: the runtime process writes
//! its reading to the harness through a pipe. The target is p99 ≤ 50 ms.
//!
//! Before each send the harness pauses for a point of the watcher's poll interval (10 ms),
//! spread evenly over the run, so that sends meet the watcher at every phase of its poll, as
//! sends from elsewhere would, rather than at the one phase that follows the last wake. ops/s
//! is wakes per second with one send in flight at a time and these pauses: not a throughput.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use durably::runtime::{Client, Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably::{Durability, Journal};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::args::SendWakeWorkerArgs;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::scenarios::runtime_load::{CONCURRENCY, PRODUCERS};
use crate::scenarios::{STEP_NAME, child, count, execution_ids};
use crate::stats::Samples;

/// The workflow kind of this scenario.
const KIND: &str = "receiver";

/// The topic the receivers wait on.
const TOPIC: &str = "wake";

/// How long a receiver waits for its message: far longer than the run, so it parks.
const RECV_TIMEOUT: Duration = Duration::from_hours(1);

/// The target for the p99 latency.
const TARGET_P99: Duration = Duration::from_millis(50);

/// What the runtime process prints once every receiver is parked.
const PARKED: &str = "parked";

/// What the runtime process prints, with the receiver's id and its `CLOCK_MONOTONIC`
/// reading in nanoseconds, when a receiver's `recv` returns a message.
const WOKE: &str = "woke";

/// The longest the harness waits for one receiver to report, before it gives up.
const WAKE_WAIT_MAX: Duration = Duration::from_secs(30);

/// How often the runtime process counts its parked receivers while they park.
const POLL: Duration = Duration::from_millis(10);

/// How often a runtime's watcher polls `data_version` (the runtime's default): the span over
/// which the sends' instants are spread.
const WATCHER_POLL: Duration = Duration::from_millis(10);

/// Runs the runtime process, sends each of its receivers a message, and times each wake.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let receivers: u32 = if context.quick { 100 } else { 1_000 };
    let path = dir.join("journal.db");
    let arguments = ["--receivers".to_owned(), receivers.to_string()];
    let mut worker = child::spawn(context, "send-wake-worker", &path, &arguments)?;
    let mut lines = read_lines(&mut worker)?;
    expect_line(&mut lines, |line| line == PARKED).await?;
    let client = Client::new(context.journal(&path)?).await?;
    let ids = parked_receivers(client.journal())?;
    if ids.len() != receivers as usize {
        return Err(BenchError::Unexpected(format!(
            "{} receivers parked, not {receivers}",
            ids.len()
        )));
    }
    let (mut latencies, mut sends) = (Samples::default(), Samples::default());
    let began = Instant::now();
    for (index, id) in ids.iter().enumerate() {
        // A send that followed the last wake at once would meet the runtime process's watcher
        // at the same point of its poll every time; a pause spread over one poll interval
        // makes the sends arrive at every phase of it, as sends from elsewhere would.
        tokio::time::sleep(poll_phase(index)).await;
        let sent_ns = monotonic_ns();
        let send_began = Instant::now();
        client.send(*id, TOPIC, &1_u32, None).await?;
        sends.record(send_began.elapsed());
        let woke_ns = woke(&mut lines, *id).await?;
        latencies.record(Duration::from_nanos(woke_ns.saturating_sub(sent_ns)));
    }
    let elapsed = began.elapsed();
    child::finish(worker).await?;
    let mut notes = vec![format!(
        "{receivers} receivers parked on recv in a runtime process (concurrency \
         {CONCURRENCY}), one message sent to each from this process, one at a time; wake \
         latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, which {} the {} ms p99 target; {} \
         of {receivers} over it",
        latencies.quantile_us(0.5) / 1e3,
        latencies.quantile_us(0.99) / 1e3,
        latencies.max_us() / 1e3,
        if latencies.quantile_us(0.99) <= TARGET_P99.as_micros() as f64 {
            "meets"
        } else {
            "MISSES"
        },
        TARGET_P99.as_millis(),
        latencies.count_over(TARGET_P99)
    )];
    notes.push(format!(
        "the send call alone (its transaction, which wakes the receiver, and its commit): p50 \
         {:.1} ms, p99 {:.1} ms",
        sends.quantile_us(0.5) / 1e3,
        sends.quantile_us(0.99) / 1e3
    ));
    Ok(Outcome {
        ops: u64::from(receivers),
        elapsed,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

/// The pause before the `index`th send: one of 1,000 points of [`WATCHER_POLL`], in a
/// scrambled order that is the same in every run.
fn poll_phase(index: usize) -> Duration {
    WATCHER_POLL * ((index * 7_919) % 1_000) as u32 / 1_000
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: one clock for every process on the machine.
fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// The parked receivers, in start order.
fn parked_receivers(journal: &Journal) -> Result<Vec<Uuid>> {
    execution_ids(
        journal,
        "SELECT execution_id FROM executions WHERE status = 'waiting' ORDER BY id",
    )
}

/// The worker's stdout, a line at a time, read on a thread of its own.
fn read_lines(worker: &mut Child) -> Result<mpsc::Receiver<String>> {
    let stdout = worker
        .stdout
        .take()
        .ok_or_else(|| BenchError::Worker("no stdout".to_owned()))?;
    let (lines, receiver) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.blocking_send(line).is_err() {
                break;
            }
        }
    });
    Ok(receiver)
}

/// The next line that `wanted` accepts, skipping others; an error if the worker ends or
/// stays silent for [`WAKE_WAIT_MAX`].
async fn expect_line(
    lines: &mut mpsc::Receiver<String>,
    wanted: impl Fn(&str) -> bool,
) -> Result<String> {
    loop {
        let line = tokio::time::timeout(WAKE_WAIT_MAX, lines.recv())
            .await
            .map_err(|_| BenchError::Worker("the runtime process stayed silent".to_owned()))?
            .ok_or_else(|| BenchError::Worker("the runtime process ended early".to_owned()))?;
        if wanted(line.trim()) {
            return Ok(line);
        }
    }
}

/// Waits for receiver `id` to report its wake; returns its `CLOCK_MONOTONIC` reading.
async fn woke(lines: &mut mpsc::Receiver<String>, id: Uuid) -> Result<u64> {
    let line = expect_line(lines, |line| line.starts_with(WOKE)).await?;
    let mut words = line.split_whitespace().skip(1);
    let (reported, ns) = (words.next(), words.next().and_then(|ns| ns.parse().ok()));
    match (reported, ns) {
        (Some(reported), Some(ns)) if reported == id.to_string() => Ok(ns),
        _ => Err(BenchError::Worker(format!(
            "expected the wake of {id}, read {line:?}"
        ))),
    }
}

/// The runtime process: starts the receivers, prints [`PARKED`] once all are parked, and
/// runs until every one has received its message and ended.
pub async fn worker(args: &SendWakeWorkerArgs, durability: Durability) -> Result<()> {
    let journal = Journal::builder(&args.db).durability(durability).open()?;
    let runtime = Runtime::builder(journal.clone())
        .concurrency_max(CONCURRENCY)
        .register(KIND, 1, receiver)
        .start()
        .await?;
    let next = Arc::new(AtomicU32::new(0));
    let mut producers = Vec::with_capacity(PRODUCERS);
    for _ in 0..PRODUCERS {
        let (runtime, next, receivers) = (runtime.clone(), Arc::clone(&next), args.receivers);
        producers.push(tokio::spawn(async move {
            let mut handles = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < receivers {
                let (id, options) = (durably::new_execution_id(), StartOptions::default());
                handles.push(runtime.start::<_, u32>(KIND, id, &(), options).await?);
            }
            for handle in handles {
                handle.result().await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    while count(
        &journal,
        "SELECT count(*) FROM executions WHERE status = 'waiting'",
    )? < u64::from(args.receivers)
    {
        tokio::time::sleep(POLL).await;
    }
    say(PARKED)?;
    for producer in producers {
        producer.await??;
    }
    runtime.shutdown();
    Ok(())
}

/// A receiver: waits for one message, reports when its `recv` returned, then runs one
/// idempotent step.
async fn receiver(context: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let message: Option<u32> = context.recv(TOPIC, RECV_TIMEOUT).await?;
    let woke_ns = monotonic_ns();
    if message.is_some() {
        say(&format!("{WOKE} {} {woke_ns}", context.id()))
            .map_err(|error| WorkflowError::new(error.to_string()))?;
    }
    context
        .idempotent(STEP_NAME, |_key| async { Ok(1_u32) })
        .await?;
    Ok(message.unwrap_or(0))
}

/// Writes `line` to stdout, the pipe to the harness, at once.
fn say(line: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|source| BenchError::io("write to the harness", "stdout", source))
}
