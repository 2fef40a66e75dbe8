//! The writer's engine on PostgreSQL: `n` worker threads, each with its own session, each
//! request one transaction (`BEGIN`, the request, `COMMIT`; the `BEGIN` travels with the
//! request's first statement). There is no batching: concurrent workers' commits share the
//! server's WAL flushes (its group commit).
//!
//! The [`Writer`] in front keeps its API, back-pressure and counters; it routes each request
//! to a worker's queue (see `crate::writer` for the per-execution order this keeps). A worker
//! whose session is lost opens a new one for its next request. A request's outcome:
//! - its own error: the transaction is rolled back and the error answered;
//! - a `COMMIT` that fails: [`Error::CommitUnknown`] when the session was lost with the
//!   `COMMIT` in flight, [`Error::Conflict`] for a deadlock or serialization failure, else
//!   [`Error::CommitFailed`]; nothing committed except, perhaps, in the first case.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use durably_db::Connection;
use durably_lock::SessionLiveness;
use tokio::sync::mpsc;

use super::open::Session;
use crate::error::{Error, Result, classify};
use crate::telemetry;
use crate::writer::{Counters, Job, Queued, Writer, WriterThread};

/// Starts `workers` worker threads on sessions of `session` and returns the writer that feeds
/// them. The threads end once every [`Writer`] is dropped; dropping the [`WriterThread`] after
/// them waits for that.
///
/// # Errors
/// [`Error::Io`] when a thread cannot be started.
pub(crate) fn start(
    path: &Path,
    session: &Session,
    liveness: &SessionLiveness,
    workers: usize,
    ack_timeout: Duration,
) -> Result<(Writer, WriterThread)> {
    let counters = Arc::new(Counters::default());
    let mut queues = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for index in 0..workers.max(1) {
        let (queue, receiver) = mpsc::unbounded_channel();
        let (session, counters) = (session.clone(), Arc::clone(&counters));
        let liveness = liveness.clone();
        let thread = std::thread::Builder::new()
            .name(format!("durably-pg-writer-{index}"))
            .spawn(move || run(&session, &liveness, receiver, &counters))
            .map_err(|source| Error::Io {
                action: "start a writer worker for",
                path: path.to_owned(),
                source,
            })?;
        queues.push(queue);
        threads.push(thread);
    }
    let writer = Writer::over(path, queues, counters, ack_timeout);
    Ok((writer, WriterThread::of(threads)))
}

/// One worker's loop: each request in its own transaction, on a session opened at the first
/// request and again after one is lost. Once the instance's liveness session is lost, every
/// request fails before its `BEGIN` (another process may own its executions by now).
fn run(
    session: &Session,
    liveness: &SessionLiveness,
    mut receiver: mpsc::UnboundedReceiver<Queued>,
    counters: &Counters,
) {
    let mut idle: Option<Connection> = None;
    while let Some(queued) = receiver.blocking_recv() {
        let mut job = counters.take(queued);
        telemetry::queue_depth(counters.queued());
        let span = tracing::info_span!(
            telemetry::SPAN_WRITER_BATCH,
            size = 1,
            outcome = tracing::field::Empty
        );
        let _entered = span.enter();
        if let Err(lost) = liveness.ensure_live() {
            counters.commit_failed();
            job.finish(Some(Error::from(lost)));
            telemetry::batch_failed(1);
            span.record("outcome", "failed");
            continue;
        }
        let began = Instant::now();
        let open = match begin(session, idle.take()) {
            Ok(open) => open,
            Err(error) => {
                counters.commit_failed();
                job.finish(Some(commit_error(&error)));
                telemetry::batch_failed(1);
                span.record("outcome", "failed");
                continue;
            }
        };
        let (outcome, kept) = commit_one(&open, job.as_mut(), counters);
        // A session that failed its ROLLBACK or COMMIT is lost, or in a state nobody knows:
        // the next request opens a new one.
        if kept {
            idle = Some(open);
        }
        match outcome {
            Outcome::Committed => {
                telemetry::batch_committed(1, began.elapsed());
                span.record("outcome", "committed");
                job.finish(None);
            }
            Outcome::FailedAlone => {
                telemetry::batch_failed(1);
                span.record("outcome", "failed");
                job.finish(None);
            }
            Outcome::CommitFailed(error) => {
                telemetry::batch_failed(1);
                span.record("outcome", "failed");
                job.finish(Some(error));
            }
        }
    }
}

/// How one request's transaction ended.
enum Outcome {
    /// It committed; the request's own result is its answer.
    Committed,
    /// The request failed and its transaction was rolled back; its own error is its answer.
    FailedAlone,
    /// `COMMIT` failed, with this error.
    CommitFailed(Error),
}

/// A session with a transaction begun: on `idle`, or on a new session when there is none or
/// it is known to be closed. `BEGIN` is pipelined: it goes out with the request's first
/// statement, so a request costs its own statements' round trips and `COMMIT`'s, no more.
///
/// A session the server ended while idle is noticed here once the driver has read the
/// server's goodbye, which it does as it arrives; one that went silent (a partition) fails at
/// the request's first statement instead, with nothing of the request run, and the next
/// request opens a new session.
///
/// # Errors
/// The new session could not be opened, or refused `BEGIN`.
fn begin(session: &Session, idle: Option<Connection>) -> durably_db::Result<Connection> {
    if let Some(idle) = idle
        && idle.begin_pipelined().is_ok()
    {
        return Ok(idle);
    }
    let fresh = session.connect("writer")?;
    fresh.begin_pipelined()?;
    Ok(fresh)
}

/// Runs `job` in the transaction begun on `conn`. Also says whether `conn` is fit for the next
/// request: its transaction ended cleanly.
fn commit_one(conn: &Connection, job: &mut dyn Job, counters: &Counters) -> (Outcome, bool) {
    let taken = Instant::now();
    if !job.run(conn, taken) {
        counters.failed_alone();
        let kept = conn.execute_batch("ROLLBACK").is_ok();
        return (Outcome::FailedAlone, kept);
    }
    match conn.execute_batch("COMMIT") {
        Ok(()) => {
            counters.committed(1, 0);
            (Outcome::Committed, true)
        }
        Err(error) => {
            counters.commit_failed();
            // The server ended the transaction (a conflict, a deferred constraint) and the
            // session goes on; after a lost session, or a COMMIT whose fate is unknown, it
            // does not.
            let error = commit_error(&error);
            let kept = matches!(error, Error::Conflict { .. } | Error::CommitFailed { .. })
                && conn.execute_batch("ROLLBACK").is_ok();
            (Outcome::CommitFailed(error), kept)
        }
    }
}

/// The error a failed `BEGIN` or `COMMIT` answers: the classified ones as they are, any other
/// as [`Error::CommitFailed`] with the server's account.
fn commit_error(error: &durably_db::Error) -> Error {
    classify(error).unwrap_or_else(|| Error::CommitFailed {
        reason: error.to_string(),
    })
}
