//! [`Client`]: what any process can do with the runtime's executions without running them:
//! send them messages and read the events they publish.

use std::sync::{Arc, Mutex, PoisonError};

use durably_journal::{Journal, execution_status};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::handle::WorkflowHandle;
use crate::names::{self, NameKind};
use crate::registry::Registry;
use crate::{payload, store, watcher};

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
    /// The watcher's change count, once a wait has started it. Holding this receiver keeps the
    /// watcher running for as long as the client lives.
    changes: Mutex<Option<watch::Receiver<u64>>>,
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

/// What a send transaction decided; a refusal writes nothing.
enum Sending {
    Done(SendOutcome),
    Refused(Error),
}

impl Client {
    /// A client on `journal`: brings the runtime's tables and views in its file up to date
    /// (owner `runtime` in `schema_versions`).
    ///
    /// # Errors
    /// [`durably_journal::Error::ExtensionSchemaTooNew`] (as [`Error::Journal`]) when a newer
    /// build of the runtime migrated the file, or a storage error.
    pub async fn new(journal: Journal) -> Result<Self> {
        Self::with_registry(journal, Registry::default()).await
    }

    /// A client that type-checks starts of `registry`'s kinds.
    pub(crate) async fn with_registry(journal: Journal, registry: Registry) -> Result<Self> {
        journal.migrate_extension(&store::SCHEMA).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                journal,
                registry,
                changes: Mutex::new(None),
            }),
        })
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
        if let Some(receiver) = changes.as_ref() {
            return Ok(receiver.clone());
        }
        let receiver = watcher::start(self.journal().path())?;
        *changes = Some(receiver.clone());
        Ok(receiver)
    }

    /// Sends `message` to execution `to` on `topic`. The message is kept until a `recv` of
    /// that topic in the receiver consumes it, whether or not the receiver is waiting now.
    /// With an `idempotency_key`, a second send with the same key to the same receiver
    /// delivers nothing and answers [`SendOutcome::AlreadySent`].
    ///
    /// # Errors
    /// Nothing is written on any error:
    /// - [`Error::InvalidName`]: `topic` or `idempotency_key` is empty, over 256 bytes, or holds
    ///   a control character;
    /// - [`Error::PayloadTooLarge`] over the journal's payload cap, [`Error::Json`] when the
    ///   message does not serialize;
    /// - [`Error::ReceiverNotFound`], [`Error::NotRuntimeExecution`] (a hand-driven execution),
    ///   [`Error::ReceiverFinished`];
    /// - [`Error::IdempotencyKeyReused`]: the key was used for another payload;
    /// - [`Error::Journal`]: a storage error.
    pub async fn send<T: Serialize>(
        &self,
        to: Uuid,
        topic: &str,
        message: &T,
        idempotency_key: Option<&str>,
    ) -> Result<SendOutcome> {
        names::check(NameKind::Topic, topic)?;
        if let Some(key) = idempotency_key {
            names::check(NameKind::IdempotencyKey, key)?;
        }
        let message = payload::encode(
            message,
            &format!("message on topic {topic:?}"),
            self.journal(),
        )?;
        let topic = topic.to_owned();
        let key = idempotency_key.map(str::to_owned);
        let sent_at = durably_lock::format_timestamp(self.now());
        let sending = self
            .journal()
            .write(move |conn| {
                let Some(status) = execution_status(conn, to)? else {
                    return Ok(Sending::Refused(Error::ReceiverNotFound {
                        execution_id: to,
                    }));
                };
                if !store::is_runtime_execution(conn, to)? {
                    return Ok(Sending::Refused(Error::NotRuntimeExecution {
                        execution_id: to,
                    }));
                }
                if status.is_final() {
                    // A message nobody can consume is refused rather than kept.
                    return Ok(Sending::Refused(Error::ReceiverFinished {
                        execution_id: to,
                        status,
                    }));
                }
                if let Some(key) = &key
                    && let Some(earlier) = store::message_by_key(conn, to, key)?
                {
                    return Ok(if payload::same_json(&earlier.payload, message.as_json()) {
                        Sending::Done(SendOutcome::AlreadySent {
                            message_id: earlier.message_id,
                        })
                    } else {
                        Sending::Refused(Error::IdempotencyKeyReused {
                            execution_id: to,
                            key: key.clone(),
                            message_id: earlier.message_id,
                        })
                    });
                }
                let message_id = store::insert_message(
                    conn,
                    to,
                    &topic,
                    message.as_json(),
                    key.as_deref(),
                    &sent_at,
                )?;
                Ok(Sending::Done(SendOutcome::Sent { message_id }))
            })
            .await?;
        match sending {
            Sending::Done(outcome) => Ok(outcome),
            Sending::Refused(error) => Err(error),
        }
    }

    /// The value execution `id` last published under `key` with `set_event`, or `None` if it
    /// has published none (yet). Does not wait.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad key, [`Error::NotFound`] when no execution has this id,
    /// [`Error::Json`] when the value does not decode as `T`, [`Error::PayloadTooLarge`] when
    /// the stored value exceeds the journal's cap, [`Error::Journal`] for storage.
    pub fn get_event<T: DeserializeOwned>(&self, id: Uuid, key: &str) -> Result<Option<T>> {
        names::check(NameKind::EventKey, key)?;
        let found = self.journal().read(|conn| {
            Ok(execution_status(conn, id)?.map(|_| store::workflow_event(conn, id, key)))
        })?;
        let Some(value) = found else {
            return Err(Error::NotFound(id));
        };
        value?
            .map(|text| {
                payload::decode(
                    &text,
                    &format!("event {key:?} of execution {id}"),
                    self.journal(),
                )
            })
            .transpose()
    }
}
