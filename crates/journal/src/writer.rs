//! The group-commit writer: one thread owns the only write connection and applies everything
//! queued in one `BEGIN IMMEDIATE ... COMMIT`, each request inside its own SAVEPOINT.
//!
//! Invariant: a request is acknowledged only after the COMMIT that contains it has returned,
//! that is after the fsync (with `synchronous=FULL`). There is no flush interval: a lone request
//! pays for one commit, and requests that queue while a commit is in flight share the next one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result, classify, replicate};

/// How many requests one commit takes at most. Bounds the time the write lock is held.
pub(crate) const BATCH_REQUESTS_MAX: usize = 512;

/// How many requests may wait for the writer before callers are made to wait (back-pressure).
pub(crate) const QUEUE_REQUESTS_MAX: usize = 4096;

/// Counters of the writer's work, for tests and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Requests acknowledged as committed.
    pub requests: u64,
    /// Requests that failed inside their savepoint (their batch neighbours were unaffected).
    pub requests_failed: u64,
    /// Commits that failed (every request of the batch got the error).
    pub commits_failed: u64,
    /// Requests waiting in the queue right now, not yet taken by the writer.
    pub queued: u64,
}

#[derive(Debug, Default)]
struct Counters {
    commits: AtomicU64,
    requests: AtomicU64,
    requests_failed: AtomicU64,
    commits_failed: AtomicU64,
}

/// One request: runs inside its savepoint, then learns whether its batch committed.
trait Job: Send {
    /// Runs the request's writes. `false` when it failed (its savepoint is rolled back).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Delivers the outcome: the request's own result if the batch committed, else `failure`.
    fn finish(self: Box<Self>, failure: Option<Error>);
}

struct TypedJob<T, F> {
    work: Option<F>,
    outcome: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T> + Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        // A panic inside one request must not take the writer thread (and with it every lock
        // this instance holds) down: it fails that request alone, rolled back to its savepoint.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(conn)))
            .unwrap_or_else(|_| {
                Err(Error::CommitFailed {
                    reason: "the request panicked inside the writer; it was rolled back".to_owned(),
                })
            });
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn finish(self: Box<Self>, failure: Option<Error>) {
        let outcome = match (failure, self.outcome) {
            (None, Some(outcome)) => outcome,
            // A request's own error explains more than its batch's commit failure.
            (Some(_), Some(Err(own))) => Err(own),
            (Some(error), _) => Err(error),
            (None, None) => Err(Error::WriterStopped),
        };
        // The caller may have stopped waiting (timeout or drop); that is its choice.
        let _ = self.reply.send(outcome);
    }
}

/// The handle callers use to submit writes.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    queue: mpsc::Sender<Box<dyn Job>>,
    counters: Arc<Counters>,
    ack_timeout: Duration,
}

/// The writer thread. Dropping it waits until the thread has ended, that is until every queued
/// request was answered and the write connection was closed.
///
/// Invariant: when the last handle of a journal is dropped, the file is closed before the drop
/// returns. The write connection is the last to close, so SQLite checkpoints the WAL into the
/// database file and removes it; a program (or a test, or `cp`) that touches the file after
/// dropping its journal sees it whole. Without the join it would race the closing thread.
#[derive(Debug)]
pub(crate) struct WriterThread(Option<std::thread::JoinHandle<()>>);

impl Drop for WriterThread {
    fn drop(&mut self) {
        let Some(thread) = self.0.take() else {
            return;
        };
        // A request's closure may own the last handle of the journal, and is dropped on the
        // writer thread itself: that thread cannot wait for its own end.
        if thread.thread().id() != std::thread::current().id() {
            let _ = thread.join();
        }
    }
}

impl Writer {
    /// Starts the writer thread on `conn`. The thread ends once every [`Writer`] is dropped;
    /// dropping the returned [`WriterThread`] after them waits for that.
    pub(crate) fn start(
        conn: Connection,
        busy_timeout_ms: u64,
        ack_timeout: Duration,
    ) -> Result<(Self, WriterThread)> {
        let (queue, receiver) = mpsc::channel(QUEUE_REQUESTS_MAX);
        let counters = Arc::new(Counters::default());
        let thread_counters = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("durably-writer".to_owned())
            .spawn(move || run(&conn, receiver, &thread_counters, busy_timeout_ms))
            .map_err(|source| Error::Io {
                action: "start the writer thread for",
                path: std::path::PathBuf::from("the journal"),
                source,
            })?;
        let writer = Self {
            queue,
            counters,
            ack_timeout,
        };
        Ok((writer, WriterThread(Some(thread))))
    }

    /// Submits `work` and waits until the commit that contains it has returned.
    ///
    /// # Errors
    /// The request's own error, the batch's commit error, [`Error::AckTimeout`], or
    /// [`Error::WriterStopped`].
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, acknowledged) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(TypedJob {
            work: Some(work),
            outcome: None,
            reply,
        });
        let waiting = async {
            self.queue
                .send(job)
                .await
                .map_err(|_| Error::WriterStopped)?;
            acknowledged.await.map_err(|_| Error::WriterStopped)?
        };
        match tokio::time::timeout(self.ack_timeout, waiting).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::AckTimeout {
                timeout_ms: self.ack_timeout.as_millis() as u64,
            }),
        }
    }

    /// Submits `work` without waiting for it (used by `Drop`, which cannot await). The request
    /// still goes through the queue in order.
    pub(crate) fn write_detached<F>(&self, work: F)
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let (reply, _ignored) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(TypedJob {
            work: Some(work),
            outcome: None,
            reply,
        });
        if let Err(mpsc::error::TrySendError::Full(job)) = self.queue.try_send(job) {
            // The queue is full: hand the job to a thread that may block until there is room.
            let queue = self.queue.clone();
            let _ = std::thread::Builder::new()
                .name("durably-release".to_owned())
                .spawn(move || queue.blocking_send(job));
        }
    }

    /// The writer's counters so far.
    pub(crate) fn stats(&self) -> WriterStats {
        WriterStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            requests: self.counters.requests.load(Ordering::Relaxed),
            requests_failed: self.counters.requests_failed.load(Ordering::Relaxed),
            commits_failed: self.counters.commits_failed.load(Ordering::Relaxed),
            queued: (self.queue.max_capacity() - self.queue.capacity()) as u64,
        }
    }
}

fn run(
    conn: &Connection,
    mut receiver: mpsc::Receiver<Box<dyn Job>>,
    counters: &Counters,
    busy_timeout_ms: u64,
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(BATCH_REQUESTS_MAX);
    while let Some(first) = receiver.blocking_recv() {
        batch.push(first);
        while batch.len() < BATCH_REQUESTS_MAX {
            match receiver.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit_batch(conn, &mut batch, counters, busy_timeout_ms);
    }
}

fn commit_batch(
    conn: &Connection,
    batch: &mut Vec<Box<dyn Job>>,
    counters: &Counters,
    busy_timeout_ms: u64,
) {
    if let Err(error) = cached(conn, "BEGIN IMMEDIATE") {
        fail_all(batch, &with_timeout(&error, busy_timeout_ms), counters);
        return;
    }
    let mut failed = 0_u64;
    for job in batch.iter_mut() {
        if !run_in_savepoint(conn, job.as_mut()) {
            failed += 1;
        }
        // Some errors (a full disk, an I/O error) make SQLite roll back the whole transaction
        // on its own. Running the rest of the batch would then write in autocommit mode,
        // outside any batch: stop, and report the batch failed to every request in it.
        if conn.is_autocommit() {
            let error = Error::CommitFailed {
                reason: "SQLite rolled the batch back after an error in one of its requests"
                    .to_owned(),
            };
            fail_all(batch, &error, counters);
            return;
        }
    }
    if let Err(error) = cached(conn, "COMMIT") {
        // A failed COMMIT may leave the transaction open; roll it back so the next batch starts
        // clean. Its own failure is moot: the batch is reported failed either way.
        let _ = conn.execute_batch("ROLLBACK");
        fail_all(batch, &with_timeout(&error, busy_timeout_ms), counters);
        return;
    }
    counters.commits.fetch_add(1, Ordering::Relaxed);
    counters
        .requests
        .fetch_add(batch.len() as u64 - failed, Ordering::Relaxed);
    counters
        .requests_failed
        .fetch_add(failed, Ordering::Relaxed);
    for job in batch.drain(..) {
        job.finish(None);
    }
}

fn run_in_savepoint(conn: &Connection, job: &mut dyn Job) -> bool {
    if cached(conn, "SAVEPOINT request").is_err() {
        return false;
    }
    let ok = job.run(conn);
    // If ending the savepoint fails the whole transaction is in doubt; the COMMIT that follows
    // then fails too and every request of the batch is told.
    let _ = if ok {
        cached(conn, "RELEASE request")
    } else {
        cached(conn, "ROLLBACK TO request").and_then(|_| cached(conn, "RELEASE request"))
    };
    ok
}

/// Runs one statement through the connection's statement cache. The savepoint statements run
/// twice per request and BEGIN and COMMIT once per batch; parsing them each time was a
/// measurable share of the writer's time.
fn cached(conn: &Connection, sql: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute([])
}

fn with_timeout(error: &rusqlite::Error, busy_timeout_ms: u64) -> Error {
    match classify(error) {
        Some(Error::Busy { .. }) => Error::Busy { busy_timeout_ms },
        Some(classified) => classified,
        None => Error::CommitFailed {
            reason: error.to_string(),
        },
    }
}

fn fail_all(batch: &mut Vec<Box<dyn Job>>, error: &Error, counters: &Counters) {
    counters.commits_failed.fetch_add(1, Ordering::Relaxed);
    for job in batch.drain(..) {
        job.finish(Some(replicate(error)));
    }
}
