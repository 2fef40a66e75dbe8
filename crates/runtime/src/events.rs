//! Workflow events (plan §5.3): values an execution publishes with
//! [`WorkflowContext::set_event`] (progress, "awaiting approval") and observers in any process
//! read with [`Client::get_event`], waiting for them if they are not there yet.
//!
//! An event is set by the step `durably:set-event/<key>`, whose transaction also writes the
//! value to `workflow_events`: the value is published exactly when the step is recorded. A
//! replayed step writes nothing, so the row keeps the last value any run published.

use std::time::Duration;

use durably_db::Connection;
use durably_journal::{
    Effect, Payload, Reservation, StepError, StepKey, StepRef, StepState, Timing, execution_status,
};
use durably_lock::format_timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::client::Client;
use crate::context::{Lease, WorkflowContext};
use crate::error::{Error, Result};
use crate::names::{self, NameKind};
use crate::{payload, store, waiting};

impl WorkflowContext {
    /// Publishes `value` under `key` for observers ([`Client::get_event`], `durably show`),
    /// replacing the key's earlier value, as the idempotent step `durably:set-event/<key>`.
    /// Observers waiting for the key in this process are told at once; in other processes
    /// within their watcher's poll.
    ///
    /// # Errors
    /// Nothing is written on the first two: [`Error::InvalidName`] for a bad `key`;
    /// [`Error::PayloadTooLarge`] or [`Error::Json`] for the value. Then the journal's step
    /// errors, as [`Error::Journal`].
    pub fn set_event<'a, T: Serialize>(
        &'a self,
        key: &'a str,
        value: &T,
    ) -> impl Future<Output = Result<()>> + use<'a, T> {
        let started = self.begin_set_event(key, value);
        async move {
            let (leased, value) = started?;
            let key = key.to_owned();
            let publish = move |conn: &Connection, step: StepRef| {
                if step.state != StepState::Completed {
                    return Ok(());
                }
                let at = format_timestamp(step.now);
                store::upsert_workflow_event(
                    conn,
                    step.execution_id,
                    &key,
                    value.as_json(),
                    step.seq,
                    &at,
                )
            };
            if self
                .publishing_step(leased, |_| async { Ok(()) }, publish)
                .await?
            {
                fail::fail_point!("runtime::after-event-commit", |_| std::process::abort());
            }
            Ok(())
        }
    }

    /// Checks and encodes an event and reserves its step now.
    fn begin_set_event<T: Serialize>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<((Lease, Reservation), Payload)> {
        names::check(NameKind::EventKey, key)?;
        let journal = self.waits.client.journal();
        let value = payload::encode(value, &format!("event {key:?}"), journal)?;
        let leased = self.begin_step_unchecked(&format!("durably:set-event/{key}"))?;
        Ok((leased, value))
    }

    /// Runs the idempotent step reserved in `leased`, written at once with `publish`'s rows (a
    /// message, an event: what others wait for), then tells this process's waiters at once.
    /// Returns whether this run wrote the step; a replayed step writes and tells nothing.
    ///
    /// # Errors
    /// The journal's step errors, as [`Error::Journal`].
    pub(crate) async fn publishing_step<F, Fut, P>(
        &self,
        (lease, reserved): (Lease, Reservation),
        f: F,
        publish: P,
    ) -> Result<bool>
    where
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = std::result::Result<(), StepError>>,
        P: FnOnce(&Connection, StepRef) -> durably_journal::Result<()> + Send + 'static,
    {
        let fresh = !reserved.replays();
        let outcome = reserved
            .step_with(Effect::Idempotent, Timing::Now, f, publish)
            .await;
        drop(lease);
        self.slot.remember(outcome)?;
        if fresh {
            self.waits.client.announce_change();
        }
        Ok(fresh)
    }
}

impl Client {
    /// The value execution `id` last published under `key` with `set_event`. If it has
    /// published none yet, waits until it does, or until `timeout` has passed on this client's
    /// clock, then returns `None`. A zero `timeout` looks once. The wait reads the journal only
    /// when something has changed: a commit of any process on the file, seen by the client's
    /// watcher within a poll, or a `set_event` of this process, seen at once.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad key, [`Error::InvalidOption`] for a timeout whose end
    /// cannot be stored (past the year 9999), [`Error::NotFound`] when no execution has this id,
    /// [`Error::Json`] when the value does not decode as `T`, [`Error::PayloadTooLarge`] when
    /// the stored value exceeds the journal's cap, [`Error::Watcher`] when the watcher cannot
    /// run, [`Error::Journal`] for storage.
    pub async fn get_event<T: DeserializeOwned>(
        &self,
        id: Uuid,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<T>> {
        names::check(NameKind::EventKey, key)?;
        let clock = self.clock();
        let until = waiting::instant_after(
            durably_lock::Clock::now(clock.as_ref()),
            timeout,
            "a get_event timeout",
        )?;
        let found = waiting::wait_for(self, clock.as_ref(), Some(until), None, || {
            self.read_event(id, key)
        })
        .await?;
        found
            .map(|text| {
                payload::decode(
                    &text,
                    &format!("event {key:?} of execution {id}"),
                    self.journal(),
                )
            })
            .transpose()
    }

    /// The stored value of event `key` of execution `id`, if it is set.
    fn read_event(&self, id: Uuid, key: &str) -> Result<Option<String>> {
        let found = self.journal().read(|conn| {
            Ok(execution_status(conn, id)?.map(|_| store::workflow_event(conn, id, key)))
        })?;
        let Some(value) = found else {
            return Err(Error::NotFound(id));
        };
        Ok(value?)
    }
}
