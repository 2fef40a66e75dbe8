//! [`Client::start`]: a new execution of a workflow kind, durable when the call returns, or
//! the existing execution with that id.

use chrono::{DateTime, Utc};
use durably_db::{Connection, Dialect};
use durably_journal::lifecycle::{Inserted, NewExecution, insert_execution};
use durably_journal::{Payload, execution_status};
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::handle::WorkflowHandle;
use crate::names::{self, NameKind};
use crate::options::{OnDuplicate, StartOptions};
use crate::payload;
use crate::store::{self, Started};

/// Everything a start transaction needs, checked and encoded before it runs.
pub(crate) struct StartRequest {
    id: Uuid,
    kind: String,
    name: String,
    input: Payload,
    queue: Option<String>,
    priority: i32,
    not_before: Option<DateTime<Utc>>,
    deadline_at: Option<DateTime<Utc>>,
    dedup: Option<(String, OnDuplicate)>,
    /// The highest version of the kind registered in this process, if any.
    local_version: Option<u32>,
    allow_unregistered_kind: bool,
}

/// What a start transaction decided. A refusal has written nothing.
pub(crate) enum Starting {
    /// The execution the start names: the new one, or the one that already existed.
    Execution(Uuid, StartOutcome),
    Refused(Error),
}

/// Whether a start created its execution ([`Client::start_with_outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartOutcome {
    /// The start created the execution, in its transaction.
    New,
    /// The execution existed already (the same id, or the unfinished holder of the
    /// deduplication key with [`OnDuplicate::ReturnExisting`]); nothing was written.
    Existing,
}

impl Client {
    /// Starts an execution of workflow `kind` with `input`, under id `id`, placed as
    /// `options` says; it is durable when this returns. The execution is `queued`: a runtime
    /// serving the kind claims it when its queue has room.
    ///
    /// Start is idempotent by id: if an execution of `kind` already has `id`, this returns a
    /// handle on it and writes nothing (its input is not compared, so a retry that rebuilds
    /// the input does not fail).
    ///
    /// # Errors
    /// Nothing is written on any error:
    /// - [`Error::InvalidName`] for a bad kind, queue, deduplication key or name;
    ///   [`Error::InvalidOption`] for a deadline not in the future;
    /// - [`Error::WrongType`] when this process registered `kind` with other input or output
    ///   types;
    /// - [`Error::UnknownKind`] when no runtime has registered `kind` (unless
    ///   [`StartOptions::allow_unregistered_kind`]), [`Error::UnknownQueue`];
    /// - [`Error::IdConflict`] when `id` is an execution of another kind;
    /// - [`Error::Duplicate`] when the deduplication key is taken and the options say
    ///   [`OnDuplicate::Reject`];
    /// - [`Error::PayloadTooLarge`], [`Error::Json`] for the input; [`Error::Journal`].
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
        let (handle, _) = self.start_with_outcome(kind, id, input, options).await?;
        Ok(handle)
    }

    /// As [`Client::start`], and says whether this call created the execution or found it
    /// (decided in the start's own transaction, so two racing starts of one id never both
    /// say [`StartOutcome::New`]).
    ///
    /// # Errors
    /// As [`Client::start`].
    pub async fn start_with_outcome<I, O>(
        &self,
        kind: &str,
        id: Uuid,
        input: &I,
        options: StartOptions,
    ) -> Result<(WorkflowHandle<O>, StartOutcome)>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        if let Some((_, workflow)) = self.registry().latest(kind) {
            workflow.check_types::<I, O>(kind)?;
        }
        let prepared = self.prepare_start(kind, id, input, options)?;
        let starting = self
            .journal()
            .write(move |conn| prepared.start_in(conn))
            .await?;
        let (id, outcome) = starting?;
        Ok((self.handle(id), outcome))
    }

    /// Checks and encodes a start as [`Client::start`] does, without writing anything, for a
    /// caller that commits it inside its own writer transaction ([`PreparedStart::start_in`])
    /// together with rows of its own, so both commit or neither does. Only the input type is
    /// checked against a kind registered in this process; the caller reads no output.
    ///
    /// # Errors
    /// As [`Client::start`], except the errors its transaction decides (an unknown kind or
    /// queue, an id conflict, a duplicate), which [`PreparedStart::start_in`] returns.
    pub fn prepare_start<I>(
        &self,
        kind: &str,
        id: Uuid,
        input: &I,
        options: StartOptions,
    ) -> Result<PreparedStart>
    where
        I: Serialize + 'static,
    {
        names::check(NameKind::Kind, kind)?;
        let now = self.now();
        let deadline_at = options.checked(now)?;
        let local_version = match self.registry().latest(kind) {
            Some((version, workflow)) => {
                workflow.check_input_type::<I>(kind)?;
                Some(version)
            }
            None => None,
        };
        let input = payload::encode(
            input,
            &format!("the input of execution {id}"),
            self.journal(),
        )?;
        Ok(PreparedStart {
            request: StartRequest::new(kind, id, input, options, deadline_at, local_version),
            now,
        })
    }
}

/// A start checked and encoded by [`Client::prepare_start`], to commit in a writer
/// transaction of the caller's.
pub struct PreparedStart {
    request: StartRequest,
    /// The instant the start was prepared at: its rows are stamped with it.
    now: DateTime<Utc>,
}

impl std::fmt::Debug for PreparedStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedStart")
            .field("id", &self.request.id())
            .finish_non_exhaustive()
    }
}

impl PreparedStart {
    /// The execution id this start names.
    pub fn id(&self) -> Uuid {
        self.request.id()
    }

    /// Runs the start on `conn`, inside the caller's transaction (a connection
    /// `Journal::write` hands out): creates the execution, or finds the one with this id.
    /// A refusal (the inner error) has written nothing, and the caller decides whether to
    /// commit its own writes.
    ///
    /// # Errors
    /// The outer error is a storage error, for the caller's transaction to fail with; the
    /// inner one a refusal, as [`Client::start`] documents.
    pub fn start_in(
        &self,
        conn: &Connection,
    ) -> durably_journal::Result<Result<(Uuid, StartOutcome)>> {
        Ok(match start_in(conn, &self.request, self.now)? {
            Starting::Execution(id, outcome) => Ok((id, outcome)),
            Starting::Refused(error) => Err(error),
        })
    }
}

impl StartRequest {
    /// The request to start execution `id` of `kind` with `input` as `options` say, its
    /// deadline at `deadline_at`, at version `local_version` (else the latest any runtime
    /// registered).
    pub(crate) fn new(
        kind: &str,
        id: Uuid,
        input: Payload,
        options: StartOptions,
        deadline_at: Option<DateTime<Utc>>,
        local_version: Option<u32>,
    ) -> Self {
        Self {
            id,
            kind: kind.to_owned(),
            name: options.name.unwrap_or_else(|| kind.to_owned()),
            input,
            queue: options.queue,
            priority: options.priority,
            not_before: options.not_before,
            deadline_at,
            dedup: options.dedup,
            local_version,
            allow_unregistered_kind: options.allow_unregistered_kind,
        }
    }

    /// The execution it starts.
    pub(crate) fn id(&self) -> Uuid {
        self.id
    }
}

/// How many times a start on PostgreSQL looks at its deduplication key again after another
/// host took the key between the look and the insert. Each retry follows another start's
/// commit of the key, so more than a few in a row means the rows contradict the look.
const DEDUP_RACES_MAX: u32 = 8;

/// The start transaction. Every refusal returns before the first write.
///
/// On PostgreSQL a start with a deduplication key runs in a savepoint: when another host
/// commits the same key between this start's look at the key and its insert of it, this
/// start's rows are rolled back to the savepoint and the key is looked at again, now held
/// (the start answers as a duplicate), or already freed. SQLite's single writer makes the
/// look and the insert atomic.
pub(crate) fn start_in(
    conn: &Connection,
    request: &StartRequest,
    now: DateTime<Utc>,
) -> durably_journal::Result<Starting> {
    if request.dedup.is_none() || conn.dialect() == Dialect::Sqlite {
        return start_once(conn, request, now)?.ok_or_else(|| dedup_raced(request));
    }
    let run = |sql: &str| conn.prepare_cached(sql)?.execute([]).map(drop);
    for _ in 0..DEDUP_RACES_MAX {
        run("SAVEPOINT durably_start_dedup")?;
        if let Some(starting) = start_once(conn, request, now)? {
            run("RELEASE SAVEPOINT durably_start_dedup")?;
            return Ok(starting);
        }
        run("ROLLBACK TO SAVEPOINT durably_start_dedup")?;
        run("RELEASE SAVEPOINT durably_start_dedup")?;
    }
    Err(dedup_raced(request))
}

/// The error of a start whose deduplication key stayed taken by inserts it could not see.
fn dedup_raced(request: &StartRequest) -> durably_journal::Error {
    durably_journal::Error::Inconsistent(format!(
        "execution {} could not take its deduplication key in queue {:?}: another execution \
         held it at each insert, yet not at the look before",
        request.id,
        request.queue.as_deref().unwrap_or("")
    ))
}

/// One attempt at [`start_in`]; `None` when the deduplication key was taken by another start
/// after this one looked at it (the attempt's rows must be rolled back).
fn start_once(
    conn: &Connection,
    request: &StartRequest,
    now: DateTime<Utc>,
) -> durably_journal::Result<Option<Starting>> {
    if let Some(queue) = &request.queue
        && store::stored_queue(conn, queue)?.is_none()
    {
        return Ok(Some(Starting::Refused(Error::UnknownQueue {
            queue: queue.clone(),
        })));
    }
    let version = match request.local_version {
        Some(version) => version,
        None => match store::latest_kind_version(conn, &request.kind)? {
            Some(version) => version,
            None if request.allow_unregistered_kind => 1,
            None => {
                return Ok(Some(Starting::Refused(Error::UnknownKind {
                    kind: request.kind.clone(),
                })));
            }
        },
    };
    let dedup_queue = request.queue.as_deref().unwrap_or("");
    let mut stale_dedup = false;
    if let Some((key, on_duplicate)) = &request.dedup
        && let Some(holder) = store::dedup_holder(conn, dedup_queue, key)?
        && holder != request.id
    {
        match execution_status(conn, holder)? {
            Some(status) if !status.is_final() => {
                return Ok(Some(match on_duplicate {
                    OnDuplicate::ReturnExisting => {
                        Starting::Execution(holder, StartOutcome::Existing)
                    }
                    OnDuplicate::Reject => Starting::Refused(Error::Duplicate {
                        queue: dedup_queue.to_owned(),
                        key: key.clone(),
                        existing: holder,
                    }),
                }));
            }
            // The holder has ended (or was removed): the key is free again.
            _ => stale_dedup = true,
        }
    }
    let inserted = insert_execution(
        conn,
        &NewExecution {
            id: request.id,
            kind: &request.kind,
            name: &request.name,
            input: &request.input,
            queue: request.queue.as_deref(),
            priority: i64::from(request.priority),
            due_at: request.not_before.filter(|at| *at > now),
            detail: None,
        },
        now,
    )?;
    match inserted {
        Inserted::New => {}
        Inserted::Exists { kind, .. } if kind == request.kind => {
            return Ok(Some(Starting::Execution(
                request.id,
                StartOutcome::Existing,
            )));
        }
        Inserted::Exists { kind, .. } => {
            return Ok(Some(Starting::Refused(Error::IdConflict {
                execution_id: request.id,
                existing_kind: kind,
                kind: request.kind.clone(),
            })));
        }
    }
    let dedup = request
        .dedup
        .as_ref()
        .map(|(key, _)| (dedup_queue, key.as_str()));
    if let (true, Some((queue, key))) = (stale_dedup, dedup) {
        store::delete_dedup(conn, queue, key)?;
    }
    let took_key = store::insert_started(
        conn,
        &Started {
            execution_id: request.id,
            version,
            deadline_at: request.deadline_at,
            dedup,
        },
    )?;
    Ok(took_key.then_some(Starting::Execution(request.id, StartOutcome::New)))
}
