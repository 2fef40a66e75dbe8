//! [`Runtime`]: a process's runtime on a journal, reached as a [`Client`] through `Deref`.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use durably_journal::Journal;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::builder::RuntimeBuilder;
use crate::cancel;
use crate::client::Client;
use crate::clock::Clock;
use crate::dispatcher::{self, Capacity, Dispatch};
use crate::error::Result;
use crate::handle::WorkflowHandle;
use crate::options::StartOptions;
use crate::recovery::RecoveryReport;
use crate::waiting::Waits;

/// A runtime started by [`RuntimeBuilder::start`]: it claims queued executions of the kinds
/// this process registered, within every queue limit, and runs them. Everything a [`Client`]
/// does is reached through it, with starts of its registered kinds type-checked.
///
/// Clones share one dispatcher; it stops claiming when [`Runtime::shutdown`] is called or the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct Runtime {
    dispatch: Arc<Dispatch>,
    _stop_on_drop: Arc<StopOnDrop>,
    recovery: Arc<RecoveryReport>,
}

/// What [`RuntimeBuilder::start`] hands the runtime it starts.
pub(crate) struct Settings {
    pub(crate) client: Client,
    pub(crate) capacity: Capacity,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) resume_failures_max: u32,
    pub(crate) sweep_interval: Duration,
    pub(crate) park_after: Duration,
    pub(crate) recovery: RecoveryReport,
}

/// Stops the dispatcher when the last clone of its runtime is dropped (the dispatcher's own
/// task holds the dispatch state, not this).
#[derive(Debug)]
struct StopOnDrop(Arc<Dispatch>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.send_replace(true);
    }
}

impl Runtime {
    /// Starts configuring a runtime on `journal`.
    pub fn builder(journal: Journal) -> RuntimeBuilder {
        RuntimeBuilder::new(journal)
    }

    pub(crate) fn spawn(settings: Settings) -> Self {
        let waits = Arc::new(Waits {
            client: settings.client.clone(),
            clock: Arc::clone(&settings.clock),
            park_after: settings.park_after,
        });
        let dispatch = Arc::new(Dispatch {
            client: settings.client,
            capacity: settings.capacity,
            clock: settings.clock,
            waits,
            resume_failures_max: settings.resume_failures_max,
            sweep_interval: settings.sweep_interval,
            recover_soon: AtomicBool::new(false),
            notify: Notify::new(),
            stop: watch::Sender::new(false),
            runs: Arc::default(),
        });
        let running = Arc::clone(&dispatch);
        tokio::spawn(async move {
            if let Err(error) = dispatcher::run(running).await {
                tracing::error!(%error, "the runtime's dispatcher stopped");
            }
        });
        let watching = Arc::clone(&dispatch);
        tokio::spawn(async move {
            if let Err(error) = cancel::watch_requests(watching).await {
                tracing::error!(%error, "the runtime's cancel watcher stopped");
            }
        });
        Self {
            _stop_on_drop: Arc::new(StopOnDrop(Arc::clone(&dispatch))),
            dispatch,
            recovery: Arc::new(settings.recovery),
        }
    }

    /// What this runtime's dispatcher and its tasks share.
    pub(crate) fn dispatch(&self) -> &Arc<Dispatch> {
        &self.dispatch
    }

    /// What recovery did when this runtime started: executions requeued, parked `stuck`, and
    /// interrupted executions of kinds it does not serve, left alone.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// As [`Client::start`], and wakes this runtime's dispatcher at once, so an execution of a
    /// kind it serves starts without waiting for the watcher.
    ///
    /// # Errors
    /// As [`Client::start`].
    pub async fn start<I, O>(
        &self,
        kind: &str,
        id: Uuid,
        input: &I,
        options: StartOptions,
    ) -> Result<WorkflowHandle<O>>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        let handle = self.dispatch.client.start(kind, id, input, options).await?;
        self.dispatch.notify.notify_one();
        Ok(handle)
    }

    /// Stops claiming new executions. Runs already started continue until they end.
    pub fn shutdown(&self) {
        self.dispatch.stop.send_replace(true);
    }

    /// A graceful stop: [`Runtime::shutdown`], then waits until no execution runs in this
    /// process. A run ends when its workflow returns or when it parks (a wait longer than
    /// `park_after` parks within `park_after`), so a run whose step never returns keeps this
    /// waiting: bound it with a timeout (`tokio::time::timeout`) where that matters. After a
    /// timeout, drop the runtime: the unfinished runs are recovered by the next process
    /// serving their kind, as after a crash.
    pub async fn drain(&self) {
        self.shutdown();
        self.dispatch.capacity.idle().await;
    }
}

impl Deref for Runtime {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.dispatch.client
    }
}
