//! [`Execution::release_to`]: the end of a run that parks the execution instead of finishing
//! it, for crates built on the journal (the runtime's parks, yields and stuck executions).
//!
//! Invariant: a parked execution holds no lock (R3). The status change, the caller's rows, the
//! audit event and the lock's release commit in one transaction, so no reader ever sees a
//! parked execution that is still locked, or a released lock on a `running` execution that
//! nobody drives.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use durably_db::{Connection, params};
use durably_lock::format_timestamp;
use serde_json::{Map, Value};

use super::Execution;
use super::fence::CancelRequests;
use crate::error::{Error, Result};
use crate::events;
use crate::records::event_kind;
use crate::states::Status;

/// The longest `executions.status_detail` may be, in bytes of JSON (its CHECK says the same).
pub const STATUS_DETAIL_BYTES_MAX: usize = 2048;

/// Where [`Execution::release_to`] parks an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// `waiting` until `due_at`, or until a message on `topic` arrives (whichever comes
    /// first); event `parked`.
    Waiting {
        /// When it becomes runnable without a message (a wake time, a receive's deadline).
        due_at: DateTime<Utc>,
        /// The topic whose message wakes it earlier, if any.
        topic: Option<String>,
    },
    /// `queued`, claimable again (from `due_at` on, when given); event `yielded`.
    Queued {
        /// Not claimable before this time (a backoff).
        due_at: Option<DateTime<Utc>>,
    },
    /// `stuck`: only an operator's resume moves it on; event `stuck`.
    Stuck,
}

impl Release {
    fn status(&self) -> Status {
        match self {
            Self::Waiting { .. } => Status::Waiting,
            Self::Queued { .. } => Status::Queued,
            Self::Stuck => Status::Stuck,
        }
    }

    fn event_kind(&self) -> &'static str {
        match self {
            Self::Waiting { .. } => event_kind::PARKED,
            Self::Queued { .. } => event_kind::YIELDED,
            Self::Stuck => event_kind::STUCK,
        }
    }

    fn due_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Self::Waiting { due_at, .. } => Some(*due_at),
            Self::Queued { due_at } => *due_at,
            Self::Stuck => None,
        }
    }

    fn topic(&self) -> Option<&str> {
        match self {
            Self::Waiting { topic, .. } => topic.as_deref(),
            Self::Queued { .. } | Self::Stuck => None,
        }
    }
}

/// A release, ready to be written.
struct Parking {
    status: Status,
    kind: &'static str,
    due_at: Option<String>,
    topic: Option<String>,
    /// `status_detail`; `None` for a JSON null.
    detail: Option<String>,
    /// The audit event's detail: where to and why (names and reasons, never payloads).
    event: Value,
}

impl Parking {
    fn new(to: &Release, detail: Value) -> Self {
        let due_at = to.due_at().map(format_timestamp);
        let topic = to.topic().map(str::to_owned);
        let mut event = Map::new();
        if let Some(due_at) = &due_at {
            event.insert("due_at".to_owned(), due_at.clone().into());
        }
        if let Some(topic) = &topic {
            event.insert("topic".to_owned(), topic.clone().into());
        }
        let stored = (!detail.is_null()).then(|| detail.to_string());
        if !detail.is_null() {
            event.insert("detail".to_owned(), detail);
        }
        Self {
            status: to.status(),
            kind: to.event_kind(),
            due_at,
            topic,
            detail: stored,
            event: Value::Object(event),
        }
    }

    /// Moves the execution from `running` to its parked status, with its audit event.
    fn record(&self, conn: &Connection, resource: &str, now: &str) -> Result<()> {
        let changed = conn
            .prepare_cached(
                "UPDATE executions SET status = ?2, due_at = ?3, wait_topic = ?4,
                                       status_detail = ?5, updated_at = ?6
                 WHERE execution_id = ?1 AND status = 'running'",
            )?
            .execute(params![
                resource,
                self.status.as_str(),
                self.due_at,
                self.topic,
                self.detail,
                now
            ])?;
        if changed != 1 {
            let status = uuid::Uuid::parse_str(resource)
                .ok()
                .map(|id| crate::extension::execution_status(conn, id))
                .transpose()?
                .flatten();
            let status = status.map_or("missing", Status::as_str);
            return Err(Error::Refused(format!(
                "execution {resource} is {status}, not running; only a running execution is \
                 released to {}",
                self.status
            )));
        }
        events::record(conn, now, Some(resource), None, self.kind, &self.event)
    }
}

impl Execution {
    /// Ends this run without finishing the execution: in one transaction, `also`'s rows, the
    /// rows the handle kept pending, the status `running` → `to` (with its `due_at`, `wait_topic` and `detail` as
    /// `status_detail`), the audit event (`parked`, `yielded` or `stuck`) and the lock's
    /// release. Allowed on a halted handle (a run stopped by non-determinism is parked
    /// `stuck`). Afterwards the handle writes nothing more, and dropping it releases nothing.
    ///
    /// If `also` returns [`Error::Aborted`], nothing was written and the handle is usable as
    /// before (a park whose hook found the awaited message already there goes on running).
    ///
    /// A pending cancel request does not refuse a release; the rows the handle kept pending
    /// are then dropped but guarded steps' results (R5, see the fence).
    ///
    /// `detail` says why, for people: names, seqs and reasons, never payloads; JSON null
    /// stores none.
    ///
    /// # Errors
    /// [`Error::LockLost`]; [`Error::PayloadTooLarge`] for a `detail` over
    /// [`STATUS_DETAIL_BYTES_MAX`]; [`Error::Refused`] when the execution is no longer
    /// `running` (its own step parked it for an operator) or the handle was already released
    /// (neither writes anything); `also`'s own error; or a storage error.
    pub async fn release_to<A>(&self, to: Release, detail: Value, also: A) -> Result<()>
    where
        A: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let shared = &self.shared;
        shared.refuse_if_released()?;
        let bytes = detail.to_string().len();
        if !detail.is_null() && bytes > STATUS_DETAIL_BYTES_MAX {
            return Err(Error::PayloadTooLarge {
                what: format!("the status detail of execution {}", shared.id),
                bytes,
                max: STATUS_DETAIL_BYTES_MAX,
            });
        }
        let parking = Parking::new(&to, detail);
        let status = parking.status;
        let release = Arc::clone(&shared.fence);
        // First in the transaction: if it declines, what is pending stays pending.
        let released = shared
            .fence
            .write_first(
                Box::new(also),
                CancelRequests::Admit,
                move |conn, resource, now| {
                    parking.record(conn, resource, now)?;
                    release.release_in(conn)?;
                    fail::fail_point!("journal::before-release-commit", |_| {
                        std::process::abort()
                    });
                    Ok(())
                },
            )
            .await;
        if let Err(error) = released {
            // Any other failure took what was pending with it: the handle must not go on
            // past steps the journal does not hold.
            if !matches!(error, Error::Aborted(_)) {
                let next_seq = shared.state().next_seq;
                shared.halt_at(next_seq);
            }
            return Err(error);
        }
        fail::fail_point!("journal::after-release-commit", |_| std::process::abort());
        {
            let mut state = shared.state();
            state.released_to = Some(status);
            state.finalized = true;
        }
        shared.ended(crate::telemetry::RunEnd::Status(status));
        tracing::info!(parent: &shared.span, execution_id = %shared.id, status = status.as_str(), "released");
        Ok(())
    }
}
