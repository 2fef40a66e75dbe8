//! [`JournalBuilder`]: every setting of a journal, with its bound and its default.

use std::sync::Arc;
use std::time::Duration;

use durably_db::Target;
use durably_lock::{Clock, ProcFs, ProcessTable, SystemClock};

use crate::error::Result;
use crate::inspector::Inspector;
use crate::journal::Journal;

/// How much a crash may take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// An acknowledged commit survives power loss. The default. The WAL is fsynced before every
    /// acknowledgement: by the writer itself, so that the fsync of one batch overlaps the next
    /// batch's statements (the write connection runs `synchronous=NORMAL` and leaves the
    /// commit's fsync to the writer).
    #[default]
    Full,
    /// `synchronous=NORMAL`: an acknowledged commit survives `kill -9` of the process but may
    /// be lost on power loss or an OS crash. If a lost commit was a guarded step's intent whose
    /// effect already ran, the replay cannot see the intent and runs the effect again: use this
    /// only for idempotent work.
    ProcessCrash,
}

impl Durability {
    /// The name used by the CLI and the benchmark (`full`, `process-crash`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::ProcessCrash => "process-crash",
        }
    }
}

/// Bounded retries of a step whose closure returned a retryable [`crate::StepError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub attempts_max: u32,
    /// The wait before the second attempt; doubled before each later one.
    pub backoff_initial: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts_max: 3,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt` (2 for the first retry): `backoff_initial`, doubled
    /// for each attempt after the second, never more than `backoff_max`.
    pub fn backoff_before(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(2).min(20);
        self.backoff_initial
            .saturating_mul(1_u32 << doublings)
            .min(self.backoff_max)
    }
}

/// The settings an open execution's steps are run with, copied into each handle at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepSettings {
    pub(crate) payload_bytes_max: usize,
    pub(crate) retry: RetryPolicy,
    pub(crate) ambiguous_reruns_max: u32,
    pub(crate) lease_ms: Option<u64>,
}

/// Default busy timeout: how long a write waits for another process's writer.
pub const BUSY_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default payload cap: the largest input, output, result or error, in bytes of JSON.
pub const PAYLOAD_BYTES_MAX_DEFAULT: usize = 1024 * 1024;
/// Default retention of completed executions.
pub const COMPLETED_RETENTION_DEFAULT: Duration = Duration::from_hours(7 * 24);
/// Default retention of failed and cancelled executions.
pub const FAILED_RETENTION_DEFAULT: Duration = Duration::from_hours(30 * 24);
/// Default bound on automatic re-runs of a step found ambiguous after a crash.
pub const AMBIGUOUS_RERUNS_MAX_DEFAULT: u32 = 3;
/// Default number of read connections.
pub const READERS_MAX_DEFAULT: u32 = 4;

/// Default number of writer workers on PostgreSQL ([`JournalBuilder::pg_writers`]).
pub const PG_WRITERS_DEFAULT: usize = 16;
/// Default read timeout of an [`crate::Inspector`]: how long one read may run before it is
/// stopped. Far above what any query of a journal durably wrote takes; it is there for files
/// someone else wrote.
pub const READ_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// How often the change feed of a journal on PostgreSQL moves without a notification, in
/// milliseconds ([`JournalBuilder::pg_poll_ms`]).
pub const PG_POLL_MS_DEFAULT: u64 = 1_000;

/// Opens a journal: `Journal::builder(path).durability(...).open()`; the target is a SQLite
/// file's path, or a PostgreSQL URL (see [`Target`]).
#[derive(Debug, Clone)]
pub struct JournalBuilder {
    pub(crate) target: Target,
    pub(crate) durability: Durability,
    pub(crate) busy_timeout_ms: u64,
    pub(crate) ack_timeout: Duration,
    pub(crate) payload_bytes_max: usize,
    pub(crate) sweep_on_open: bool,
    pub(crate) completed_retention: Duration,
    pub(crate) failed_retention: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) ambiguous_reruns_max: u32,
    pub(crate) lease_ms: Option<u64>,
    pub(crate) readers_max: u32,
    pub(crate) pg_writers: usize,
    pub(crate) read_timeout_ms: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) processes: Arc<dyn ProcessTable>,
    pub(crate) pg_poll: Duration,
}

impl JournalBuilder {
    pub(crate) fn new(target: Target) -> Self {
        Self {
            target,
            durability: Durability::Full,
            busy_timeout_ms: BUSY_TIMEOUT_MS_DEFAULT,
            ack_timeout: Duration::from_millis(BUSY_TIMEOUT_MS_DEFAULT * 6),
            payload_bytes_max: PAYLOAD_BYTES_MAX_DEFAULT,
            sweep_on_open: true,
            completed_retention: COMPLETED_RETENTION_DEFAULT,
            failed_retention: FAILED_RETENTION_DEFAULT,
            retry: RetryPolicy::default(),
            ambiguous_reruns_max: AMBIGUOUS_RERUNS_MAX_DEFAULT,
            lease_ms: None,
            readers_max: READERS_MAX_DEFAULT,
            pg_writers: PG_WRITERS_DEFAULT,
            read_timeout_ms: READ_TIMEOUT_MS_DEFAULT,
            clock: Arc::new(SystemClock),
            processes: Arc::new(ProcFs::default()),
            pg_poll: Duration::from_millis(PG_POLL_MS_DEFAULT),
        }
    }

    /// PostgreSQL only: how often [`Journal::changes`] moves without a notification (default
    /// 1000 ms), so that a notification lost with a dropped session delays a wake-up by this
    /// much at most. Notifications wake waiters at once; a shorter poll only wakes them more
    /// often for nothing.
    #[must_use]
    pub fn pg_poll_ms(mut self, pg_poll_ms: u64) -> Self {
        self.pg_poll = Duration::from_millis(pg_poll_ms);
        self
    }

    /// `Full` (default) or `ProcessCrash`; see [`Durability`].
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a write waits for another process's writer before [`crate::Error::Busy`].
    #[must_use]
    pub fn busy_timeout_ms(mut self, busy_timeout_ms: u64) -> Self {
        self.busy_timeout_ms = busy_timeout_ms;
        self
    }

    /// How long a caller waits for the writer's acknowledgement before
    /// [`crate::Error::AckTimeout`]. Default: six busy timeouts.
    #[must_use]
    pub fn ack_timeout(mut self, ack_timeout: Duration) -> Self {
        self.ack_timeout = ack_timeout;
        self
    }

    /// The largest payload (JSON bytes) written or read. Default 1 MiB.
    #[must_use]
    pub fn payload_bytes_max(mut self, payload_bytes_max: usize) -> Self {
        self.payload_bytes_max = payload_bytes_max;
        self
    }

    /// Whether opening runs the crash-orphan sweep. Default on.
    #[must_use]
    pub fn sweep_on_open(mut self, sweep_on_open: bool) -> Self {
        self.sweep_on_open = sweep_on_open;
        self
    }

    /// Retention of completed executions for [`crate::Operator::collect_garbage`]. Default 7
    /// days.
    #[must_use]
    pub fn completed_retention(mut self, age: Duration) -> Self {
        self.completed_retention = age;
        self
    }

    /// Retention of failed and cancelled executions. Default 30 days.
    #[must_use]
    pub fn failed_retention(mut self, age: Duration) -> Self {
        self.failed_retention = age;
        self
    }

    /// Retries of steps that fail with a retryable error.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How many times a guarded step found ambiguous after a crash is re-run automatically
    /// (under `Retry`, or `Reconcile` when the probe finds nothing) before it is left for an
    /// operator as [`crate::Error::Ambiguous`]. Bounds a step that crashes its process every
    /// time it runs. Default 3.
    #[must_use]
    pub fn ambiguous_reruns_max(mut self, reruns_max: u32) -> Self {
        self.ambiguous_reruns_max = reruns_max;
        self
    }

    /// Opt-in lease: locks taken by this journal may be taken over once their heartbeat
    /// ([`crate::Execution::heartbeat`]) is older than this, even if this process is alive.
    ///
    /// The journal stays right: a process that lost its lock this way writes nothing more. Its
    /// effects do not: frozen inside a guarded step's closure, it may still perform the effect
    /// when it goes on, after its successor or an operator has dealt with the step. So under a
    /// lease every [`crate::Policy`] is at-least-once for an effect that does not check the
    /// [`crate::FencingToken`] its closure gets in its [`crate::StepKey`].
    #[must_use]
    pub fn lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = Some(lease_ms);
        self
    }

    /// On PostgreSQL, how many writer workers the journal runs, each a thread with its own
    /// connection committing one request at a time (the server groups the commits of
    /// concurrent workers). All of one execution's writes go to one worker, in order. Default
    /// 16, at least 1; ignored on SQLite, which has one writer.
    #[must_use]
    pub fn pg_writers(mut self, workers: usize) -> Self {
        self.pg_writers = workers.max(1);
        self
    }

    /// How many read connections the pool keeps at most. Default 4.
    #[must_use]
    pub fn readers_max(mut self, readers_max: u32) -> Self {
        self.readers_max = readers_max.max(1);
        self
    }

    /// How long one read of an [`crate::Inspector`] ([`JournalBuilder::inspect`]) may run
    /// before it is stopped with [`crate::Error::ReadTimeout`]. Default
    /// [`READ_TIMEOUT_MS_DEFAULT`]; at least 1 ms.
    #[must_use]
    pub fn read_timeout_ms(mut self, read_timeout_ms: u64) -> Self {
        self.read_timeout_ms = read_timeout_ms.max(1);
        self
    }

    /// The clock (tests inject one they can move).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Where process facts come from (tests inject a fake).
    #[must_use]
    pub fn process_table(mut self, processes: Arc<dyn ProcessTable>) -> Self {
        self.processes = processes;
        self
    }

    /// Opens (creating if needed) the journal. Blocks on file I/O: call it at start-up, or
    /// inside `spawn_blocking`.
    ///
    /// # Errors
    /// [`crate::Error::SchemaTooNew`], [`crate::Error::ForeignDatabase`],
    /// [`crate::Error::Corrupt`], [`crate::Error::ReadOnly`], [`crate::Error::CannotOpen`],
    /// [`crate::Error::PathTooLong`], [`crate::Error::UnsafeFile`],
    /// [`crate::Error::DanglingSymlink`], [`crate::Error::Busy`], [`crate::Error::Pragma`],
    /// [`crate::Error::BackendNotCompiled`] for a backend this build lacks, or a lock or storage
    /// error.
    pub fn open(self) -> Result<Journal> {
        Journal::open_with(self)
    }

    /// Opens the journal only to read it: an [`Inspector`], which never writes, never migrates
    /// and creates no file. Of these settings the busy and read timeouts, the payload cap, the
    /// clock and the process table apply; the others are a writer's.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when the file cannot be found, [`crate::Error::PathTooLong`],
    /// [`crate::Error::UnsafeFile`] for a file or sibling that is not a regular file or whose
    /// owner is foreign, [`crate::Error::NotAJournal`], [`crate::Error::Corrupt`],
    /// [`crate::Error::ForeignDatabase`], [`crate::Error::SchemaTooNew`],
    /// [`crate::Error::SchemaTooOld`], [`crate::Error::NeedsRecovery`],
    /// [`crate::Error::CannotOpen`], [`crate::Error::ReadTimeout`],
    /// [`crate::Error::BackendNotCompiled`] for a backend this build lacks, or a lock error when
    /// this process's identity cannot be read.
    pub fn inspect(self) -> Result<Inspector> {
        Inspector::open_with(self)
    }
}
