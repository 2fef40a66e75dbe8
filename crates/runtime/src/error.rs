//! The one error type of this crate.
//!
//! Most variants come from what the caller supplied (a name, a kind, a type, a receiver), so
//! they are fatal: the same call fails the same way, and nothing was written. [`Error::Journal`]
//! wraps the journal's errors, some of which are transient ([`Error::is_retryable`]). Each
//! message says what happened, with the ids and names involved; what to do about it is the
//! caller's to say (the `durably` CLI adds it to the messages it prints).

use durably_journal::{Payload, Status};
use uuid::Uuid;

/// What went wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A kind, topic or key was empty, too long or held a control character; nothing was
    /// written.
    #[error("invalid {what} {name:?}: {reason}")]
    InvalidName {
        /// What the name is (`topic`, `event key`, ...).
        what: &'static str,
        /// The rejected name, cut to its first 64 characters.
        name: String,
        /// Which rule it broke.
        reason: String,
    },

    /// A workflow registration or runtime setting is invalid.
    #[error("invalid runtime configuration: {0}")]
    InvalidConfig(String),

    /// A kind is registered with another input or output type than the call uses; nothing was
    /// written.
    #[error("workflow kind {kind:?} takes {what} {expected}, but the call uses {found}")]
    WrongType {
        /// The workflow kind.
        kind: String,
        /// `input` or `output`.
        what: &'static str,
        /// The registered type.
        expected: &'static str,
        /// The type of the call.
        found: &'static str,
    },

    /// A workflow kind that no process has registered was started; nothing was written.
    #[error("unknown workflow kind {kind:?}: no process on this journal has registered it")]
    UnknownKind {
        /// The kind.
        kind: String,
    },

    /// [`crate::Runtime::run`] was asked for a kind this process has not registered: `run`
    /// runs the workflow in the caller's task. Nothing was written.
    #[error("workflow kind {kind:?} is not registered in this process, so it cannot run here")]
    KindNotRegisteredHere {
        /// The kind.
        kind: String,
    },

    /// A [`crate::Runtime::run`] stopped before its first write (a step's result could not be
    /// encoded, the journal could not be written): nothing was written.
    #[error("the run of execution {execution_id} stopped before anything was written: {reason}")]
    RunStopped {
        /// The execution.
        execution_id: Uuid,
        /// Why it stopped.
        reason: String,
    },

    /// A start named an id that an execution of another kind already has; nothing was
    /// written.
    #[error("execution {execution_id} exists with kind {existing_kind:?}, not {kind:?}")]
    IdConflict {
        /// The id.
        execution_id: Uuid,
        /// The kind of the existing execution.
        existing_kind: String,
        /// The kind the start asked for.
        kind: String,
    },

    /// A start named a queue that no runtime has configured; nothing was written.
    #[error("unknown queue {queue:?}: no runtime on this journal has configured it")]
    UnknownQueue {
        /// The queue.
        queue: String,
    },

    /// A start's deduplication key names an unfinished execution and the start asked to be
    /// refused then; nothing was written.
    #[error("deduplication key {key:?} of queue {queue:?} is taken by execution {existing}")]
    Duplicate {
        /// The queue (`""` for none).
        queue: String,
        /// The key.
        key: String,
        /// The unfinished execution that holds the key.
        existing: Uuid,
    },

    /// A start or resume option cannot be honoured (a deadline already past, a time beyond
    /// what the journal stores); nothing was written.
    #[error("invalid option: {0}")]
    InvalidOption(String),

    /// A payload (a message, an input, an event value) is larger than the journal's cap;
    /// nothing was written.
    #[error(
        "{what} is {bytes} bytes, over the journal's {max} byte payload cap; nothing was written"
    )]
    PayloadTooLarge {
        /// Which payload.
        what: String,
        /// Its size in bytes of JSON.
        bytes: usize,
        /// The journal's cap ([`durably_journal::Journal::payload_bytes_max`]).
        max: usize,
    },

    /// A value could not be turned into JSON, or stored JSON into the caller's type.
    #[error("cannot convert {what} to or from JSON: {source}")]
    Json {
        /// Which value.
        what: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },

    /// No execution has this id.
    #[error("execution {0} does not exist")]
    NotFound(Uuid),

    /// A message was sent to an id no execution has; nothing was written.
    #[error("cannot send to execution {execution_id}: it does not exist")]
    ReceiverNotFound {
        /// The id sent to.
        execution_id: Uuid,
    },

    /// A message was sent to an execution that has ended, so no step could ever receive it;
    /// nothing was written.
    #[error("cannot send to execution {execution_id}: it has ended ({status})")]
    ReceiverFinished {
        /// The receiver.
        execution_id: Uuid,
        /// Its final status.
        status: Status,
    },

    /// The execution was not started through the runtime (a program drives it by hand), so
    /// nothing in it receives messages; nothing was written.
    #[error(
        "execution {execution_id} was not started through the runtime, so it cannot receive \
         messages"
    )]
    NotRuntimeExecution {
        /// The execution.
        execution_id: Uuid,
    },

    /// A send reused an idempotency key of an earlier message to the same receiver with
    /// another payload; nothing was written.
    #[error(
        "idempotency key {key:?} was already used for message {message_id} to execution \
         {execution_id}, with another payload"
    )]
    IdempotencyKeyReused {
        /// The receiver.
        execution_id: Uuid,
        /// The reused key.
        key: String,
        /// The message first sent with it.
        message_id: i64,
    },

    /// The thread that watches the file for other processes' commits could not be started.
    #[error("cannot start the runtime's change watcher thread: {0}")]
    Watcher(#[source] std::io::Error),

    /// The execution failed: its workflow returned an error, or a program failed it.
    #[error("execution {execution_id} failed")]
    WorkflowFailed {
        /// The execution.
        execution_id: Uuid,
        /// The error it recorded, as JSON (`None` only for a damaged row). Not shown in the
        /// message: it may hold payload contents.
        error: Option<Payload>,
    },

    /// The execution was cancelled, or (returned by a step) its run was asked to stop: the
    /// step did not run, and the run ends `cancelled` whatever the workflow returns.
    #[error("execution {execution_id} was cancelled: {reason}")]
    Cancelled {
        /// The execution.
        execution_id: Uuid,
        /// The reason recorded with the cancellation.
        reason: String,
    },

    /// A child execution a workflow awaited failed; its error message (at most
    /// [`crate::CHILD_ERROR_BYTES_MAX`] bytes) is recorded in the parent, so the parent gets
    /// the same answer on every replay. The whole error is the child's own record.
    #[error("child execution {child_id} ({kind:?}) failed: {error}")]
    ChildFailed {
        /// The child.
        child_id: Uuid,
        /// Its workflow kind.
        kind: String,
        /// Its error's message.
        error: String,
    },

    /// A child execution a workflow awaited was cancelled (recorded in the parent, as
    /// [`Error::ChildFailed`]).
    #[error("child execution {child_id} ({kind:?}) was cancelled: {reason}")]
    ChildCancelled {
        /// The child.
        child_id: Uuid,
        /// Its workflow kind.
        kind: String,
        /// The reason recorded with its cancellation.
        reason: String,
    },

    /// An execution's output does not decode as the type its handle expects; the journal is
    /// untouched.
    #[error("the output of execution {execution_id} does not decode as {expected}: {source}")]
    OutputType {
        /// The execution.
        execution_id: Uuid,
        /// The handle's output type.
        expected: &'static str,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },

    /// A resume found the execution in a status it does not move (only `stuck`, `cancelled`
    /// and `failed` by a step timeout go back to their queue); nothing was written.
    #[error(
        "execution {execution_id} is {status}; only a stuck or cancelled execution, or one that \
         failed because a step timed out, can be resumed"
    )]
    NotResumable {
        /// The execution.
        execution_id: Uuid,
        /// Its status.
        status: Status,
    },

    /// A fork was refused ([`crate::Client::fork`]); nothing was written.
    #[error("cannot fork execution {execution_id}: {refusal}")]
    ForkRefused {
        /// The execution asked to be forked.
        execution_id: Uuid,
        /// Why it was refused.
        refusal: crate::ForkRefusal,
    },

    /// A cancel found the execution already ended; nothing was written.
    #[error("execution {execution_id} has already ended ({status}); nothing was cancelled")]
    AlreadyEnded {
        /// The execution.
        execution_id: Uuid,
        /// Its final status.
        status: Status,
    },

    /// A step ran past its timeout and was dropped ([`crate::StepBuilder::timeout`]); the run
    /// ends as that says.
    #[error(
        "step {seq} ({step:?}) of execution {execution_id} timed out after {} ms",
        after.as_millis()
    )]
    StepTimedOut {
        /// The execution.
        execution_id: Uuid,
        /// The step's sequence number.
        seq: u32,
        /// The step's name.
        step: String,
        /// Its timeout.
        after: std::time::Duration,
    },

    /// A step was called on a context whose workflow had already returned (from a future the
    /// workflow spawned and left running); nothing was written.
    #[error("execution {execution_id} has ended: a step was called after its workflow returned")]
    StepAfterEnd {
        /// The execution.
        execution_id: Uuid,
    },

    /// An error from the journal: storage, locks, or a stored value that does not parse.
    #[error(transparent)]
    Journal(#[from] durably_journal::Error),
}

impl Error {
    /// Whether retrying the same call later can succeed without anyone changing anything: only
    /// some journal errors (a busy file, a lock held by a live process) are.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Journal(error) => error.is_retryable(),
            _ => false,
        }
    }
}

/// The error a workflow function returns: a message for people and optional JSON details.
/// It is recorded as the execution's error and returned by its handle's
/// [`crate::WorkflowHandle::result`] as [`Error::WorkflowFailed`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct WorkflowError {
    /// What went wrong.
    pub message: String,
    /// Structured details, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl WorkflowError {
    /// An error with `message` and no details.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            details: None,
        }
    }
}

/// So `?` on a runtime call inside a workflow ends the workflow with that error.
impl From<Error> for WorkflowError {
    fn from(error: Error) -> Self {
        Self::new(error.to_string())
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
