//! [`Runtime::run`]: start an execution and run it in the caller's task, with the journal's
//! deferred open: the execution's row, lock and runtime row ride on its first write, and its
//! end on its last, so a workflow of N effect steps costs N commits.

use std::any::type_name;
use std::time::Duration;

use durably_journal::{Begun, ExecutionRecord, Payload};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use uuid::Uuid;

use crate::cancel::RunWatch;
use crate::dispatcher::{Dispatch, record_halt};
use crate::error::{Error, Result};
use crate::names::{self, NameKind};
use crate::options::StartOptions;
use crate::payload;
use crate::runtime::Runtime;
use crate::store::{self, Started};
use crate::task::{self, Ran};

/// A place this process took for a run outside any queue; given back, and the dispatcher
/// woken, when the run ends.
struct Place<'a>(&'a Dispatch);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.capacity.add(&None, -1);
        self.0.notify.notify_one();
    }
}

impl Runtime {
    /// Starts execution `id` of `kind` with `input` and runs it to its end in the caller's
    /// task, returning its output. Idempotent by id like [`Runtime::start`]: an execution that
    /// exists is not started again; its outcome is awaited instead.
    ///
    /// Nothing is written before the workflow's first write: its first step result (or its
    /// end) inserts the execution and takes its lock in the same commit, and the end rides on
    /// the last step's write. Until that first write only pure closures and the first step's
    /// idempotent closure run, with `FencingToken(0)`; if another process started the same id
    /// first, this run writes nothing, runs no guarded step, and awaits the other's outcome.
    /// A caller that needs the execution durable before any closure runs uses
    /// [`Runtime::start`].
    ///
    /// With a queue, a not-before time or a deduplication key, or when this process has no
    /// room, this is [`Runtime::start`] followed by [`crate::WorkflowHandle::result`].
    ///
    /// # Errors
    /// - [`Error::KindNotRegisteredHere`] when this process has not registered `kind`;
    /// - the errors of [`Runtime::start`] (nothing written) and of
    ///   [`crate::WorkflowHandle::result`];
    /// - [`Error::RunStopped`] when the run stopped before its first write (nothing written).
    pub async fn run<I, O>(
        &self,
        kind: &str,
        id: Uuid,
        input: &I,
        options: StartOptions,
    ) -> Result<O>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        names::check(NameKind::Kind, kind)?;
        let dispatch = self.dispatch();
        let client = &dispatch.client;
        let Some((version, workflow)) = client.registry().latest(kind) else {
            return Err(Error::KindNotRegisteredHere {
                kind: kind.to_owned(),
            });
        };
        workflow.check_types::<I, O>(kind)?;
        let deadline_at = options.checked(client.now())?;
        let queued = options.queue.is_some() || options.not_before.is_some();
        if queued || options.dedup.is_some() || !dispatch.capacity.try_take(&None) {
            return self.start(kind, id, input, options).await?.result().await;
        }
        let place = Place(dispatch);
        let input = payload::encode(
            input,
            &format!("the input of execution {id}"),
            client.journal(),
        )?;
        let name = options.name.unwrap_or_else(|| kind.to_owned());
        let started = move |conn: &durably_db::Connection| -> durably_journal::Result<()> {
            let started = Started {
                execution_id: id,
                version,
                deadline_at,
                dedup: None,
            };
            // No deduplication key: nothing can hold it.
            store::insert_started(conn, &started).map(drop)
        };
        let execution = match begin(self, id, (kind, &name), &input, started).await? {
            Begun::New(execution) => execution,
            Begun::Exists(record) => {
                drop(place);
                return observe(self, kind, record).await;
            }
        };
        let watch = RunWatch::start(&dispatch.waits, &dispatch.runs, id);
        let ran = task::run(execution, version, workflow, &watch, None).await;
        drop(watch);
        drop(place);
        match ran? {
            Ran::Completed(output) => {
                return serde_json::from_value(output).map_err(|source| Error::OutputType {
                    execution_id: id,
                    expected: type_name::<O>(),
                    source,
                });
            }
            Ran::Halted(reason) => {
                if client.journal().get(id)?.is_none() {
                    return Err(Error::RunStopped {
                        execution_id: id,
                        reason,
                    });
                }
                // The dispatcher resumes it under its failure accounting.
                record_halt(dispatch, id, reason).await;
            }
            // Parked: a runtime serving the kind claims it when it is woken; stuck (diverged):
            // an operator resumes it.
            Ran::Failed
            | Ran::BadInput
            | Ran::Raced
            | Ran::Parked
            | Ran::Cancelled
            | Ran::TimedOut
            | Ran::Requeued
            | Ran::Diverged => {}
        }
        client.handle(id).result().await
    }
}

/// How long a run whose id another run of this process has begun waits before it looks again,
/// when no commit wakes it first (that run may end without writing anything).
const BEGUN_HERE_RECHECK: Duration = Duration::from_millis(100);

/// Begins the execution, or finds it. While another run of this process has begun the id and
/// not written yet, there is nothing to await: look again at its first commit, or after
/// [`BEGUN_HERE_RECHECK`] (it may give up without writing, and the id is free again).
async fn begin<A>(
    runtime: &Runtime,
    id: Uuid,
    (kind, name): (&str, &str),
    input: &Payload,
    with_open: A,
) -> Result<Begun>
where
    A: Fn(&durably_db::Connection) -> durably_journal::Result<()> + Clone + Send + 'static,
{
    // Started only when another run of this process has the id, the rare case.
    let mut changes: Option<watch::Receiver<u64>> = None;
    loop {
        if let Some(changes) = &mut changes {
            changes.borrow_and_update();
        }
        let journal = runtime.journal();
        match journal.begin_execution(id, kind, name, input, with_open.clone()) {
            Err(durably_journal::Error::OpenRaced(_)) => {}
            begun => return Ok(begun?),
        }
        let changes = match &mut changes {
            Some(changes) => changes,
            None => changes.insert(runtime.changes()?),
        };
        tokio::select! {
            changed = changes.changed() => {
                changed.map_err(|_| Error::Watcher(std::io::Error::other("the watcher thread ended")))?;
            }
            () = tokio::time::sleep(BEGUN_HERE_RECHECK) => {}
        }
    }
}

/// The outcome of an execution `run` found already there: its result, awaited if it has not
/// ended.
async fn observe<O: DeserializeOwned>(
    runtime: &Runtime,
    kind: &str,
    record: ExecutionRecord,
) -> Result<O> {
    if record.kind != kind {
        return Err(Error::IdConflict {
            execution_id: record.execution_id,
            existing_kind: record.kind,
            kind: kind.to_owned(),
        });
    }
    runtime.handle(record.execution_id).result().await
}
