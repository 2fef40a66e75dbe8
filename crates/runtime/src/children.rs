//! Child executions: a workflow starts an execution of a registered kind
//! ([`WorkflowContext::start_child`]) and awaits its result durably
//! ([`WorkflowContext::child_result`]).
//!
//! - **Start.** Step `durably:child/<kind>` records the child's id, and its hook writes the
//!   child's rows (its execution, queued, and its `runtime_executions` row naming the parent
//!   and the step) in the transaction that records the step. So a parent step starts at most
//!   one child across any crash, and a replayed step names the same child again. The step is
//!   written behind: it and the child ride on the run's next write (an await always makes
//!   one), so starting many children costs one commit.
//! - **Id.** The child's id is derived from the parent's id and the start step's seq
//!   ([`child_execution_id`]; docs/design.md, "Child executions", has the test vectors).
//! - **End.** Every transaction that ends an execution runs [`settle`]: a child that ended
//!   (completed, failed, cancelled) sends its parent a message on topic
//!   `durably:child/<child-id>`, with the child's id as idempotency key, so it is delivered
//!   once whatever repeats the end's hook.
//! - **Await.** A receive on that topic (steps `durably:recv-deadline/…` and `durably:recv/…`,
//!   with no deadline): a parent whose child has not ended parks like any `recv`, and nothing
//!   holds it while the child runs. Then step `durably:child-result/<child-id>` records the
//!   child's output, or its failure or cancellation as the step's failure, so the answer
//!   replays.
//! - **Cancel.** A parent cancelled (or asked to stop) cancels its unfinished children in the
//!   same transaction, recursively: at once when nobody runs them, by a cancel request when a
//!   live process does.

use std::any::type_name;
use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use durably_db::Connection;
use durably_journal::lifecycle::pending_cancel;
use durably_journal::{
    Effect, ExecutionRecord, Status, StepError, StepKey, StepRef, StepState, Timing,
    execution_status,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::context::{Lease, WorkflowContext};
use crate::error::{Error, Result};
use crate::messages::deliver;
use crate::names::{self, NameKind};
use crate::options::{Deadline, StartOptions};
use crate::start::{StartRequest, Starting, start_in};
use crate::{payload, store};

/// The blake3 `derive_key` context of child ids. Changing it changes the id of every child a
/// resumed parent starts, which would start a second child after an upgrade: it is versioned
/// and frozen.
const CHILD_ID_CONTEXT: &str = "durably child execution v1";

/// The last instant the journal stores (9999-12-31T23:59:59Z): the deadline of a child's
/// await, which has none.
const AWAIT_FOREVER_UNIX_SECONDS: i64 = 253_402_300_799;

/// The most bytes of a failed child's error message its parent records; the whole error stays
/// in the child's own record.
pub const CHILD_ERROR_BYTES_MAX: usize = 4096;

/// The execution id of the child started by step `seq` of execution `parent`.
///
/// # Derivation (frozen: version 1)
///
/// ```text
/// msg = parent (16 bytes, as the UUID's bytes) ‖ u32_le(seq)
/// key = blake3::derive_key("durably child execution v1", msg)    // 32 bytes
/// b[0..6]  = parent[0..6]                                        // the parent's prefix
/// b[6..16] = key[0..10]
/// b[6] = (b[6] & 0x0f) | 0x80                                    // version 8 (custom)
/// b[8] = (b[8] & 0x3f) | 0x80                                    // RFC 9562 variant
/// id  = b as a UUID
/// ```
///
/// A child keeps its parent's first 48 bits: with the journal's time-ordered ids (UUIDv7,
/// whose first 48 bits are the start's millisecond), a parent's children sort next to it,
/// so their rows and steps go to the same few B-tree pages instead of pages all over the
/// file; the other 74 bits are the hash's. The version and variant bits are set as for the
/// scheduler's fire ids and the journal's idempotency keys. The test vectors are in
/// docs/design.md.
pub fn child_execution_id(parent: Uuid, seq: u32) -> Uuid {
    let mut message = [0_u8; 20];
    message[..16].copy_from_slice(parent.as_bytes());
    message[16..].copy_from_slice(&seq.to_le_bytes());
    let key = blake3::derive_key(CHILD_ID_CONTEXT, &message);
    let mut bytes = [0_u8; 16];
    bytes[..6].copy_from_slice(&parent.as_bytes()[..6]);
    bytes[6..].copy_from_slice(&key[..10]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The topic on which child `child` tells its parent that it ended.
pub fn child_topic(child: Uuid) -> String {
    format!("durably:child/{child}")
}

/// Options of [`WorkflowContext::start_child`]. The default: no queue, priority 0, the
/// latest version of the kind any runtime registered, no deadline, named after its kind.
#[derive(Debug, Clone, Default)]
pub struct ChildOptions {
    start: StartOptions,
    version: Option<u32>,
}

impl ChildOptions {
    /// Runs the child in `queue` (configured by a runtime on this journal), under the queue's
    /// limit; the parent's queue is not inherited.
    #[must_use]
    pub fn queue(mut self, queue: &str) -> Self {
        self.start = self.start.queue(queue);
        self
    }

    /// Its priority within its queue: larger runs first.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.start = self.start.priority(priority);
        self
    }

    /// Starts it at `version` of its kind, which some runtime must have registered.
    #[must_use]
    pub fn version(mut self, version: u32) -> Self {
        self.version = Some(version);
        self
    }

    /// Cancels the child with reason `timeout` if it has not ended by `deadline`, measured
    /// from when `start_child` is called.
    #[must_use]
    pub fn deadline(mut self, deadline: Deadline) -> Self {
        self.start = self.start.deadline(deadline);
        self
    }

    /// Names it for people (`durably ls`); the default is its kind.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.start = self.start.name(name);
        self
    }
}

/// A child execution started by [`WorkflowContext::start_child`], whose output decodes as
/// `O`: await it with [`WorkflowContext::child_result`] or [`ChildHandle::result`], once
/// (either takes the handle: the child's end is one message, which one await consumes).
pub struct ChildHandle<O> {
    child_id: Uuid,
    kind: String,
    /// `fn() -> O`: the handle produces an `O` but holds none.
    output: PhantomData<fn() -> O>,
}

impl<O> ChildHandle<O> {
    /// The child's execution id.
    pub fn id(&self) -> Uuid {
        self.child_id
    }

    /// The child's workflow kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

impl<O: DeserializeOwned> ChildHandle<O> {
    /// Awaits the child from its parent's workflow: [`WorkflowContext::child_result`].
    ///
    /// # Errors
    /// As [`WorkflowContext::child_result`].
    pub fn result(self, ctx: &WorkflowContext) -> impl Future<Output = Result<O>> + use<'_, O> {
        ctx.child_result(self)
    }
}

impl<O> fmt::Debug for ChildHandle<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildHandle")
            .field("child_id", &self.child_id)
            .field("kind", &self.kind)
            .field("output", &type_name::<O>())
            .finish()
    }
}

/// A start, reserved when it was called ([`WorkflowContext::start_child`]).
struct StartCall {
    lease: Lease,
    reserved: durably_journal::Reservation,
    hook: StartHook,
    /// The recorded child's id on replay, the derived one otherwise.
    child_id: Uuid,
    kind: String,
}

/// An await's three steps, reserved when it was called ([`WorkflowContext::child_result`]):
/// the deadline, the receive of the child's end, and the result.
struct AwaitCall {
    lease: Lease,
    child_id: Uuid,
    kind: String,
    steps: [durably_journal::Reservation; 3],
}

/// The recorded result of a start step.
#[derive(Debug, Serialize, Deserialize)]
struct ChildStarted {
    child_id: Uuid,
}

/// What a child tells its parent when it ends (the message on its topic): only its status;
/// the parent's result step reads the rest from the child's record.
#[derive(Debug, Serialize, Deserialize)]
struct ChildEnded {
    status: String,
}

/// How a failed or cancelled child is recorded, as the failure of its parent's result step.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChildEnd {
    /// The child failed with this error message (at most [`CHILD_ERROR_BYTES_MAX`] bytes).
    Failed(String),
    /// The child was cancelled for this reason.
    Cancelled(String),
}

impl WorkflowContext {
    /// Starts a child execution of workflow `kind` with `input`, placed as `options` say, and
    /// returns its handle at once; the child runs in whichever process serves its kind and
    /// queue. A step (`durably:child/<kind>`): the child's id is derived from this
    /// execution's id and the step's seq, and the child's rows commit with the step, so a
    /// resumed parent gets the same child back and never starts a second one. The step is
    /// written behind, with the run's next write (an await, or any step written at once):
    /// the child starts running from that commit on.
    ///
    /// # Errors
    /// Nothing is written on the first ones, checked when it is called (its seq is given back):
    /// - [`Error::InvalidName`] for a bad kind, queue or name, [`Error::InvalidOption`] for a
    ///   deadline not in the future;
    /// - [`Error::WrongType`] when this process registered `kind` with other input or output
    ///   types;
    /// - [`Error::UnknownKind`] when no runtime has ever registered `kind` (or `version` of
    ///   it), [`Error::UnknownQueue`];
    /// - [`Error::PayloadTooLarge`], [`Error::Json`] for the input;
    ///
    /// then [`Error::Cancelled`] and the journal's step errors, as for any step.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "options are built inline at the call; taking them by value keeps calls short"
    )]
    pub fn start_child<'a, I, O>(
        &'a self,
        kind: &str,
        input: &I,
        options: ChildOptions,
    ) -> impl Future<Output = Result<ChildHandle<O>>> + use<'a, I, O>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        let call = self.call_start::<I, O>(kind, input, &options);
        async move { self.run_start(call?).await }
    }

    /// The synchronous part of a start, done when it is called: the step's seq is reserved
    /// (so parallel calls take seqs in call order), the child's id is the recorded one or the
    /// derived one, and the request is checked and encoded. A refused request writes nothing
    /// and gives the seq back.
    fn call_start<I, O>(&self, kind: &str, input: &I, options: &ChildOptions) -> Result<StartCall>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        names::check(NameKind::Kind, kind)?;
        let (lease, reserved) = self.begin_step_unchecked(&format!("durably:child/{kind}"))?;
        // A fork copies its original's start steps: the child they name is the original's.
        let child_id = reserved.recorded_result::<ChildStarted>().map_or_else(
            || child_execution_id(self.id, reserved.seq()),
            |started| started.child_id,
        );
        let fresh = !reserved.replays();
        let hook = if fresh {
            match child_request::<I, O>(&self.waits.client, kind, child_id, input, options) {
                Ok(request) => start_hook(request, self.id),
                Err(refused) => {
                    // Nothing is written for a refused child: the next step takes its seq (or,
                    // behind a later reserved step, the handle halts, and the refusal is still
                    // what the caller needs to know).
                    let _ = reserved.give_back("the child was refused");
                    return Err(refused);
                }
            }
        } else {
            // A replayed step runs no hook.
            start_hook_replayed()
        };
        Ok(StartCall {
            lease,
            reserved,
            hook,
            child_id,
            kind: kind.to_owned(),
        })
    }

    /// Runs a start reserved by [`WorkflowContext::call_start`].
    async fn run_start<O>(&self, call: StartCall) -> Result<ChildHandle<O>> {
        let StartCall {
            lease,
            reserved,
            hook,
            child_id,
            kind,
        } = call;
        let fresh = !reserved.replays();
        let outcome = reserved
            .step_with(
                Effect::Idempotent,
                Timing::Deferred,
                move |_: StepKey| std::future::ready(Ok::<_, StepError>(ChildStarted { child_id })),
                hook,
            )
            .await;
        drop(lease);
        let started: ChildStarted = self.slot.remember(outcome)?;
        if fresh {
            // The step and the child's rows wait for the run's next write: a crash here loses
            // both, and the resumed parent starts the same child again.
            fail::fail_point!("runtime::after-child-start", |_| { std::process::abort() });
            self.waits.client.announce_change();
        }
        Ok(ChildHandle {
            child_id: started.child_id,
            kind,
            output: PhantomData,
        })
    }

    /// Waits for the child of `handle` to end and returns its output. While it runs, this
    /// execution waits as a `recv` does: a wait longer than the runtime's `park_after` parks
    /// it, and the child's end wakes it in any process serving its kind. The answer is
    /// recorded (steps `durably:recv-deadline/durably:child/<id>`, `durably:recv/…` and
    /// `durably:child-result/<id>`), so a resumed parent gets the same answer.
    ///
    /// # Errors
    /// [`Error::ChildFailed`] when the child failed, [`Error::ChildCancelled`] when it was
    /// cancelled (both recorded, so they replay); [`Error::OutputType`] when its output does
    /// not decode as `O`; then [`Error::Cancelled`] and the journal's step errors.
    pub fn child_result<O: DeserializeOwned>(
        &self,
        handle: ChildHandle<O>,
    ) -> impl Future<Output = Result<O>> + use<'_, O> {
        let call = self.call_await(handle.child_id, handle.kind);
        async move { self.run_await(call?).await }
    }

    /// The synchronous part of an await, done when it is called: its three steps are reserved
    /// together, in call order.
    fn call_await(&self, child_id: Uuid, kind: String) -> Result<AwaitCall> {
        let topic = child_topic(child_id);
        let (lease, deadline_step) =
            self.begin_step_unchecked(&format!("durably:recv-deadline/{topic}"))?;
        let recv_step = self
            .slot
            .remember(lease.reserve(&format!("durably:recv/{topic}")))?;
        let end_step = self
            .slot
            .remember(lease.reserve(&format!("durably:child-result/{child_id}")))?;
        Ok(AwaitCall {
            lease,
            child_id,
            kind,
            steps: [deadline_step, recv_step, end_step],
        })
    }

    /// Runs an await reserved by [`WorkflowContext::call_await`].
    async fn run_await<O: DeserializeOwned>(&self, call: AwaitCall) -> Result<O> {
        let AwaitCall {
            lease,
            child_id,
            kind,
            steps: [deadline_step, recv_step, end_step],
        } = call;
        let topic = child_topic(child_id);
        let forever = DateTime::<Utc>::from_timestamp(AWAIT_FOREVER_UNIX_SECONDS, 0)
            .ok_or_else(|| Error::InvalidOption("the last storable instant".to_owned()))?;
        let deadline = self
            .recv_deadline(&lease, deadline_step, &topic, (forever, 3))
            .await?;
        self.wait_briefly(&lease, recv_step.replays(), &topic)
            .await?;
        let received = self
            .receive::<ChildEnded>(&lease, recv_step, &topic, (deadline, 2), Timing::Deferred)
            .await?;
        if received.message_id.is_none() {
            return Err(Error::Journal(durably_journal::Error::Inconsistent(
                format!(
                    "the await of child {child_id} by execution {} timed out, but it has no deadline",
                    self.id
                ),
            )));
        }
        let output = self.child_end(end_step, child_id).await;
        drop(lease);
        match output {
            Ok(output) => serde_json::from_value(output).map_err(|source| Error::OutputType {
                execution_id: child_id,
                expected: type_name::<O>(),
                source,
            }),
            Err(Error::Journal(durably_journal::Error::StepFailed { error, .. })) => {
                Err(match serde_json::from_str(&error.message) {
                    Ok(ChildEnd::Failed(error)) => Error::ChildFailed {
                        child_id,
                        kind,
                        error,
                    },
                    Ok(ChildEnd::Cancelled(reason)) => Error::ChildCancelled {
                        child_id,
                        kind,
                        reason,
                    },
                    Err(_) => Error::Journal(durably_journal::Error::Inconsistent(format!(
                        "the result step of child {child_id} of execution {} records a failure \
                         that is not a child's end",
                        self.id
                    ))),
                })
            }
            Err(error) => Err(error),
        }
    }

    /// Starts a child ([`WorkflowContext::start_child`] with default options) and awaits it
    /// ([`WorkflowContext::child_result`]).
    ///
    /// # Errors
    /// As those two.
    pub fn child<'a, I, O>(
        &'a self,
        kind: &str,
        input: &I,
    ) -> impl Future<Output = Result<O>> + use<'a, I, O>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        // All four steps are reserved now, the start's and the await's, so that children
        // started in parallel keep their seqs in call order whatever order their starts finish.
        let calls = self
            .call_start::<I, O>(kind, input, &ChildOptions::default())
            .and_then(|start| {
                let awaiting = self.call_await(start.child_id, start.kind.clone())?;
                Ok((start, awaiting))
            });
        async move {
            let (start, awaiting) = calls?;
            let _: ChildHandle<O> = self.run_start(start).await?;
            self.run_await(awaiting).await
        }
    }

    /// Before an await that does not replay waits for a child that has not ended: writes what
    /// the run keeps pending (the starts of its children, written behind, among it: without
    /// this the child would not exist), then waits in memory up to the runtime's `park_after`
    /// for the child's message, as a short `recv` would. The receive after it then finds the
    /// message at once, or parks: a child that ends soon costs its parent no park and no
    /// replay.
    async fn wait_briefly(&self, execution: &Lease, replays: bool, topic: &str) -> Result<()> {
        let (client, id) = (self.waits.client.clone(), self.id);
        let look = || -> Result<Option<()>> {
            let found = client
                .journal()
                .read(|conn| store::first_pending_message(conn, id, topic))?;
            Ok(found.map(|_| ()))
        };
        let park_after = self.waits.park_after;
        if park_after.is_zero() || replays || look()?.is_some() {
            return Ok(());
        }
        let flushed = execution.flush().await;
        self.slot.remember(flushed)?;
        let clock = self.waits.clock.as_ref();
        let until = chrono::TimeDelta::from_std(park_after)
            .ok()
            .and_then(|after| durably_lock::Clock::now(clock).checked_add_signed(after));
        let signal = self.cancellation();
        crate::waiting::wait_for(&client, clock, until, Some(&signal), look).await?;
        Ok(())
    }

    /// The result step: records the ended child's output, or its end as the step's failure.
    async fn child_end(
        &self,
        reserved: durably_journal::Reservation,
        child_id: Uuid,
    ) -> Result<serde_json::Value> {
        let client = self.waits.client.clone();
        let outcome = reserved
            .step_with(
                Effect::Pure,
                Timing::Deferred,
                move |_: StepKey| {
                    std::future::ready(read_end(client.journal().get(child_id), child_id))
                },
                |_, _| Ok(()),
            )
            .await;
        self.slot.remember(outcome)
    }
}

/// The hook of a start step: the child's rows, with the step's transaction.
type StartHook = Box<dyn FnOnce(&Connection, StepRef) -> durably_journal::Result<()> + Send>;

/// The start request of a child, checked and encoded before anything is written.
fn child_request<I, O>(
    client: &crate::Client,
    kind: &str,
    child_id: Uuid,
    input: &I,
    options: &ChildOptions,
) -> Result<StartRequest>
where
    I: Serialize + 'static,
    O: DeserializeOwned + 'static,
{
    let deadline_at = options.start.checked(client.now())?;
    if let Some(queue) = &options.start.queue
        && client
            .journal()
            .read(|conn| store::stored_queue(conn, queue))?
            .is_none()
    {
        return Err(Error::UnknownQueue {
            queue: queue.clone(),
        });
    }
    let local_version = match (options.version, client.registry().latest(kind)) {
        (Some(version), local) => {
            if let Some(workflow) = client.registry().get(kind, version) {
                workflow.check_types::<I, O>(kind)?;
            } else if local.is_none()
                && !client
                    .journal()
                    .read(|conn| store::kind_version_known(conn, kind, version))?
            {
                return Err(Error::UnknownKind {
                    kind: format!("{kind} (version {version})"),
                });
            }
            Some(version)
        }
        (None, Some((version, workflow))) => {
            workflow.check_types::<I, O>(kind)?;
            Some(version)
        }
        (None, None) => {
            if client
                .journal()
                .read(|conn| store::latest_kind_version(conn, kind))?
                .is_none()
            {
                return Err(Error::UnknownKind {
                    kind: kind.to_owned(),
                });
            }
            None
        }
    };
    let input = payload::encode(
        input,
        &format!("the input of child execution {child_id}"),
        client.journal(),
    )?;
    Ok(StartRequest::new(
        kind,
        child_id,
        input,
        options.start.clone(),
        deadline_at,
        local_version,
    ))
}

/// The start step's hook: the child's rows and its link to step `seq` of `parent`, in the
/// transaction that records the step (which may be a later write of the run: the step is
/// deferred). The start's checks passed before the step ran, and kinds and queues are never
/// removed, so a refusal here means the file changed under the runtime: an error that halts
/// the run, which is resumed under the failure accounting.
fn start_hook(request: StartRequest, parent: Uuid) -> StartHook {
    Box::new(move |conn, step| {
        let child = child_execution_id(parent, step.seq);
        if step.state != StepState::Completed || child != request.id() {
            return Err(durably_journal::Error::Inconsistent(format!(
                "the start step {} of execution {parent} derives child {child}, not {}",
                step.seq,
                request.id()
            )));
        }
        match start_in(conn, &request, step.now)? {
            Starting::Execution(_, crate::StartOutcome::New) => {
                store::set_parent(conn, child, parent, step.seq)
            }
            // The id is derived from (parent, seq), and the step that would write it is not
            // recorded: only a collision of derived ids finds it.
            Starting::Execution(_, _) => Err(durably_journal::Error::Inconsistent(format!(
                "child {child} of step {} of execution {parent} exists already",
                step.seq
            ))),
            Starting::Refused(error) => Err(durably_journal::Error::Inconsistent(format!(
                "the start of child {child} of execution {parent} was refused after its checks \
                 passed: {error}"
            ))),
        }
    })
}

/// The hook of a replayed start step, which never runs.
fn start_hook_replayed() -> StartHook {
    Box::new(|_, _| Ok(()))
}

/// The result step's closure: the ended child's output, or its end as a recorded failure. A
/// read error is retried.
fn read_end(
    record: durably_journal::Result<Option<ExecutionRecord>>,
    child_id: Uuid,
) -> std::result::Result<serde_json::Value, StepError> {
    let record = match record {
        Ok(Some(record)) => record,
        Ok(None) => {
            return Err(StepError::fatal(format!(
                "child {child_id} no longer exists (removed by retention?)"
            )));
        }
        Err(error) => return Err(StepError::retryable(error.to_string())),
    };
    let end = match record.status {
        Status::Completed => {
            let output = record.output.map(|output| output.to_value()).transpose();
            return output
                .map(|output| output.unwrap_or(serde_json::Value::Null))
                .map_err(|error| StepError::retryable(error.to_string()));
        }
        Status::Cancelled => {
            let error = record.error.and_then(|error| error.to_value().ok());
            let reason = error
                .as_ref()
                .and_then(|error| error.get("cancelled"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or("no reason given");
            ChildEnd::Cancelled(reason.to_owned())
        }
        // Failed; or resumed since it ended and told its parent, which keeps that answer.
        _ => {
            let error = record.error.and_then(|error| error.to_value().ok());
            let message = match &error {
                Some(error) => error
                    .get("message")
                    .and_then(serde_json::Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_owned),
                None => format!("it ended and is {} now", record.status),
            };
            ChildEnd::Failed(truncated(message, CHILD_ERROR_BYTES_MAX))
        }
    };
    Err(StepError::fatal(json!(end).to_string()))
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncated(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// What the transaction that ended execution `id`, or asked it to stop, writes for its family,
/// at `now`: a child that ended tells its parent (a message on its topic, delivered once by
/// its idempotency key, waking a parked parent); an execution cancelled, or asked to stop,
/// cancels its unfinished children, recursively: at once when nobody runs them, by a cancel
/// request when a live process does. Runs in every transaction that ends an execution or
/// asks one to stop.
///
/// # Errors
/// A storage error.
pub(crate) fn settle(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
) -> durably_journal::Result<()> {
    let mut settling = vec![id];
    while let Some(id) = settling.pop() {
        let Some(status) = execution_status(conn, id)? else {
            continue;
        };
        if status.is_final() {
            tell_parent(conn, id, status, now)?;
        }
        let stopping = status == Status::Cancelled
            || (status == Status::Running && pending_cancel(conn, id)?.is_some());
        if !stopping {
            continue;
        }
        let reason = format!("its parent {id} was cancelled");
        for child in store::children_of(conn, id)? {
            match execution_status(conn, child)? {
                Some(status) if !status.is_final() => {
                    crate::deadlines::stop(conn, child, now, &reason)?;
                    settling.push(child);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Tells the parent of `child`, if it has one, that `child` ended `status`. A parent that has
/// ended is told nothing: nobody would receive it.
fn tell_parent(
    conn: &Connection,
    child: Uuid,
    status: Status,
    now: DateTime<Utc>,
) -> durably_journal::Result<()> {
    let Some((parent, _)) = store::parent_of(conn, child)? else {
        return Ok(());
    };
    tell(conn, parent, child, status, now)
}

/// The first child that `original`'s steps below `before_seq` started and that has not ended,
/// as (the start step's seq, the child): a fork copying that start would await an end only
/// `original` is told of.
///
/// # Errors
/// A storage error.
pub(crate) fn unended_child_below(
    conn: &Connection,
    original: Uuid,
    before_seq: u32,
) -> durably_journal::Result<Option<(u32, Uuid)>> {
    for (seq, child) in store::children_below(conn, original, before_seq)? {
        if execution_status(conn, child)?.is_some_and(|status| !status.is_final()) {
            return Ok(Some((seq, child)));
        }
    }
    Ok(None)
}

/// Tells fork `fork` of `original`, copied below `before_seq`, of the end of each child whose
/// start step it copied and whose end `original` did not consume below `before_seq`: the
/// fork's await of it comes at or after `before_seq`. Every such child has ended
/// ([`unended_child_below`] refused the fork otherwise); one removed by retention is left to
/// the await, which records it as a failure.
///
/// # Errors
/// A storage error.
pub(crate) fn tell_fork(
    conn: &Connection,
    (original, fork): (Uuid, Uuid),
    before_seq: u32,
    now: DateTime<Utc>,
) -> durably_journal::Result<()> {
    for (_, child) in store::children_below(conn, original, before_seq)? {
        if store::end_consumed_below(conn, original, child, before_seq)? {
            continue;
        }
        if let Some(status) = execution_status(conn, child)? {
            tell(conn, fork, child, status, now)?;
        }
    }
    Ok(())
}

/// Delivers `parent` the end of `child` (`status`) on the child's topic, keyed by its id.
fn tell(
    conn: &Connection,
    parent: Uuid,
    child: Uuid,
    status: Status,
    now: DateTime<Utc>,
) -> durably_journal::Result<()> {
    let message = json!(ChildEnded {
        status: status.as_str().to_owned()
    })
    .to_string();
    let key = child.to_string();
    // A refusal (the parent ended, or was removed) writes nothing, and there is nobody to tell.
    deliver(conn, parent, &child_topic(child), &message, Some(&key), now)?;
    Ok(())
}

/// Whether execution `id` is a child, for the failpoint after a child's end.
#[cfg(feature = "failpoints")]
pub(crate) fn is_child(client: &crate::Client, id: Uuid) -> bool {
    client
        .journal()
        .read(|conn| store::parent_of(conn, id))
        .is_ok_and(|parent| parent.is_some())
}
