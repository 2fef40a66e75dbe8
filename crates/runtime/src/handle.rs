//! [`WorkflowHandle`]: an execution's id and the type of its output, to read its status and
//! await its result from any process.

use std::any::type_name;
use std::fmt;
use std::marker::PhantomData;

use durably_journal::{ExecutionRecord, Status};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};

/// A handle on execution [`WorkflowHandle::id`], whose output decodes as `O`. Holding one
/// keeps nothing locked and runs nothing: it only reads the journal. Get one from
/// [`Client::handle`].
pub struct WorkflowHandle<O> {
    client: Client,
    id: Uuid,
    /// `fn() -> O`: the handle produces an `O` but holds none, so it is `Send` and `Sync`
    /// whatever `O` is.
    output: PhantomData<fn() -> O>,
}

impl<O> WorkflowHandle<O> {
    pub(crate) fn new(client: Client, id: Uuid) -> Self {
        Self {
            client,
            id,
            output: PhantomData,
        }
    }

    /// The execution's id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The execution's status now.
    ///
    /// # Errors
    /// [`Error::NotFound`] when no execution has this id (never started, or removed by
    /// retention), [`Error::Journal`] for storage.
    pub fn status(&self) -> Result<Status> {
        Ok(self.record()?.status)
    }

    fn record(&self) -> Result<ExecutionRecord> {
        self.client
            .journal()
            .get(self.id)?
            .ok_or(Error::NotFound(self.id))
    }
}

impl<O: DeserializeOwned> WorkflowHandle<O> {
    /// Waits until the execution has ended and returns its output. The wait costs no query
    /// while nothing commits: it is woken by the client's watcher, which notices commits of any
    /// process on the file within a poll.
    ///
    /// # Errors
    /// - [`Error::WorkflowFailed`] with the recorded error, [`Error::Cancelled`] with the
    ///   reason;
    /// - [`Error::OutputType`] when the output does not decode as `O` (the journal is
    ///   untouched);
    /// - [`Error::NotFound`] when no execution has this id;
    /// - [`Error::Watcher`] when the watcher cannot start, [`Error::Journal`] for storage.
    pub async fn result(&self) -> Result<O> {
        let mut changes = self.client.changes()?;
        loop {
            // Marked seen before the read, so a commit after the read is a change to wait for
            // and is never missed.
            changes.borrow_and_update();
            if let Some(outcome) = self.outcome()? {
                return outcome;
            }
            if changes.changed().await.is_err() {
                return Err(Error::Watcher(std::io::Error::other(
                    "the watcher thread ended",
                )));
            }
        }
    }

    /// The outcome if the execution has ended; `None` while it has not.
    fn outcome(&self) -> Result<Option<Result<O>>> {
        let record = self.record()?;
        Ok(match record.status {
            Status::Completed => Some(self.decode_output(&record)),
            Status::Failed => Some(Err(Error::WorkflowFailed {
                execution_id: self.id,
                error: record.error,
            })),
            Status::Cancelled => Some(Err(Error::Cancelled {
                execution_id: self.id,
                reason: cancel_reason(&record),
            })),
            Status::Queued
            | Status::Running
            | Status::Waiting
            | Status::Interrupted
            | Status::Stuck
            | Status::AwaitingOperator => None,
        })
    }

    fn decode_output(&self, record: &ExecutionRecord) -> Result<O> {
        let text = record
            .output
            .as_ref()
            .map_or("null", |output| output.as_json());
        serde_json::from_str(text).map_err(|source| Error::OutputType {
            execution_id: self.id,
            expected: type_name::<O>(),
            source,
        })
    }
}

/// The reason of a cancellation, as the journal records it (`{"cancelled": reason}`).
fn cancel_reason(record: &ExecutionRecord) -> String {
    record
        .error
        .as_ref()
        .and_then(|error| error.to_value().ok())
        .and_then(|value| {
            value
                .get("cancelled")
                .and_then(|r| r.as_str().map(str::to_owned))
        })
        .unwrap_or_default()
}

impl<O> Clone for WorkflowHandle<O> {
    fn clone(&self) -> Self {
        Self::new(self.client.clone(), self.id)
    }
}

impl<O> fmt::Debug for WorkflowHandle<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkflowHandle")
            .field("id", &self.id)
            .field("output", &type_name::<O>())
            .finish_non_exhaustive()
    }
}
