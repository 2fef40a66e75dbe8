//! [`RuntimeBuilder`]: the workflows a runtime process runs and the queues it configures.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use durably_journal::Journal;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::client::Client;
use crate::clock::testing::TestClock;
use crate::clock::{Clock, SystemClock};
use crate::context::WorkflowContext;
use crate::dispatcher::Capacity;
use crate::error::{Result, WorkflowError};
use crate::names::{self, NameKind};
use crate::recovery::{RESUME_FAILURES_MAX_DEFAULT, count_other_versions, recover};
use crate::registry::Registry;
use crate::runtime::{Runtime, Settings};
use crate::store;
use crate::waiting::PARK_AFTER_DEFAULT;

/// The audit event written to the journal's `events` table when a runtime changes a queue's
/// limit.
pub(crate) const EVENT_QUEUE_CONFIGURED: &str = "queue_configured";

/// A queue's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueConfig {
    /// The most executions of the queue running at once across every process on the journal;
    /// `None` for no limit. Stored in the journal, so all processes agree on it: the last
    /// runtime started with another value changes it for all.
    pub concurrency_max: Option<u32>,
    /// The most executions of the queue this process runs at once; `None`: only the
    /// process's own limit ([`RuntimeBuilder::concurrency_max`]) applies.
    pub process_concurrency_max: Option<u32>,
}

/// The default of [`RuntimeBuilder::concurrency_max`].
pub const CONCURRENCY_MAX_DEFAULT: u32 = 64;

/// Configures a [`Runtime`]: `Runtime::builder(journal).register(...).queue(...).start()`.
#[derive(Debug)]
pub struct RuntimeBuilder {
    journal: Journal,
    registry: Registry,
    queues: BTreeMap<String, QueueConfig>,
    concurrency_max: u32,
    clock: Option<Arc<TestClock>>,
    resume_failures_max: u32,
    sweep_interval: Duration,
    park_after: Duration,
}

/// The default of [`RuntimeBuilder::sweep_interval`].
pub const SWEEP_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

impl RuntimeBuilder {
    pub(crate) fn new(journal: Journal) -> Self {
        Self {
            journal,
            registry: Registry::default(),
            queues: BTreeMap::new(),
            concurrency_max: CONCURRENCY_MAX_DEFAULT,
            clock: None,
            resume_failures_max: RESUME_FAILURES_MAX_DEFAULT,
            sweep_interval: SWEEP_INTERVAL_DEFAULT,
            park_after: PARK_AFTER_DEFAULT,
        }
    }

    /// Registers `workflow` as `kind` at `version` (from 1). A process may register several
    /// versions of a kind; a start records the highest. The input and output types are
    /// checked on every start from this process, and the input decoded with serde when the
    /// workflow runs.
    ///
    /// Problems (an invalid kind, version 0, a (kind, version) registered twice) are reported
    /// together by [`RuntimeBuilder::start`].
    #[must_use]
    pub fn register<I, O, F, Fut>(mut self, kind: &str, version: u32, workflow: F) -> Self
    where
        I: Serialize + DeserializeOwned + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(WorkflowContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, WorkflowError>> + Send + 'static,
    {
        self.registry.register(kind, version, workflow);
        self
    }

    /// Configures queue `name`; starts into a queue no runtime configured are refused.
    #[must_use]
    pub fn queue(mut self, name: &str, config: QueueConfig) -> Self {
        self.queues.insert(name.to_owned(), config);
        self
    }

    /// The most executions this process runs at once, over all queues (default
    /// [`CONCURRENCY_MAX_DEFAULT`]).
    #[must_use]
    pub fn concurrency_max(mut self, concurrency_max: u32) -> Self {
        self.concurrency_max = concurrency_max;
        self
    }

    /// How many runs in a row may fail without recording a step before the execution is
    /// parked `stuck` for an operator (default [`RESUME_FAILURES_MAX_DEFAULT`]).
    #[must_use]
    pub fn resume_failures_max(mut self, failures_max: u32) -> Self {
        self.resume_failures_max = failures_max;
        self
    }

    /// How often the runtime sweeps the journal for executions of processes that died and
    /// recovers them (default [`SWEEP_INTERVAL_DEFAULT`]). Runs that fail in this process are
    /// recovered at once.
    #[must_use]
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// How long a wait (a timer, a receive) may stay in memory, holding its execution's lock
    /// and a place in its queue; a longer one parks the execution instead: it leaves memory,
    /// releases its lock, and any runtime serving its kind resumes it when the wait ends
    /// (default [`PARK_AFTER_DEFAULT`]). Zero parks every wait that has any time left.
    #[must_use]
    pub fn park_after(mut self, park_after: Duration) -> Self {
        self.park_after = park_after;
        self
    }

    /// Runs the runtime on `clock` instead of the system clock: due times are compared with it
    /// and slept on it, so a test moves time with [`TestClock::advance`]. It must be the clock
    /// the journal was opened with ([`durably_journal::JournalBuilder::clock`]), so that rows
    /// and timers agree; [`RuntimeBuilder::start`] refuses another.
    #[must_use]
    pub fn clock(mut self, clock: Arc<TestClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Starts the runtime: brings the runtime's tables up to date, records its queues' limits
    /// and its workflow kinds in one transaction (so other processes can start those kinds and
    /// use those queues), recovers the interrupted executions of its kinds (see
    /// [`Runtime::recovery_report`]), then starts claiming.
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] naming every registration problem,
    /// [`crate::Error::InvalidName`] for a bad queue name, [`crate::Error::Journal`] (a file
    /// migrated by a newer runtime, storage). Nothing is written on a configuration error.
    pub async fn start(self) -> Result<Runtime> {
        let clock = self.checked_clock()?;
        let registry = self.registry.checked()?;
        if self.concurrency_max == 0 {
            return Err(crate::Error::InvalidConfig(
                "concurrency_max must be at least 1".to_owned(),
            ));
        }
        if self.resume_failures_max == 0 || self.sweep_interval.is_zero() {
            return Err(crate::Error::InvalidConfig(
                "resume_failures_max and sweep_interval must be at least 1".to_owned(),
            ));
        }
        for (queue, config) in &self.queues {
            names::check(NameKind::Queue, queue)?;
            if config.concurrency_max == Some(0) {
                return Err(crate::Error::InvalidConfig(format!(
                    "queue {queue:?}: concurrency_max must be at least 1, or None for no limit"
                )));
            }
        }
        let client = Client::with_registry(self.journal, registry, Arc::clone(&clock)).await?;
        let kinds: Vec<(String, u32)> = client
            .registry()
            .kinds()
            .map(|(kind, version)| (kind.to_owned(), version))
            .collect();
        let mut process_limits: BTreeMap<Option<String>, u32> = self
            .queues
            .iter()
            .map(|(queue, config)| {
                let max = config
                    .process_concurrency_max
                    .unwrap_or(self.concurrency_max);
                (Some(queue.clone()), max)
            })
            .collect();
        process_limits.insert(None, self.concurrency_max);
        let queues = self.queues;
        let now = client.now();
        client
            .journal()
            .write(move |conn| {
                for (kind, version) in &kinds {
                    store::upsert_kind(conn, kind, *version, now)?;
                }
                for (queue, config) in &queues {
                    let previous = store::upsert_queue(conn, queue, config.concurrency_max, now)?;
                    if let Some(previous) = previous
                        && previous.concurrency_max != config.concurrency_max
                    {
                        let detail = json!({
                            "queue": queue,
                            "previous_concurrency_max": previous.concurrency_max,
                            "concurrency_max": config.concurrency_max,
                        });
                        durably_journal::record_event(conn, now, EVENT_QUEUE_CONFIGURED, &detail)?;
                    }
                }
                Ok(())
            })
            .await?;
        let mut recovery = recover(&client, self.resume_failures_max).await?;
        count_other_versions(&client, &mut recovery)?;
        Ok(Runtime::spawn(Settings {
            client,
            capacity: Capacity::new(self.concurrency_max, process_limits),
            clock,
            resume_failures_max: self.resume_failures_max,
            sweep_interval: self.sweep_interval,
            park_after: self.park_after,
            recovery,
        }))
    }

    /// The runtime's clock: the test clock if one was given and it is the journal's, else the
    /// system clock.
    fn checked_clock(&self) -> Result<Arc<dyn Clock>> {
        let Some(clock) = &self.clock else {
            return Ok(Arc::new(SystemClock));
        };
        let journal_clock = self.journal.locker().judge().clock();
        // Compares the objects, not the vtables: the same clock seen through two traits.
        if Arc::as_ptr(clock).cast::<()>() != Arc::as_ptr(journal_clock).cast::<()>() {
            return Err(crate::Error::InvalidConfig(
                "the runtime's clock must be the journal's: open the journal with the same \
                 Arc<TestClock>"
                    .to_owned(),
            ));
        }
        Ok(Arc::clone(clock) as Arc<dyn Clock>)
    }
}
