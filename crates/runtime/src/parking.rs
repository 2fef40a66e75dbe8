//! Parking and waking (plan §4.1). A wait whose remaining time is longer than the runtime's
//! `park_after` parks the execution: in one transaction it becomes `waiting` with the instant
//! it waits for (`due_at`) and the topic whose message ends the wait early (`wait_topic`), its
//! lock is released, and its task ends. Nothing of it stays in memory in any process: the row
//! is the wait. Shorter waits stay in memory ([`crate::waiting::wait_for`]), holding the lock
//! and a slot.
//!
//! Parallel steps: a wait parks only when it is the only step of the execution in flight
//! (a receive counts its own recv step). A park ends the run, and with it every sibling step
//! still running, so a wait that starts while other steps of the execution are in flight
//! waits in memory instead, to its end, whatever its length. The rule is applied once, when
//! the wait starts.
//!
//! A parked execution is woken (`waiting` → `queued`, event `woken`) by the due pass of any
//! runtime once `due_at` has passed, or by the transaction of a send on its topic, from any
//! process; then any runtime serving its kind claims it, and its recorded steps replay up to
//! the wait, which finds what it waited for.
//!
//! Invariant (R3): a parked execution holds no lock, and its park wrote, in the same
//! transaction, everything it waits for: the timer's or deadline's step (carried by the
//! release) and `due_at`/`wait_topic`. A receive's park re-checks in that transaction for a
//! message and declines ([`durably_journal::Error::Aborted`], nothing written) if one has
//! arrived since it last looked, so a send can never fall between the look and the park. On
//! PostgreSQL both lock the receiver's execution row `FOR UPDATE` first ([`lock_receiver`]):
//! at `READ COMMITTED` a send committed after the park's re-check but begun before its
//! status change would otherwise find the execution still running, wake nothing, and leave
//! it parked on a message that is already there.

use std::convert::Infallible;

use chrono::{DateTime, Utc};
use durably_db::{Connection, Dialect};
use durably_journal::lifecycle::{Wake, record_execution_event, wake};
use durably_journal::{Execution, Release};
use serde_json::json;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::context::Slot;
use crate::error::Result;
use crate::store;
use crate::waiting::{self, Waits};

/// The audit event of a parked execution woken by its time or by a message.
pub(crate) const EVENT_WOKEN: &str = "woken";

/// What a wait is for: its instant, and the topic of a receive.
pub(crate) struct Wait<'a> {
    /// The execution waiting.
    pub(crate) execution_id: Uuid,
    /// When the wait ends if nothing else ends it first.
    pub(crate) until: DateTime<Utc>,
    /// The topic whose message ends the wait early (a receive); `None` for a timer.
    pub(crate) topic: Option<&'a str>,
    /// Why the execution waits, for people (`status_detail`): names and instants, never
    /// payloads.
    pub(crate) detail: serde_json::Value,
    /// How many of the execution's steps in flight are the wait's own (a receive's recv
    /// step): with any other in flight, it waits in memory.
    pub(crate) own_steps: usize,
}

/// Waits for `check` to find something, or for `wait.until`: in memory while the remaining
/// time is at most the runtime's `park_after`, else by parking the execution in `slot`. A
/// park never returns: the task that runs the workflow is told, and drops the workflow's
/// future. Returns what `check` found, or `None` once `wait.until` is reached.
///
/// # Errors
/// `check`'s error; the park's error (the lock lost, storage), remembered in `slot` so the
/// task ends the run on it.
pub(crate) async fn wait_or_park<T>(
    (slot, execution): (&Slot, &Execution),
    waits: &Waits,
    parked: &Notify,
    wait: Wait<'_>,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let remaining = wait.until - durably_lock::Clock::now(waits.clock.as_ref());
    let alone = execution.steps_in_flight() <= wait.own_steps;
    if waits.parks(remaining) && !alone {
        // Long, but kept in memory beside its siblings: its step, kept pending for a park that
        // will not come, is written now, so a crash during the wait loses no time.
        slot.remember(execution.flush().await)?;
    }
    if waits.parks(remaining) && alone {
        if let Some(found) = check()? {
            return Ok(Some(found));
        }
        fail::fail_point!("runtime::before-park", |_| std::process::abort());
        let topic = wait.topic.map(str::to_owned);
        let release = Release::Waiting {
            due_at: wait.until,
            topic: topic.clone(),
        };
        let id = wait.execution_id;
        let outcome = execution
            .release_to(release, wait.detail, move |conn| {
                park_hook(conn, id, topic.as_deref())
            })
            .await;
        match outcome {
            Ok(()) => match park_ends_the_run(parked).await {},
            // What the wait is for arrived between the look above and the park's transaction;
            // the wait below finds it at its first look.
            Err(durably_journal::Error::Aborted(_)) => {}
            Err(error) => return slot.remember(Err(error)),
        }
    }
    let signal = slot.signal().clone();
    waiting::wait_for(
        &waits.client,
        waits.clock.as_ref(),
        Some(wait.until),
        Some(&signal),
        check,
    )
    .await
}

/// The rows a park writes besides the journal's: the run ended cleanly, so the count of
/// failed runs starts over; and for a receive, the re-check that declines the park when a
/// message is already there. A park declines, too, when a cancel request is pending that the
/// run has not seen yet: its wait in memory then ends on the request within a poll, and the
/// run ends `cancelled` instead of leaving a parked row with a request nobody holds.
fn park_hook(
    conn: &Connection,
    execution_id: Uuid,
    topic: Option<&str>,
) -> durably_journal::Result<()> {
    lock_receiver(conn, execution_id)?;
    if durably_journal::lifecycle::pending_cancel(conn, execution_id)?.is_some() {
        return Err(durably_journal::Error::Aborted(
            "a cancel request is pending",
        ));
    }
    if let Some(topic) = topic
        && store::first_pending_message(conn, execution_id, topic)?.is_some()
    {
        return Err(durably_journal::Error::Aborted(
            "a message arrived on the awaited topic",
        ));
    }
    store::reset_failures(conn, execution_id)
}

/// On PostgreSQL, locks execution `id`'s row `FOR UPDATE` until the transaction ends: a park
/// before its re-check for a message, a send before it stores one. Whichever comes second
/// waits for the first to commit, then sees what it wrote (the message, or the `waiting`
/// status its wake moves). SQLite's single writer orders them already.
///
/// # Errors
/// A storage error.
pub(crate) fn lock_receiver(conn: &Connection, id: Uuid) -> durably_journal::Result<()> {
    if conn.dialect() == Dialect::Postgres {
        conn.prepare_cached("SELECT 1 FROM executions WHERE execution_id = ?1 FOR UPDATE")?
            .exists(durably_db::params![id.to_string()])?;
    }
    Ok(())
}

/// Tells the task that the execution is parked, then never returns: the task drops the
/// future this runs in, so no workflow code runs after a park in this process.
async fn park_ends_the_run(parked: &Notify) -> Infallible {
    fail::fail_point!("runtime::after-park-commit", |_| std::process::abort());
    parked.notify_one();
    std::future::pending().await
}

/// Wakes parked execution `id` (`waiting` → `queued`) if it waits for what `by` says, with
/// the `woken` audit event, in the caller's transaction. Returns whether it was woken.
///
/// # Errors
/// A storage error.
pub(crate) fn wake_parked(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    by: Wake<'_>,
) -> durably_journal::Result<bool> {
    if !wake(conn, id, now, by)? {
        return Ok(false);
    }
    let detail = match by {
        Wake::Due => json!({ "by": "due" }),
        Wake::Topic(topic) => json!({ "by": "message", "topic": topic }),
    };
    record_execution_event(conn, now, id, None, EVENT_WOKEN, &detail)?;
    Ok(true)
}
