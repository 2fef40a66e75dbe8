//! Execution deadlines (plan §4.6): a start's [`crate::Deadline`], stored as
//! `runtime_executions.deadline_at`, cancels the execution with reason `timeout` if it has not
//! ended by then.
//!
//! Any runtime's dispatcher enforces every deadline, whatever the kind (it runs nothing): a
//! parked or interrupted execution is cancelled at once, a running one gets a cancel request
//! that its holder honours like an operator's. The holder also arms a timer of its own on its
//! run's deadline, so it stops without waiting to see the request. Either way the deadline is
//! cleared, so a late holder never keeps the pass busy.

use chrono::{DateTime, Utc};
use durably_db::Connection;
use durably_journal::Status;
use durably_journal::lifecycle::{cancel_now, next_due, request_cancel};
use uuid::Uuid;

use crate::cancel::nobody_runs;
use crate::client::Client;
use crate::error::Result;
use crate::store;

/// The cancel reason of a deadline.
pub const DEADLINE_REASON: &str = "timeout";

/// The most deadlines one pass acts on; the rest are still due, so the next pass comes at once.
pub(crate) const DEADLINE_BATCH_MAX: u32 = 256;

/// Acts on the deadlines due at `now`, in one transaction, if a read finds any: a commit that
/// concerns no deadline costs no write lock.
pub(crate) async fn enforce(client: &Client, now: DateTime<Utc>) -> Result<()> {
    let next = client.journal().read(store::next_deadline)?;
    if next.is_none_or(|at| at > now) {
        return Ok(());
    }
    client
        .journal()
        .write(move |conn| {
            for id in store::due_deadlines(conn, now, DEADLINE_BATCH_MAX)? {
                reached(conn, id, now)?;
            }
            Ok(())
        })
        .await?;
    fail::fail_point!("runtime::after-deadline-commit", |_| std::process::abort());
    Ok(())
}

/// Execution `id`'s deadline has come: cancel it, or ask its holder to, with its children.
fn reached(conn: &Connection, id: Uuid, now: DateTime<Utc>) -> durably_journal::Result<()> {
    stop(conn, id, now, DEADLINE_REASON)?;
    crate::children::settle(conn, id, now)
}

/// Cancels execution `id` with `reason` when nobody runs it, or asks its holder to stop when
/// it is running; clears its deadline. An ended execution (a deadline a journal-level cancel
/// left behind) or one that is gone only loses its deadline.
pub(crate) fn stop(
    conn: &Connection,
    id: Uuid,
    now: DateTime<Utc>,
    reason: &str,
) -> durably_journal::Result<()> {
    match durably_journal::execution_status(conn, id)? {
        Some(Status::Running) => {
            request_cancel(conn, id, now, reason)?;
        }
        Some(status) if nobody_runs(status) => {
            cancel_now(conn, id, now, reason)?;
        }
        _ => {}
    }
    store::set_deadline(conn, id, None)
}

/// When the dispatcher must wake next without any other event: the earliest of the journal's
/// due times (timers, delayed starts) and the runtime's deadlines.
pub(crate) fn next_wake(conn: &Connection) -> durably_journal::Result<Option<DateTime<Utc>>> {
    Ok(match (next_due(conn)?, store::next_deadline(conn)?) {
        (Some(due), Some(deadline)) => Some(due.min(deadline)),
        (due, deadline) => due.or(deadline),
    })
}
