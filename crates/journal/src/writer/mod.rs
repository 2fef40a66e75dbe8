//! The group-commit writer: one thread owns the only write connection and applies everything
//! queued in one `BEGIN IMMEDIATE ... COMMIT`, each request inside its own SAVEPOINT (or none,
//! see [`Undo`]).
//!
//! Invariant: a request is acknowledged only after the COMMIT that contains it has returned and,
//! with [`Durability::Full`](crate::Durability::Full), after an fsync of the WAL that began after
//! that COMMIT (see [`wal_sync`]). There is no flush interval: a lone request pays for one commit,
//! and requests that queue while a commit is in flight share the next one.
//!
//! One queue, first in first out, carries every request. Callers who wait for an answer take
//! room in it ([`QUEUE_REQUESTS_MAX`]) and wait for room when it is full; the release of a
//! dropped handle takes none and never waits (see [`Writer::write_detached`]).
//!
//! On PostgreSQL the same [`Writer`] feeds another engine (`crate::pg::workers`): a queue per
//! worker thread, each with its own connection and one transaction per request. Invariant:
//! every request about one execution ([`Writer::write_for`]) goes to the queue of worker
//! `hash(id) % n`, so one execution's requests commit in the order they were submitted (an
//! intent before its result, a release before a reopen); other requests take the queues in
//! turn. On SQLite there is one queue, so the order holds for every request.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use durably_db::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use uuid::Uuid;

use crate::error::{Error, Result, classify, replicate};
use crate::telemetry;

mod wal_sync;

use wal_sync::Syncer;
pub(crate) use wal_sync::WalSync;

/// How many requests one commit takes at most. Bounds the time the write lock is held.
pub(crate) const BATCH_REQUESTS_MAX: usize = 512;

/// How many requests whose callers wait for an answer may queue for the writer before further
/// callers are made to wait for room (back-pressure). Releases of dropped handles do not count.
pub(crate) const QUEUE_REQUESTS_MAX: usize = 4096;

// A batch takes requests from the queue, so it can never be larger than what the queue holds;
// a batch bound above the queue's would be a bound that never applies.
const _: () = assert!(BATCH_REQUESTS_MAX <= QUEUE_REQUESTS_MAX);

/// Counters of the writer's work, for tests and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Transactions committed. On PostgreSQL each request is a transaction of its own, so
    /// this counts the requests committed there.
    pub commits: u64,
    /// Requests committed (each is acknowledged once its commit is durable).
    pub requests: u64,
    /// Requests that failed inside their savepoint (their batch neighbours were unaffected).
    pub requests_failed: u64,
    /// Commits that failed (every request of the batch got the error).
    pub commits_failed: u64,
    /// Requests waiting in the queue right now, not yet taken by the writer, releases of dropped
    /// handles included.
    pub queued: u64,
    /// The writer's own fsyncs of the WAL ([`Durability::Full`](crate::Durability::Full)). Each
    /// makes every commit before it durable, so there are at most as many as commits. Always 0
    /// on PostgreSQL, whose server flushes its WAL before a commit returns.
    pub syncs: u64,
    /// Requests whose caller got an answer (success or error), the count the two wait totals
    /// below are over. Requests submitted without waiting, such as the release of a dropped
    /// handle, are not counted.
    pub answered: u64,
    /// Of those requests' lives, the time spent queued: from submission until the writer took
    /// the request into a batch, in nanoseconds.
    pub queued_ns: u64,
    /// Their whole lives: from submission until the caller's task had the answer, in
    /// nanoseconds. With a steady number of requests in flight, that number divided by the
    /// mean life is the writer's throughput (Little's law).
    pub waited_ns: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    queued: AtomicU64,
    commits: AtomicU64,
    requests: AtomicU64,
    requests_failed: AtomicU64,
    commits_failed: AtomicU64,
    syncs: AtomicU64,
    answered: AtomicU64,
    queued_ns: AtomicU64,
    waited_ns: AtomicU64,
}

impl Counters {
    /// The writer takes `queued` out of the queue: it no longer counts as queued, and its room
    /// is given back.
    pub(crate) fn take(&self, queued: Queued) -> Box<dyn Job> {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        queued.job
    }

    /// Counts a commit of `requests` requests, of which `failed` failed alone (their writes
    /// taken back, their errors answered).
    pub(crate) fn committed(&self, requests: u64, failed: u64) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.requests
            .fetch_add(requests - failed, Ordering::Relaxed);
        self.requests_failed.fetch_add(failed, Ordering::Relaxed);
    }

    /// Counts a request that failed alone in a transaction of its own, which was rolled back.
    #[cfg(feature = "postgres")]
    pub(crate) fn failed_alone(&self) {
        self.requests_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a commit that failed (every request in it was told).
    pub(crate) fn commit_failed(&self) {
        self.commits_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests waiting in the queues right now.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Counts one answered request, submitted at `sent` and taken by the writer at `taken`
    /// (`None` when it was answered without being run).
    fn record_answer(&self, sent: Instant, taken: Option<Instant>) {
        let answered = Instant::now();
        let nanos = |from: Instant, to: Instant| {
            u64::try_from(to.saturating_duration_since(from).as_nanos()).unwrap_or(u64::MAX)
        };
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.queued_ns
            .fetch_add(nanos(sent, taken.unwrap_or(answered)), Ordering::Relaxed);
        self.waited_ns
            .fetch_add(nanos(sent, answered), Ordering::Relaxed);
    }
}

/// How a failed request's writes are taken back while its batch neighbours still commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undo {
    /// The request runs inside its own SAVEPOINT, rolled back if it fails. Right for any
    /// request.
    Savepoint,
    /// The request changes rows with at most one statement, and can fail only before that
    /// statement or inside it, where SQLite takes the statement back on its own. It needs no
    /// savepoint: that saves two statements and the sub-journal's page copies per request
    /// (docs/lab/performance-history.md, round 4, gives the measured gain). The writer checks
    /// the promise: such a request that fails after changing rows rolls its whole batch back.
    OneStatement,
}

/// One request: runs (inside its savepoint, if it needs one), then learns whether its batch
/// committed.
pub(crate) trait Job: Send {
    /// How the request's writes are taken back if it fails.
    fn undo(&self) -> Undo;
    /// Runs the request's writes, in the batch the writer took at `taken`. `false` when it
    /// failed (its savepoint is rolled back).
    fn run(&mut self, conn: &Connection, taken: Instant) -> bool;
    /// Delivers the outcome: the request's own result if the batch committed, else `failure`.
    fn finish(self: Box<Self>, failure: Option<Error>);
}

struct TypedJob<T, F> {
    undo: Undo,
    work: Option<F>,
    outcome: Option<Result<T>>,
    taken: Option<Instant>,
    reply: oneshot::Sender<Answer<T>>,
}

impl<T, F> TypedJob<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T> + Send + 'static,
{
    /// A request not yet run, whose answer goes to `reply`.
    fn boxed(undo: Undo, work: F, reply: oneshot::Sender<Answer<T>>) -> Box<dyn Job> {
        Box::new(Self {
            undo,
            work: Some(work),
            outcome: None,
            taken: None,
            reply,
        })
    }
}

/// What the writer sends back to a caller.
struct Answer<T> {
    outcome: Result<T>,
    /// When the writer took the request into a batch; `None` when it never ran.
    taken: Option<Instant>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T> + Send,
{
    fn undo(&self) -> Undo {
        self.undo
    }

    fn run(&mut self, conn: &Connection, taken: Instant) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        self.taken = Some(taken);
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
        let _ = self.reply.send(Answer {
            outcome,
            taken: self.taken,
        });
    }
}

/// A request in the writer's queue.
pub(crate) struct Queued {
    job: Box<dyn Job>,
    /// The room the request takes in the queue while it waits there, given back when the
    /// writer takes it. `None` for a release, which never waits for room.
    _room: Option<OwnedSemaphorePermit>,
}

/// The handle callers use to submit writes.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    /// The database file, named in errors that SQLite raises without it.
    path: Arc<Path>,
    /// One queue per engine thread: one on SQLite, one per worker on PostgreSQL. Unbounded in
    /// themselves: the bound on waiting callers' requests is `room`, and the releases, which
    /// take no room, are bounded by the handles (see [`Writer::write_detached`]).
    queues: Arc<[mpsc::UnboundedSender<Queued>]>,
    /// The queue the next request about no execution goes to, modulo the number of queues.
    turn: Arc<AtomicUsize>,
    /// [`QUEUE_REQUESTS_MAX`] permits; a caller holds one while its request is queued.
    room: Arc<Semaphore>,
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
pub(crate) struct WriterThread {
    /// The engine's threads: the SQLite writer, or the PostgreSQL workers.
    threads: Vec<std::thread::JoinHandle<()>>,
    syncer: Option<std::thread::ThreadId>,
}

impl WriterThread {
    /// The threads of an engine without a syncer.
    #[cfg(feature = "postgres")]
    pub(crate) fn of(threads: Vec<std::thread::JoinHandle<()>>) -> Self {
        Self {
            threads,
            syncer: None,
        }
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        // A request's closure may own the last handle of the journal, and is dropped on an
        // engine thread itself: that thread cannot wait for its own end. A request's outcome
        // may own it too, and is dropped on the syncer thread when its caller stopped waiting:
        // the writer thread waits for the syncer's end, so the syncer cannot wait for it.
        let current = std::thread::current().id();
        if self.syncer == Some(current) {
            return;
        }
        for thread in self.threads.drain(..) {
            if thread.thread().id() != current {
                let _ = thread.join();
            }
        }
    }
}

impl Writer {
    /// Starts the writer thread on `conn`, a SQLite connection. With `wal`, a committed batch is acknowledged only
    /// after `wal` has synced it (the connection then commits without an fsync of its own);
    /// without, as soon as its COMMIT returns. The thread ends once every [`Writer`] is
    /// dropped; dropping the returned [`WriterThread`] after them waits for that.
    pub(crate) fn start(
        path: &Path,
        conn: Connection,
        busy_timeout_ms: u64,
        ack_timeout: Duration,
        wal: Option<Box<dyn WalSync>>,
    ) -> Result<(Self, WriterThread)> {
        let (queue, receiver) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let thread_error = |source| Error::Io {
            action: "start the writer thread for",
            path: path.to_owned(),
            source,
        };
        let syncer = wal
            .map(|wal| Syncer::start(wal, Arc::clone(&counters)))
            .transpose()
            .map_err(thread_error)?;
        let syncer_thread = syncer.as_ref().and_then(Syncer::thread_id);
        let thread_counters = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("durably-writer".to_owned())
            .spawn(move || run(&conn, receiver, &thread_counters, busy_timeout_ms, syncer))
            .map_err(thread_error)?;
        let writer = Self::over(path, vec![queue], counters, ack_timeout);
        let thread = WriterThread {
            threads: vec![thread],
            syncer: syncer_thread,
        };
        Ok((writer, thread))
    }

    /// The handle over an engine's `queues`, whose threads count their work in `counters`.
    pub(crate) fn over(
        path: &Path,
        queues: Vec<mpsc::UnboundedSender<Queued>>,
        counters: Arc<Counters>,
        ack_timeout: Duration,
    ) -> Self {
        Self {
            path: Arc::from(path),
            queues: queues.into(),
            turn: Arc::default(),
            room: Arc::new(Semaphore::new(QUEUE_REQUESTS_MAX)),
            counters,
            ack_timeout,
        }
    }

    /// Submits `work` and waits until the commit that contains it has returned. It runs inside
    /// its own savepoint.
    ///
    /// # Errors
    /// The request's own error, the batch's commit error, [`Error::AckTimeout`], or
    /// [`Error::WriterStopped`].
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.write_with(Undo::Savepoint, work).await
    }

    /// [`Writer::write`], with the way a failure of `work` is taken back chosen by the caller.
    ///
    /// # Errors
    /// As [`Writer::write`].
    pub(crate) async fn write_with<T, F>(&self, undo: Undo, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.submit(None, undo, work).await
    }

    /// [`Writer::write_with`] for a request about execution `id`: it commits after every
    /// request about `id` submitted before it (see the module's invariant).
    ///
    /// # Errors
    /// As [`Writer::write`].
    pub(crate) async fn write_for<T, F>(&self, id: Uuid, undo: Undo, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.submit(Some(id), undo, work).await
    }

    async fn submit<T, F>(&self, id: Option<Uuid>, undo: Undo, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let sent = Instant::now();
        let (reply, acknowledged) = oneshot::channel();
        let job = TypedJob::boxed(undo, work, reply);
        let waiting = async {
            // The semaphore is never closed, so waiting for room cannot fail.
            let room = Arc::clone(&self.room)
                .acquire_owned()
                .await
                .map_err(|_| Error::WriterStopped)?;
            self.enqueue(id, job, Some(room))?;
            let answer: Answer<T> = acknowledged.await.map_err(|_| Error::WriterStopped)?;
            self.counters.record_answer(sent, answer.taken);
            answer.outcome
        };
        match tokio::time::timeout(self.ack_timeout, waiting).await {
            Ok(outcome) => outcome.map_err(|error| error.at_path(&self.path)),
            Err(_) => Err(Error::AckTimeout {
                timeout_ms: self.ack_timeout.as_millis() as u64,
            }),
        }
    }

    /// Submits `work` without waiting for it (used by `Drop`, which cannot await). The request
    /// goes through the queue in order, behind every request submitted before it, and never
    /// waits for room: a full queue neither blocks the dropping thread nor starts one, and
    /// nothing is dropped.
    ///
    /// Bound: the only detached request is the release of a handle, one per handle. A handle
    /// is opened by a request through this same queue, and an open queued behind a release
    /// returns only after the writer has taken that release. So every handle whose release is
    /// still queued was open, or being opened, when the oldest queued release was submitted:
    /// the queued releases never outnumber the handles of one moment. It is about execution
    /// `id`, and ordered with its other requests as [`Writer::write_for`] says.
    pub(crate) fn write_detached<F>(&self, id: Uuid, work: F)
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let (reply, _ignored) = oneshot::channel();
        // Fails only when the writer thread has ended, and then nothing can be written.
        let _ = self.enqueue(
            Some(id),
            TypedJob::boxed(Undo::Savepoint, work, reply),
            None,
        );
    }

    /// Puts `job` at the end of its queue, holding `room` until the engine takes it: the queue
    /// of execution `id`, or the next in turn.
    fn enqueue(
        &self,
        id: Option<Uuid>,
        job: Box<dyn Job>,
        room: Option<OwnedSemaphorePermit>,
    ) -> Result<()> {
        let index = match id {
            Some(id) => shard(id, self.queues.len()),
            None => self.turn.fetch_add(1, Ordering::Relaxed) % self.queues.len(),
        };
        let queue = self.queues.get(index).ok_or(Error::WriterStopped)?;
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        queue.send(Queued { job, _room: room }).map_err(|_| {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
            Error::WriterStopped
        })
    }

    /// The writer's counters so far.
    pub(crate) fn stats(&self) -> WriterStats {
        WriterStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            requests: self.counters.requests.load(Ordering::Relaxed),
            requests_failed: self.counters.requests_failed.load(Ordering::Relaxed),
            commits_failed: self.counters.commits_failed.load(Ordering::Relaxed),
            queued: self.counters.queued.load(Ordering::Relaxed),
            syncs: self.counters.syncs.load(Ordering::Relaxed),
            answered: self.counters.answered.load(Ordering::Relaxed),
            queued_ns: self.counters.queued_ns.load(Ordering::Relaxed),
            waited_ns: self.counters.waited_ns.load(Ordering::Relaxed),
        }
    }
}

/// The queue, of `queues`, of every request about execution `id`. The hash is the standard
/// library's with fixed keys, so it is the same in every run; only one process's writer uses
/// it, so it needs no stability across builds.
fn shard(id: Uuid, queues: usize) -> usize {
    let mut hasher = std::hash::DefaultHasher::new();
    id.hash(&mut hasher);
    // The remainder is below `queues`, a usize.
    (hasher.finish() % queues.max(1) as u64) as usize
}

/// The writer thread's loop. It owns the syncer, so the syncer's last acknowledgements are
/// delivered before the connection closes.
fn run(
    conn: &Connection,
    mut receiver: mpsc::UnboundedReceiver<Queued>,
    counters: &Counters,
    busy_timeout_ms: u64,
    syncer: Option<Syncer>,
) {
    // The batches are SQLite transactions, begun, savepointed and checked on the SQLite
    // connection underneath. The journal starts its writer on SQLite only; on any other
    // connection the thread ends at once, and every request is answered `WriterStopped`.
    let Some(sqlite) = conn.as_sqlite() else {
        return;
    };
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(BATCH_REQUESTS_MAX);
    while let Some(first) = receiver.blocking_recv() {
        batch.push(counters.take(first));
        while batch.len() < BATCH_REQUESTS_MAX {
            match receiver.try_recv() {
                Ok(queued) => batch.push(counters.take(queued)),
                Err(_) => break,
            }
        }
        telemetry::queue_depth(counters.queued());
        let size = batch.len();
        let span = tracing::info_span!(
            telemetry::SPAN_WRITER_BATCH,
            size,
            outcome = tracing::field::Empty
        );
        let _entered = span.enter();
        if let Some(refusal) = syncer.as_ref().and_then(Syncer::refusal) {
            fail_all(&mut batch, &refusal, counters);
            telemetry::batch_failed(size);
            span.record("outcome", "failed");
            continue;
        }
        let began = Instant::now();
        if !commit_batch(conn, sqlite, &mut batch, counters, busy_timeout_ms) {
            telemetry::batch_failed(size);
            span.record("outcome", "failed");
            continue;
        }
        telemetry::batch_committed(size, began.elapsed());
        span.record("outcome", "committed");
        match &syncer {
            Some(syncer) => syncer.acknowledge(&mut batch, !receiver.is_empty()),
            None => batch.drain(..).for_each(|job| job.finish(None)),
        }
    }
    // Waits for the syncer's last acknowledgements, while the connection is still open.
    drop(syncer);
}

/// Runs and commits one batch. `true` when it committed, with its requests left in `batch` to
/// be acknowledged; `false` when it failed, and every request was told.
fn commit_batch(
    conn: &Connection,
    sqlite: &rusqlite::Connection,
    batch: &mut Vec<Box<dyn Job>>,
    counters: &Counters,
    busy_timeout_ms: u64,
) -> bool {
    let taken = Instant::now();
    if let Err(error) = cached(sqlite, "BEGIN IMMEDIATE") {
        fail_all(batch, &with_timeout(error, busy_timeout_ms), counters);
        return false;
    }
    let mut failed = 0_u64;
    for job in batch.iter_mut() {
        match run_request(conn, sqlite, job.as_mut(), taken) {
            Ok(true) => {}
            Ok(false) => failed += 1,
            Err(error) => {
                // Its rows cannot be taken back alone; none of the batch may commit.
                let _ = sqlite.execute_batch("ROLLBACK");
                fail_all(batch, &error, counters);
                return false;
            }
        }
        // Some errors (a full disk, an I/O error) make SQLite roll back the whole transaction
        // on its own. Running the rest of the batch would then write in autocommit mode,
        // outside any batch: stop, and report the batch failed to every request in it.
        if sqlite.is_autocommit() {
            let error = Error::CommitFailed {
                reason: "SQLite rolled the batch back after an error in one of its requests"
                    .to_owned(),
            };
            fail_all(batch, &error, counters);
            return false;
        }
    }
    if let Err(error) = cached(sqlite, "COMMIT") {
        // A failed COMMIT may leave the transaction open; roll it back so the next batch starts
        // clean. Its own failure is moot: the batch is reported failed either way.
        let _ = sqlite.execute_batch("ROLLBACK");
        fail_all(batch, &with_timeout(error, busy_timeout_ms), counters);
        return false;
    }
    counters.committed(batch.len() as u64, failed);
    true
}

/// Runs one request so that a failure takes back its own writes only. `Ok(false)` when it
/// failed alone; `Err` when a request that promised [`Undo::OneStatement`] failed after
/// changing rows, which nothing can take back short of the whole batch.
fn run_request(
    conn: &Connection,
    sqlite: &rusqlite::Connection,
    job: &mut dyn Job,
    taken: Instant,
) -> Result<bool> {
    match job.undo() {
        Undo::Savepoint => Ok(run_in_savepoint(conn, sqlite, job, taken)),
        Undo::OneStatement => {
            // A statement SQLite took back adds nothing to the total (sqlite3VdbeSetChanges
            // is given 0 when a statement is rolled back).
            let changes_before = sqlite.total_changes();
            let ok = job.run(conn, taken);
            if !ok && sqlite.total_changes() != changes_before {
                return Err(Error::CommitFailed {
                    reason: "a request without a savepoint failed after changing rows, so its \
                             whole batch was rolled back; this is a bug in durably, please \
                             report it"
                        .to_owned(),
                });
            }
            Ok(ok)
        }
    }
}

fn run_in_savepoint(
    conn: &Connection,
    sqlite: &rusqlite::Connection,
    job: &mut dyn Job,
    taken: Instant,
) -> bool {
    if cached(sqlite, "SAVEPOINT request").is_err() {
        return false;
    }
    let ok = job.run(conn, taken);
    // If ending the savepoint fails the whole transaction is in doubt; the COMMIT that follows
    // then fails too and every request of the batch is told.
    let _ = if ok {
        cached(sqlite, "RELEASE request")
    } else {
        cached(sqlite, "ROLLBACK TO request").and_then(|_| cached(sqlite, "RELEASE request"))
    };
    ok
}

/// Runs one statement through the connection's statement cache. The savepoint statements run
/// twice per request and BEGIN and COMMIT once per batch; parsing them each time was a
/// measurable share of the writer's time.
fn cached(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute([])
}

fn with_timeout(error: rusqlite::Error, busy_timeout_ms: u64) -> Error {
    let error = durably_db::Error::from(error);
    match classify(&error) {
        Some(Error::Busy { .. }) => Error::Busy { busy_timeout_ms },
        Some(classified) => classified,
        None => Error::CommitFailed {
            reason: error.to_string(),
        },
    }
}

fn fail_all(batch: &mut Vec<Box<dyn Job>>, error: &Error, counters: &Counters) {
    counters.commit_failed();
    for job in batch.drain(..) {
        job.finish(Some(replicate(error)));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use durably_db::{Connection, params};

    use super::{Undo, WalSync, Writer, WriterThread};
    use crate::error::Error;

    /// A writer on a scratch file with one table whose `id` is unique. The thread comes first:
    /// bound in this order, the writer is dropped before the thread is joined, which waits for
    /// every writer handle to be gone.
    fn scratch_writer(dir: &tempfile::TempDir) -> (WriterThread, Writer) {
        scratch_writer_syncing(dir, None)
    }

    fn scratch_writer_syncing(
        dir: &tempfile::TempDir,
        wal: Option<Box<dyn WalSync>>,
    ) -> (WriterThread, Writer) {
        let path = dir.path().join("writer.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE rows (id INTEGER PRIMARY KEY, who TEXT NOT NULL) STRICT;",
        )
        .unwrap();
        let (writer, thread) =
            Writer::start(&path, conn.into(), 1_000, Duration::from_secs(20), wal).unwrap();
        (thread, writer)
    }

    /// A stand-in for the WAL's fsync: each sync says it began, then waits for the test to
    /// give its outcome.
    struct GatedSync {
        began: std::sync::mpsc::Sender<()>,
        outcome: std::sync::Mutex<std::sync::mpsc::Receiver<std::io::Result<()>>>,
    }

    impl WalSync for GatedSync {
        fn sync(&self) -> std::io::Result<()> {
            self.began.send(()).unwrap();
            self.outcome.lock().unwrap().recv().unwrap()
        }
    }

    /// A writer whose WAL syncs are gated: returns the receiver told when a sync begins and
    /// the sender of each sync's outcome.
    fn gated_writer(
        dir: &tempfile::TempDir,
    ) -> (
        WriterThread,
        Writer,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<std::io::Result<()>>,
    ) {
        let (began, sync_began) = std::sync::mpsc::channel();
        let (give_outcome, outcome) = std::sync::mpsc::channel();
        let wal = GatedSync {
            began,
            outcome: std::sync::Mutex::new(outcome),
        };
        let (thread, writer) = scratch_writer_syncing(dir, Some(Box::new(wal)));
        (thread, writer, sync_began, give_outcome)
    }

    /// Waits, off the runtime's threads, until a gated sync has begun.
    async fn sync_begins(
        sync_began: std::sync::mpsc::Receiver<()>,
    ) -> std::sync::mpsc::Receiver<()> {
        tokio::task::spawn_blocking(move || {
            sync_began
                .recv_timeout(Duration::from_secs(20))
                .expect("no WAL sync began for a committed request");
            sync_began
        })
        .await
        .unwrap()
    }

    fn insert(id: i64, who: &'static str) -> impl FnOnce(&Connection) -> crate::Result<()> {
        move |conn| {
            conn.execute(
                "INSERT INTO rows (id, who) VALUES (?1, ?2)",
                params![id, who],
            )?;
            Ok(())
        }
    }

    /// Waits until every one of `requests` is queued behind the held request, lets the writer
    /// go on, and returns their outcomes: they all ran in the one batch after the held one.
    async fn one_batch<T: Send + 'static>(
        writer: &Writer,
        (release, held): Held,
        requests: Vec<tokio::task::JoinHandle<T>>,
    ) -> Vec<T> {
        let queued = requests.len() as u64;
        while writer.stats().queued < queued {
            tokio::task::yield_now().await;
        }
        drop(release);
        held.await.unwrap();
        let mut outcomes = Vec::new();
        for request in requests {
            outcomes.push(request.await.unwrap());
        }
        outcomes
    }

    fn rows(dir: &tempfile::TempDir) -> Vec<(i64, String)> {
        let conn = rusqlite::Connection::open(dir.path().join("writer.db")).unwrap();
        let mut statement = conn
            .prepare("SELECT id, who FROM rows ORDER BY id")
            .unwrap();
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Submits `work` from a task.
    fn submit<F>(writer: &Writer, undo: Undo, work: F) -> tokio::task::JoinHandle<crate::Result<()>>
    where
        F: FnOnce(&Connection) -> crate::Result<()> + Send + 'static,
    {
        let writer = writer.clone();
        tokio::spawn(async move { writer.write_with(undo, work).await })
    }

    /// A request the writer thread is inside, and what lets it finish (dropping the sender).
    type Held = (std::sync::mpsc::Sender<()>, tokio::task::JoinHandle<()>);

    /// Blocks the writer thread inside a request until the returned sender is dropped.
    async fn hold(writer: &Writer) -> Held {
        let (entered, held) = holding_request(writer, |_| Ok(()));
        while entered.try_recv().is_err() {
            tokio::task::yield_now().await;
        }
        held
    }

    /// Submits `work` wrapped so that the writer, once inside it, says so and then waits until
    /// the returned sender is dropped. Returns the receiver told when the writer is inside.
    fn holding_request<F>(writer: &Writer, work: F) -> (std::sync::mpsc::Receiver<()>, Held)
    where
        F: FnOnce(&Connection) -> crate::Result<()> + Send + 'static,
    {
        let (entered_sender, entered) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let writer = writer.clone();
        let held = tokio::spawn(async move {
            writer
                .write(move |conn| {
                    entered_sender.send(()).unwrap();
                    let _ = released.recv();
                    work(conn)
                })
                .await
                .unwrap();
        });
        (entered, (release, held))
    }

    /// The wait totals split a request's life at the moment the writer took it: a request
    /// queued behind a held one spends at least the hold in the queue.
    #[tokio::test(flavor = "current_thread")]
    async fn a_request_queued_behind_a_held_one_counts_the_hold_as_queued() {
        const HOLD: Duration = Duration::from_millis(30);
        let dir = tempfile::tempdir().unwrap();
        let (_thread, writer) = scratch_writer(&dir);
        let held = hold(&writer).await;
        let before = writer.stats();
        let queued = submit(&writer, Undo::Savepoint, insert(1, "queued"));
        while writer.stats().queued < 1 {
            tokio::task::yield_now().await;
        }
        let holding_since = std::time::Instant::now();
        tokio::time::sleep(HOLD).await;
        let held_for = holding_since.elapsed();
        let outcomes = one_batch(&writer, held, vec![queued]).await;
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        let after = writer.stats();

        // The held request and the queued one.
        assert_eq!(after.answered - before.answered, 2);
        let queued_ns = after.queued_ns - before.queued_ns;
        let waited_ns = after.waited_ns - before.waited_ns;
        assert!(
            u128::from(queued_ns) >= held_for.as_nanos(),
            "queued {queued_ns} ns, held {held_for:?}"
        );
        assert!(
            waited_ns > queued_ns,
            "waited {waited_ns} ns, queued {queued_ns} ns"
        );
    }

    // A current-thread runtime: a spawned task's request is in the queue after its first poll,
    // so the requests below all wait for the same batch behind the held one.
    #[tokio::test(flavor = "current_thread")]
    async fn a_one_statement_request_whose_statement_fails_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (_thread, writer) = scratch_writer(&dir);
        writer.write(insert(1, "before")).await.unwrap();
        let held = hold(&writer).await;
        let before = writer.stats();
        let requests = vec![
            submit(&writer, Undo::OneStatement, insert(2, "neighbour")),
            // The same id again: the statement fails, and SQLite takes it back by itself.
            submit(&writer, Undo::OneStatement, insert(1, "duplicate")),
            submit(&writer, Undo::Savepoint, insert(3, "other neighbour")),
        ];
        let outcomes = one_batch(&writer, held, requests).await;
        let after = writer.stats();

        assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
        assert!(
            matches!(&outcomes[1], Err(Error::Storage(durably_db::Error::Sqlite(rusqlite::Error::SqliteFailure(failure, _))))
                if failure.code == rusqlite::ErrorCode::ConstraintViolation),
            "{:?}",
            outcomes[1]
        );
        // The held request's batch, then one batch for all three.
        assert_eq!(after.commits - before.commits, 2, "{before:?} -> {after:?}");
        assert_eq!(after.requests_failed - before.requests_failed, 1);
        assert_eq!(
            rows(&dir),
            [
                (1, "before".to_owned()),
                (2, "neighbour".to_owned()),
                (3, "other neighbour".to_owned())
            ]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_one_statement_request_that_fails_after_writing_rolls_its_batch_back() {
        let dir = tempfile::tempdir().unwrap();
        let (_thread, writer) = scratch_writer(&dir);
        let held = hold(&writer).await;
        let before = writer.stats();
        let requests = vec![
            submit(&writer, Undo::Savepoint, insert(1, "neighbour")),
            // Breaks its promise: a row written, then a failure no statement journal covers.
            submit(&writer, Undo::OneStatement, |conn| {
                insert(2, "broken promise")(conn)?;
                Err(Error::Inconsistent("failed after writing".to_owned()))
            }),
            submit(&writer, Undo::OneStatement, insert(3, "after it")),
        ];
        let outcomes = one_batch(&writer, held, requests).await;
        let after = writer.stats();

        // The request that broke its promise gets its own error; its neighbours are told the
        // batch failed, the one before it included, whose insert had already run.
        assert!(
            matches!(&outcomes[1], Err(Error::Inconsistent(_))),
            "{outcomes:?}"
        );
        for neighbour in [&outcomes[0], &outcomes[2]] {
            assert!(
                matches!(neighbour, Err(Error::CommitFailed { .. })),
                "{outcomes:?}"
            );
        }
        assert_eq!(after.commits_failed - before.commits_failed, 1);
        assert!(rows(&dir).is_empty(), "nothing of the batch committed");
        // The writer goes on with a clean transaction.
        writer.write(insert(4, "next")).await.unwrap();
        assert_eq!(rows(&dir), [(4, "next".to_owned())]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committed_request_is_acknowledged_only_after_the_wal_sync_returns() {
        let dir = tempfile::tempdir().unwrap();
        let (_thread, writer, sync_began, give_outcome) = gated_writer(&dir);
        let request = submit(&writer, Undo::OneStatement, insert(1, "synced"));
        let sync_began = sync_begins(sync_began).await;

        // Committed, so another connection reads it, but the fsync has not returned.
        assert_eq!(rows(&dir), [(1, "synced".to_owned())]);
        assert!(
            !request.is_finished(),
            "acknowledged before the WAL sync returned"
        );
        assert_eq!(writer.stats().syncs, 0);

        give_outcome.send(Ok(())).unwrap();
        request.await.unwrap().unwrap();
        let stats = writer.stats();
        assert_eq!((stats.commits, stats.syncs), (1, 1), "{stats:?}");
        drop(sync_began);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_wal_sync_fails_its_batch_and_every_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let (_thread, writer, sync_began, give_outcome) = gated_writer(&dir);
        let request = submit(&writer, Undo::OneStatement, insert(1, "in doubt"));
        let _sync_began = sync_begins(sync_began).await;
        give_outcome
            .send(Err(std::io::Error::other("the disk went away")))
            .unwrap();

        let outcome = request.await.unwrap();
        assert!(
            matches!(&outcome, Err(Error::CommitFailed { reason })
                if reason.contains("the WAL could not be synced")
                    && reason.contains("the disk went away")),
            "{outcome:?}"
        );
        // The kernel may have dropped the unsynced pages, so no later commit can be trusted:
        // the writer refuses to write at all, and says why.
        let later = writer.write(insert(2, "after the failure")).await;
        assert!(
            matches!(&later, Err(Error::CommitFailed { reason })
                if reason.contains("refuses further writes")),
            "{later:?}"
        );
        assert_eq!(rows(&dir), [(1, "in doubt".to_owned())]);
        let stats = writer.stats();
        assert_eq!(
            (stats.commits, stats.syncs, stats.commits_failed),
            (1, 0, 2),
            "{stats:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_committed_during_an_fsync_waits_for_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let (_thread, writer, sync_began, give_outcome) = gated_writer(&dir);
        let (release_first, first) = hold(&writer).await;
        let (second_entered, (release_second, second)) =
            holding_request(&writer, insert(1, "second"));
        while writer.stats().queued < 1 {
            tokio::task::yield_now().await;
        }
        // The first batch commits with the second queued behind it, so the writer hands it to
        // the syncer thread and goes on into the second, which holds it until the fsync of the
        // first has begun.
        drop(release_first);
        let sync_began = sync_begins(sync_began).await;
        let second_entered = tokio::task::spawn_blocking(move || second_entered.recv())
            .await
            .unwrap();
        assert!(second_entered.is_ok());
        drop(release_second);
        while writer.stats().commits < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(rows(&dir), [(1, "second".to_owned())]);
        assert!(!first.is_finished() && !second.is_finished());

        // The first fsync began before the second commit, so it acknowledges only the first.
        give_outcome.send(Ok(())).unwrap();
        first.await.unwrap();
        let sync_began = sync_begins(sync_began).await;
        assert!(
            !second.is_finished(),
            "acknowledged by an fsync that began before its commit"
        );
        give_outcome.send(Ok(())).unwrap();
        second.await.unwrap();
        let stats = writer.stats();
        assert_eq!((stats.commits, stats.syncs), (2, 2), "{stats:?}");
        drop(sync_began);
    }
}
