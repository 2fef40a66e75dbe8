//! [`Client`]: what any process can do with the runtime's executions without running them:
//! send them messages and read the events they publish.

use std::sync::{Arc, Mutex, PoisonError};

use durably_journal::Journal;
use tokio::sync::watch;
use uuid::Uuid;

use crate::clock::{Clock, SystemClock};
use crate::error::Result;
use crate::handle::WorkflowHandle;
use crate::registry::Registry;
use crate::telemetry::SpanParents;
use crate::{store, watcher};

/// A handle on the runtime's side of a journal, for processes that start, message and observe
/// executions. Cheap to clone: clones share the journal's writer and read pool, and one
/// watcher thread, started by the first wait.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    journal: Journal,
    /// The workflows this process runs: a start of one of their kinds is type-checked. Empty
    /// for a client built with [`Client::new`].
    registry: Registry,
    /// What waits are measured on: the runtime's clock, or the system clock for a client
    /// built with [`Client::new`].
    clock: Arc<dyn Clock>,
    /// The watcher's change count, once a wait has started it, and its sender, through which
    /// this process announces its own changes at once. Holding the receiver keeps the watcher
    /// running for as long as the client lives.
    changes: Mutex<Option<(watch::Sender<u64>, watch::Receiver<u64>)>>,
    /// Spans the next runs of executions here nest under ([`Client::set_parent_span`]).
    span_parents: SpanParents,
}

/// What [`Client::send`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOutcome {
    /// The message was stored for the receiver, as message `message_id`.
    Sent {
        /// The message's id: its place in arrival order.
        message_id: i64,
    },
    /// A message with the same idempotency key and the same payload was sent before; nothing
    /// was written.
    AlreadySent {
        /// The id of the message sent before.
        message_id: i64,
    },
}

impl Client {
    /// A client on `journal`: brings the runtime's tables and views in its file up to date
    /// (owner `runtime` in `schema_versions`).
    ///
    /// # Errors
    /// [`durably_journal::Error::ExtensionSchemaTooNew`] (as [`Error::Journal`]) when a newer
    /// build of the runtime migrated the file, or a storage error.
    pub async fn new(journal: Journal) -> Result<Self> {
        Self::with_registry(journal, Registry::default(), Arc::new(SystemClock)).await
    }

    /// A client that type-checks starts of `registry`'s kinds and waits on `clock`.
    pub(crate) async fn with_registry(
        journal: Journal,
        registry: Registry,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        journal.migrate_extension(&store::SCHEMA).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                journal,
                registry,
                clock,
                changes: Mutex::new(None),
                span_parents: SpanParents::default(),
            }),
        })
    }

    /// The clock this client's waits are measured on.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Makes `span` the parent of the `durably.execution` span of the next run of execution
    /// `id`, of `kind`, that this process claims (a scheduler's `durably.fire` span, so that a
    /// fire's run nests under it). The span stays open until that run begins. It is kept only
    /// when this process runs `kind`, at most [`crate::telemetry::SPAN_PARENTS_MAX`] are kept
    /// (the oldest forgotten first), and a disabled span (no subscriber wants it) is not kept.
    pub fn set_parent_span(&self, id: Uuid, kind: &str, span: tracing::Span) {
        if self.inner.registry.latest(kind).is_some() {
            self.inner.span_parents.keep(id, span);
        }
    }

    /// Takes the span [`Client::set_parent_span`] kept for execution `id`.
    pub(crate) fn take_parent_span(&self, id: Uuid) -> Option<tracing::Span> {
        self.inner.span_parents.take(id)
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Now, on the journal's clock: the time every row the runtime writes is stamped with.
    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        durably_lock::Clock::now(self.journal().locker().judge().clock().as_ref())
    }

    /// The journal this client works on.
    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// A handle on execution `id`, whose output decodes as `O`. Reads nothing: the handle's
    /// calls report an id no execution has.
    pub fn handle<O>(&self, id: Uuid) -> WorkflowHandle<O> {
        WorkflowHandle::new(self.clone(), id)
    }

    /// A receiver of the watcher's change count, starting the watcher on first use.
    pub(crate) fn changes(&self) -> Result<watch::Receiver<u64>> {
        let mut changes = self
            .inner
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, receiver)) = changes.as_ref() {
            return Ok(receiver.clone());
        }
        let (sender, receiver) = watcher::start(self.journal())?;
        *changes = Some((sender, receiver.clone()));
        Ok(receiver)
    }

    /// Tells this client's waiters at once that this process has committed a change they may
    /// wait for (a message, an event, a wake-up), instead of leaving it to the watcher's next
    /// poll. Nothing to do while nobody has waited.
    pub(crate) fn announce_change(&self) {
        let changes = self
            .inner
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((sender, _)) = changes.as_ref() {
            sender.send_modify(|count| *count = count.wrapping_add(1));
        }
    }
}
