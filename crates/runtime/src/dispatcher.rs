//! The dispatcher: one task per runtime that claims queued executions of the kinds this
//! process serves, within every limit, and runs each in a task of its own.
//!
//! It wakes on the first of: an in-process notify (a start, a finished task), the watcher (a
//! commit by another process), or a safety tick. Each pass claims in one writer request:
//! per queue, at most the room left under the queue's limit across all processes (counted in
//! the claiming transaction, so two processes can never exceed it together), this process's
//! limit for the queue, and its limit over all queues.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use durably_journal::Status;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::cancel::Runs;
pub(crate) use crate::capacity::{Capacity, QueueKey};
use crate::claims::{Picked, Place, claim_from};
use crate::client::Client;
use crate::clock::Clock;
use crate::deadlines;
use crate::error::Result;
use crate::parking::wake_parked;
use crate::recovery::recover;
use crate::runs;
use crate::store;
use crate::telemetry;
use crate::waiting::Waits;
use chrono::{DateTime, Utc};
use durably_db::Connection;
use durably_journal::lifecycle::{Wake, clear_not_before, due};

/// The most due executions one pass moves; the rest wait for the next pass, which comes at
/// once because they are still due.
pub(crate) const DUE_BATCH_MAX: u32 = 256;

/// The longest the dispatcher sleeps without a notify: a bound on how late a missed wake-up
/// is found.
const SAFETY_TICK: Duration = Duration::from_secs(1);

/// What the dispatcher and its tasks share.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) client: Client,
    pub(crate) capacity: Capacity,
    /// Woken by starts and by finished tasks.
    pub(crate) notify: Notify,
    /// Set to end the dispatcher.
    pub(crate) stop: watch::Sender<bool>,
    /// The journal's clock, which due times are compared with and slept on.
    pub(crate) clock: Arc<dyn Clock>,
    /// Failed runs in a row, without progress, after which an execution is `stuck`.
    pub(crate) resume_failures_max: u32,
    /// How often the dispatcher sweeps and recovers even if no run of its own failed, for
    /// executions of processes that died since.
    pub(crate) sweep_interval: Duration,
    /// Set when a run here stopped abnormally, so the next pass recovers it at once.
    pub(crate) recover_soon: AtomicBool,
    /// The clock, the client and the parking threshold every task's waits use.
    pub(crate) waits: Arc<Waits>,
    /// The runs of this process, whose signals cancel requests trip.
    pub(crate) runs: Arc<Runs>,
}

/// Runs passes until stopped.
pub(crate) async fn run(dispatch: Arc<Dispatch>) -> Result<()> {
    let mut changes = dispatch.client.changes()?;
    let mut stop = dispatch.stop.subscribe();
    let mut sweep = tokio::time::interval(dispatch.sweep_interval);
    // The runtime's start has just recovered: the first periodic pass waits a full interval.
    sweep.reset();
    publish_counts(&dispatch);
    loop {
        if *stop.borrow_and_update() {
            return Ok(());
        }
        if dispatch.recover_soon.swap(false, Ordering::SeqCst) {
            if let Err(error) = recover(&dispatch.client, dispatch.resume_failures_max).await {
                tracing::warn!(%error, "a recovery pass failed");
            }
            publish_counts(&dispatch);
        }
        // A failed pass (a busy file, a full disk) claimed nothing that commits; the next
        // wake-up, at the latest the safety tick, tries again.
        let next_due = match pass(&dispatch).await {
            Ok(next_due) => next_due,
            // A lost PostgreSQL instance may have been taken over already: it claims nothing
            // more, and its runs halt at their next write, which fails the same way.
            Err(crate::Error::Journal(error @ durably_journal::Error::InstanceLost { .. })) => {
                return Err(error.into());
            }
            Err(error) => {
                tracing::warn!(%error, "a dispatcher pass failed");
                None
            }
        };
        let due = async {
            match next_due {
                Some(at) => dispatch.clock.sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = dispatch.notify.notified() => {}
            changed = changes.changed() => changed.map_err(|_| watcher_ended())?,
            () = due => {}
            _ = sweep.tick() => dispatch.recover_soon.store(true, Ordering::SeqCst),
            () = tokio::time::sleep(SAFETY_TICK) => {}
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
        }
    }
}

/// One pass: the due pass and the claims, in one writer request when a read finds either
/// has work, so a commit that concerns nothing here costs no write lock. Returns the next
/// due time to wake at.
async fn pass(dispatch: &Arc<Dispatch>) -> Result<Option<DateTime<Utc>>> {
    let rooms = dispatch.capacity.rooms();
    let now = dispatch.clock.now();
    let served: Vec<(&str, u32)> = dispatch.client.registry().kinds().collect();
    deadlines::enforce(&dispatch.client, now).await?;
    let (work, next) = dispatch.client.journal().read(|conn| {
        let next = deadlines::next_wake(conn)?;
        let mut work = next.is_some_and(|at| at <= now);
        for (queue, _) in &rooms {
            if work {
                break;
            }
            work = store::has_candidate(conn, queue.as_deref(), &served)?;
        }
        Ok((work, next))
    })?;
    if !work {
        return Ok(next);
    }
    claim_pass(dispatch, rooms, now).await?;
    Ok(dispatch.client.journal().read(deadlines::next_wake)?)
}

/// Sets the gauges of the journal's unfinished executions ([`telemetry::publish_counts`]).
pub(crate) fn publish_counts(dispatch: &Dispatch) {
    let queues = dispatch.capacity.queues();
    if let Err(error) = telemetry::publish_counts(&dispatch.client, &queues) {
        tracing::warn!(%error, "cannot read the execution counts for the metrics");
    }
}

fn watcher_ended() -> crate::Error {
    crate::Error::Watcher(std::io::Error::other("the watcher thread ended"))
}

/// The audit event of a claim into a limited queue: with the events that end a run there, it
/// lets a checker recount a queue's slots in commit order.
pub(crate) const EVENT_CLAIMED: &str = "claimed";

/// Records why a run here stopped abnormally and has the next pass recover it: its handle is
/// gone, so the sweep finds it `interrupted` and the recovery counts the failure.
pub(crate) async fn record_halt(dispatch: &Dispatch, id: Uuid, reason: String) {
    let failure = serde_json::json!({ "message": reason });
    let recorded = dispatch
        .client
        .journal()
        .write(move |conn| store::set_last_failure(conn, id, &failure))
        .await;
    if let Err(error) = recorded {
        tracing::warn!(execution_id = %id, %error, "cannot record why a run stopped");
    }
    dispatch.recover_soon.store(true, Ordering::SeqCst);
}

/// Moves what is due at `now` (at most [`DUE_BATCH_MAX`]): a waiting execution is woken
/// (queued again), a queued one whose not-before time has come becomes claimable. Returns how
/// many were woken.
fn due_pass(conn: &Connection, now: DateTime<Utc>) -> durably_journal::Result<usize> {
    let mut woken = 0;
    for (id, status) in due(conn, now, DUE_BATCH_MAX)? {
        match status {
            Status::Waiting => {
                woken += usize::from(wake_parked(conn, id, now, Wake::Due)?);
            }
            Status::Queued => {
                clear_not_before(conn, id)?;
            }
            _ => {}
        }
    }
    Ok(woken)
}

/// One claim pass after the due pass, in the same transaction: claims what fits, and spawns
/// each claim's task.
async fn claim_pass(
    dispatch: &Arc<Dispatch>,
    rooms: Vec<(QueueKey, u32)>,
    now: DateTime<Utc>,
) -> Result<()> {
    let picked = Arc::new(Mutex::new(Vec::<Picked>::new()));
    let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (claiming, into, woke) = (
        Arc::clone(dispatch),
        Arc::clone(&picked),
        Arc::clone(&woken),
    );
    let claims = dispatch
        .client
        .journal()
        .claim_executions(move |conn, claimer| {
            woke.store(due_pass(conn, now)?, Ordering::SeqCst);
            let mut picked = into.lock().unwrap_or_else(PoisonError::into_inner);
            let limits = (claiming.client.registry(), &claiming.capacity);
            for (queue, room) in rooms {
                claim_from(
                    conn,
                    claimer,
                    limits,
                    (&queue, room),
                    Place::Free,
                    now,
                    &mut picked,
                )?;
            }
            Ok(())
        })
        .await;
    let picked = std::mem::take(&mut *picked.lock().unwrap_or_else(PoisonError::into_inner));
    let claims = match claims {
        Ok(claims) => claims,
        Err(error) => {
            // Nothing was claimed: the places the transaction took are free again.
            for picked in &picked {
                dispatch.capacity.add(&picked.queue, -1);
            }
            return Err(error.into());
        }
    };
    if woken.load(Ordering::SeqCst) > 0 {
        fail::fail_point!("runtime::after-wake-commit", |_| std::process::abort());
    }
    for claim in claims {
        let id = claim.row().execution_id;
        if let Some(picked) = picked.iter().find(|picked| picked.id == id) {
            runs::spawn(dispatch, claim, picked.version, picked.queue.clone());
        }
    }
    Ok(())
}
