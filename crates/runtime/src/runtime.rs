//! [`Runtime`]: a process's runtime on a journal, reached as a [`Client`] through `Deref`.

use std::ops::Deref;
use std::sync::Arc;

use durably_journal::Journal;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::builder::RuntimeBuilder;
use crate::client::Client;
use crate::clock::Clock;
use crate::dispatcher::{self, Capacity, Dispatch};
use crate::error::Result;
use crate::handle::WorkflowHandle;
use crate::options::StartOptions;

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

    pub(crate) fn spawn(client: Client, capacity: Capacity, clock: Arc<dyn Clock>) -> Self {
        let dispatch = Arc::new(Dispatch {
            client,
            capacity,
            clock,
            notify: Notify::new(),
            stop: watch::Sender::new(false),
        });
        let running = Arc::clone(&dispatch);
        tokio::spawn(async move {
            if let Err(error) = dispatcher::run(running).await {
                tracing::error!(%error, "the runtime's dispatcher stopped");
            }
        });
        Self {
            _stop_on_drop: Arc::new(StopOnDrop(Arc::clone(&dispatch))),
            dispatch,
        }
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
}

impl Deref for Runtime {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.dispatch.client
    }
}
