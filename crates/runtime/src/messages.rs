//! Messages (plan §5.2, §5.3): [`Client::send`] from any process, and inside a workflow
//! [`WorkflowContext::recv`] and [`WorkflowContext::send`].
//!
//! A message is a row of `messages`, kept until a recv step of its receiver consumes it, in
//! arrival order per topic. A send stores it whether or not the receiver waits now, and wakes
//! the receiver in the same transaction if it is parked on that topic.
//!
//! A receive is two steps, on every run, so step numbers never depend on timing (both seqs are
//! reserved when `recv` is called, so two receives in parallel never interleave them):
//! `durably:recv-deadline/<topic>` records when it gives up (`{"deadline": T}`), and
//! `durably:recv/<topic>` records what it got (`{"message_id": n, "message": m}` or
//! `{"timed_out": true}`). Invariant (R4): the message is marked consumed in the transaction
//! that records the recv step returning it, so across any crash a message is returned by
//! exactly one step, and a replayed step returns the same message again without consuming
//! another.

use std::any::type_name;
use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_db::Connection;
use durably_journal::lifecycle::Wake;
use durably_journal::{
    Effect, IdempotencyKey, Payload, Reservation, StepError, StepKey, StepRef, StepState, Timing,
    execution_status,
};
use durably_lock::{format_timestamp, parse_timestamp};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::client::{Client, SendOutcome};
use crate::context::{Lease, WorkflowContext};
use crate::error::{Error, Result};
use crate::names::{self, NameKind};
use crate::parking::{self, Wait, wake_parked};
use crate::store::{self, StoredMessage};
use crate::{payload, waiting};

/// Bytes of a message's cap kept for the recv step's envelope around it
/// (`{"message_id": n, "message": ...}`, 45 bytes at most), with room to spare: the step's
/// result must fit under the journal's payload cap too, or a message could be sent that no
/// receive can record.
pub const MESSAGE_ENVELOPE_BYTES: usize = 64;

/// What a send transaction decided; a refusal writes nothing.
pub(crate) enum Sending {
    Done(SendOutcome),
    Refused(Error),
}

/// The recorded result of a recv step.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Received {
    /// The consumed message's id; `None` when the receive timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message_id: Option<i64>,
    /// The message (JSON null for a null message, which decodes to `None` here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    timed_out: bool,
}

/// The recorded result of a recv-deadline step.
#[derive(Debug, Serialize, Deserialize)]
struct RecvDeadline {
    /// When the receive gives up, as the journal stamps instants.
    deadline: String,
}

impl Client {
    /// Sends `message` to execution `to` on `topic`. The message is kept until a `recv` of
    /// that topic in the receiver consumes it, whether or not the receiver is waiting now; a
    /// receiver parked on that topic is woken in the same transaction. With an
    /// `idempotency_key`, a second send with the same key to the same receiver delivers
    /// nothing and answers [`SendOutcome::AlreadySent`].
    ///
    /// # Errors
    /// Nothing is written on any error:
    /// - [`Error::InvalidName`]: `topic` or `idempotency_key` is empty, over 256 bytes, or holds
    ///   a control character;
    /// - [`Error::PayloadTooLarge`] over the journal's payload cap less
    ///   [`MESSAGE_ENVELOPE_BYTES`], [`Error::Json`] when the message does not serialize;
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
        let message = encode_message(self, topic, message)?;
        let topic = topic.to_owned();
        let key = idempotency_key.map(str::to_owned);
        let now = self.now();
        let sending = self
            .journal()
            .write(move |conn| deliver(conn, to, &topic, message.as_json(), key.as_deref(), now))
            .await?;
        match sending {
            Sending::Done(outcome) => {
                fail::fail_point!("runtime::after-send-commit", |_| std::process::abort());
                self.announce_change();
                Ok(outcome)
            }
            Sending::Refused(error) => Err(error),
        }
    }
}

/// Encodes a message under the journal's payload cap less [`MESSAGE_ENVELOPE_BYTES`].
fn encode_message(client: &Client, topic: &str, message: &impl Serialize) -> Result<Payload> {
    let max = client
        .journal()
        .payload_bytes_max()
        .saturating_sub(MESSAGE_ENVELOPE_BYTES);
    let what = format!(
        "message on topic {topic:?} (whose cap keeps {MESSAGE_ENVELOPE_BYTES} bytes of the \
         journal's for the recv step around it)"
    );
    let (what, bytes) = match payload::encode(message, &what, client.journal()) {
        Ok(message) if message.as_json().len() <= max => return Ok(message),
        Ok(message) => (what, message.as_json().len()),
        // Over the journal's own cap: reported against the message's.
        Err(Error::PayloadTooLarge { what, bytes, .. }) => (what, bytes),
        Err(error) => return Err(error),
    };
    Err(Error::PayloadTooLarge { what, bytes, max })
}

/// Why execution `to` cannot be sent a message, if it cannot: it does not exist, the runtime
/// did not start it, or it has ended (a message nobody can consume is refused, not kept).
fn receiver_refusal(conn: &Connection, to: Uuid) -> durably_journal::Result<Option<Error>> {
    let Some(status) = execution_status(conn, to)? else {
        return Ok(Some(Error::ReceiverNotFound { execution_id: to }));
    };
    if !store::is_runtime_execution(conn, to)? {
        return Ok(Some(Error::NotRuntimeExecution { execution_id: to }));
    }
    if status.is_final() {
        return Ok(Some(Error::ReceiverFinished {
            execution_id: to,
            status,
        }));
    }
    Ok(None)
}

/// The send transaction, shared by [`Client::send`] and [`WorkflowContext::send`]: stores the
/// message unless refused or already sent with `key`, and wakes the receiver if it is parked
/// on `topic`. Every refusal returns before the first write.
pub(crate) fn deliver(
    conn: &Connection,
    to: Uuid,
    topic: &str,
    message: &str,
    key: Option<&str>,
    now: DateTime<Utc>,
) -> durably_journal::Result<Sending> {
    crate::parking::lock_receiver(conn, to)?;
    if let Some(refusal) = receiver_refusal(conn, to)? {
        return Ok(Sending::Refused(refusal));
    }
    if let Some(key) = key
        && let Some(earlier) = store::message_by_key(conn, to, key)?
    {
        return Ok(sent_before(to, key, message, &earlier));
    }
    let sent_at = format_timestamp(now);
    let Some(message_id) = store::insert_message(conn, to, topic, message, key, &sent_at)? else {
        // A send with the same key committed since the look above (another host, on
        // PostgreSQL): answer as if it had been seen there.
        let earlier = match key {
            Some(key) => store::message_by_key(conn, to, key)?.map(|earlier| (key, earlier)),
            None => None,
        };
        return match earlier {
            Some((key, earlier)) => Ok(sent_before(to, key, message, &earlier)),
            None => Err(durably_journal::Error::Inconsistent(format!(
                "the message to execution {to} was not inserted, yet no message with its \
                 idempotency key is stored"
            ))),
        };
    };
    wake_parked(conn, to, now, Wake::Topic(topic))?;
    Ok(Sending::Done(SendOutcome::Sent { message_id }))
}

/// The answer to a send of `message` with idempotency key `key` to `to` when `earlier` was
/// sent with that key already: the same send again if the payloads are the same JSON,
/// refused otherwise.
fn sent_before(to: Uuid, key: &str, message: &str, earlier: &store::StoredMessage) -> Sending {
    if payload::same_json(&earlier.payload, message) {
        Sending::Done(SendOutcome::AlreadySent {
            message_id: earlier.message_id,
        })
    } else {
        Sending::Refused(Error::IdempotencyKeyReused {
            execution_id: to,
            key: key.to_owned(),
            message_id: earlier.message_id,
        })
    }
}

impl WorkflowContext {
    /// Returns the next message on `topic` sent to this execution, decoded as `T`, or `None`
    /// if none has arrived within `timeout` of the first time this receive ran. Messages sent
    /// before the receive are kept for it, first sent first received. A wait longer than the
    /// runtime's `park_after` parks the execution (no lock, no task, no memory) until a
    /// message on the topic, or the timeout, wakes it in any process serving its kind.
    ///
    /// The message is consumed in the transaction that records this step, so it is received
    /// exactly once across crashes; a resumed execution gets the same message back here.
    ///
    /// # Errors
    /// Nothing is written on the first two: [`Error::InvalidName`] for a bad `topic`;
    /// [`Error::InvalidOption`] for a timeout whose end cannot be stored (past the year 9999).
    /// A message that does not decode as `T` is consumed all the same and recorded as this
    /// step's failure, returned now and on every replay as [`Error::Journal`] holding the
    /// journal's `StepFailed` (the topic is not blocked by it). Then the journal's step
    /// errors.
    pub fn recv<'a, T: DeserializeOwned>(
        &'a self,
        topic: &'a str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<T>>> + use<'a, T> {
        let started = self.begin_recv(topic, timeout);
        async move {
            let (lease, deadline_step, recv_step, deadline) = started?;
            let deadline = self
                .recv_deadline(&lease, deadline_step, topic, (deadline, 2))
                .await?;
            let received = self
                .receive::<T>(&lease, recv_step, topic, (deadline, 1), Timing::Now)
                .await?;
            if received.message_id.is_none() {
                return Ok(None);
            }
            let message = received.message.unwrap_or(serde_json::Value::Null);
            // The step decoded it before recording it; what it recorded decodes the same way.
            T::deserialize(&message).map(Some).map_err(|_| {
                Error::Journal(durably_journal::Error::Inconsistent(format!(
                    "the message recorded by a recv step on topic {topic:?} of execution {} \
                     does not decode as {}",
                    self.id,
                    type_name::<T>()
                )))
            })
        }
    }

    /// Checks a receive's topic and timeout and reserves its two steps now, in order.
    fn begin_recv(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Result<(Lease, Reservation, Reservation, DateTime<Utc>)> {
        names::check(NameKind::Topic, topic)?;
        let now = durably_lock::Clock::now(self.waits.clock.as_ref());
        let deadline = waiting::instant_after(now, timeout, "a receive's timeout")?;
        let (lease, deadline_step) =
            self.begin_step_unchecked(&format!("durably:recv-deadline/{topic}"))?;
        let recv_step = self
            .slot
            .remember(lease.reserve(&format!("durably:recv/{topic}")))?;
        Ok((lease, deadline_step, recv_step, deadline))
    }

    /// The recv-deadline step: records `deadline`, or replays the one recorded.
    ///
    /// `own_steps` is how many steps the whole wait holds reserved, this one included (a
    /// receive's two; a child's await, three): with others in flight it waits in memory.
    pub(crate) async fn recv_deadline(
        &self,
        lease: &Lease,
        reserved: Reservation,
        topic: &str,
        (deadline, own_steps): (DateTime<Utc>, usize),
    ) -> Result<DateTime<Utc>> {
        let step = format!("durably:recv-deadline/{topic}");
        let now = durably_lock::Clock::now(self.waits.clock.as_ref());
        // A wait in memory records the deadline first, so a crash during it loses no time; a
        // park, or the recv step consuming a message already there, carries it. A replayed
        // step writes nothing either way.
        let waits_in_memory = deadline > now
            && !(self.waits.parks(deadline - now) && lease.steps_in_flight() <= own_steps)
            && !reserved.replays()
            && self
                .waits
                .client
                .journal()
                .read(|conn| store::first_pending_message(conn, self.id, topic))?
                .is_none();
        let timing = if waits_in_memory {
            Timing::Now
        } else {
            Timing::Deferred
        };
        let recorded = format_timestamp(deadline);
        let outcome = reserved
            .step_with(
                Effect::Pure,
                timing,
                move |_| {
                    let deadline = RecvDeadline {
                        deadline: recorded.clone(),
                    };
                    async move { Ok::<_, StepError>(deadline) }
                },
                |_, _| Ok(()),
            )
            .await;
        let recorded: RecvDeadline = self.slot.remember(outcome)?;
        parse_timestamp(&recorded.deadline).ok_or_else(|| {
            Error::Journal(durably_journal::Error::Inconsistent(format!(
                "step {step:?} of execution {} records deadline {:?}, not a timestamp",
                self.id, recorded.deadline
            )))
        })
    }

    /// The recv step: replays what it recorded, or waits for a message on `topic` until
    /// `deadline` and records it, consumed, or the timeout. A message consumed is written as
    /// `consumed` says: at once (`recv`), or behind, with the run's next write, where nobody
    /// else waits for the consumption and no other receive of the run takes the topic (a
    /// child's end, awaited once).
    pub(crate) async fn receive<T: DeserializeOwned>(
        &self,
        lease: &Lease,
        reserved: Reservation,
        topic: &str,
        (deadline, own_steps): (DateTime<Utc>, usize),
        consumed: Timing,
    ) -> Result<Received> {
        if reserved.replays() {
            // Recorded: the journal returns the outcome without calling the closure, and a
            // step of another name or kind here is its non-determinism error.
            let outcome = reserved
                .step_with(
                    Effect::Pure,
                    Timing::Deferred,
                    |_| async { Err::<Received, _>(StepError::fatal("a recorded step ran")) },
                    |_, _| Ok(()),
                )
                .await;
            return self.slot.remember(outcome);
        }
        let (client, id) = (self.waits.client.clone(), self.id);
        let wait = Wait {
            execution_id: id,
            until: deadline,
            topic: Some(topic),
            detail: json!({ "recv": topic, "deadline": format_timestamp(deadline) }),
            own_steps,
        };
        let found =
            parking::wait_or_park((&self.slot, lease), &self.waits, &self.parked, wait, || {
                Ok(client
                    .journal()
                    .read(|conn| store::first_pending_message(conn, id, topic))?)
            })
            .await?;
        let Some(message) = found else {
            let outcome = reserved
                .step_with(
                    Effect::Pure,
                    Timing::Deferred,
                    |_| async {
                        Ok::<_, StepError>(Received {
                            message_id: None,
                            message: None,
                            timed_out: true,
                        })
                    },
                    |_, _| Ok(()),
                )
                .await;
            return self.slot.remember(outcome);
        };
        let outcome = reserved
            .step_with(
                Effect::Pure,
                consumed,
                consume_closure::<T>(&message, topic),
                consume_hook(message.message_id),
            )
            .await;
        let committed = consumed == Timing::Now
            && matches!(
                &outcome,
                Ok(_) | Err(durably_journal::Error::StepFailed { .. })
            );
        if committed {
            fail::fail_point!("runtime::after-consume-commit", |_| std::process::abort());
        }
        self.slot.remember(outcome)
    }

    /// Sends `message` to execution `to` on `topic`, as step `durably:send/<topic>`: the
    /// message is stored in the transaction that records the step, with the step's
    /// idempotency key, so it is sent exactly once however often the execution is resumed. A
    /// receiver that does not exist, was not started through the runtime or has ended is
    /// recorded as the step's failure (a replay fails the same way).
    ///
    /// # Errors
    /// Nothing is written on the first two: [`Error::InvalidName`] for a bad `topic`;
    /// [`Error::PayloadTooLarge`] or [`Error::Json`] for the message, as for [`Client::send`].
    /// A refused receiver as [`Error::Journal`] holding the journal's `StepFailed`; then the
    /// journal's step errors.
    pub fn send<'a, T: Serialize>(
        &'a self,
        to: Uuid,
        topic: &'a str,
        message: &T,
    ) -> impl Future<Output = Result<()>> + use<'a, T> {
        let step = format!("durably:send/{topic}");
        let started = names::check(NameKind::Topic, topic)
            .and_then(|()| encode_message(&self.waits.client, topic, message))
            .and_then(|message| Ok((self.begin_step_unchecked(&step)?, message)));
        async move {
            let (leased, message) = started?;
            let (client, hook_step, topic) = (self.waits.client.clone(), step, topic.to_owned());
            let sender = self.id;
            let check = move |_| {
                // A run's execution sends to itself before its deferred open has written its
                // row: it exists, and has not ended, since it is running this step.
                let refusal = if to == sender {
                    Ok(None)
                } else {
                    client.journal().read(|conn| receiver_refusal(conn, to))
                };
                async move {
                    match refusal {
                        Ok(None) => Ok(()),
                        Ok(Some(refusal)) => Err(StepError::fatal(refusal.to_string())),
                        Err(error) => Err(StepError::retryable(error.to_string())),
                    }
                }
            };
            let deliver = move |conn: &Connection, step: StepRef| {
                if step.state != StepState::Completed {
                    return Ok(());
                }
                let key = IdempotencyKey::derive(step.execution_id, step.seq, &hook_step);
                // A receiver that ended since the closure looked is sent nothing: nobody could
                // consume the message.
                deliver(
                    conn,
                    to,
                    &topic,
                    message.as_json(),
                    Some(&key.to_string()),
                    step.now,
                )?;
                Ok(())
            };
            if self.publishing_step(leased, check, deliver).await? {
                fail::fail_point!("runtime::after-send-commit", |_| std::process::abort());
            }
            Ok(())
        }
    }
}

/// The recv step's closure for `message`: its envelope, or the step's failure when the
/// message does not decode as `T`. The failure names the message and the type, never the
/// message's contents.
fn consume_closure<T: DeserializeOwned>(
    message: &StoredMessage,
    topic: &str,
) -> impl FnMut(StepKey) -> std::future::Ready<std::result::Result<Received, StepError>> + Send + 'static
{
    let (message_id, payload, topic) = (
        message.message_id,
        message.payload.clone(),
        topic.to_owned(),
    );
    move |_| {
        let undecodable = |error: &serde_json::Error| {
            StepError::fatal(format!(
                "message {message_id} on topic {topic:?} does not decode as {} ({:?} error)",
                type_name::<T>(),
                error.classify()
            ))
        };
        let received = serde_json::from_str::<serde_json::Value>(&payload)
            .map_err(|error| undecodable(&error))
            .and_then(|message| match T::deserialize(&message) {
                Ok(_) => Ok(Received {
                    message_id: Some(message_id),
                    message: Some(message),
                    timed_out: false,
                }),
                Err(error) => Err(undecodable(&error)),
            });
        std::future::ready(received)
    }
}

/// The recv step's hook: marks message `message_id` consumed by the step, in the step's
/// transaction (R4).
fn consume_hook(
    message_id: i64,
) -> impl FnOnce(&Connection, StepRef) -> durably_journal::Result<()> + Send + 'static {
    move |conn, step| {
        if store::consume_message(conn, message_id, step.seq, &format_timestamp(step.now))? {
            return Ok(());
        }
        // Only the lock holder consumes an execution's messages, and only here.
        Err(durably_journal::Error::Inconsistent(format!(
            "message {message_id} to execution {} was consumed by another step",
            step.execution_id
        )))
    }
}
