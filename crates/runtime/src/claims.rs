//! Claims of queued executions for this process, inside a journal transaction: the
//! dispatcher's passes and the end of a run that hands its place to a successor
//! ([`crate::handover`]) both claim through [`claim_from`], so both keep every limit the same
//! way.
//!
//! - A queue's limit across all processes is counted in the claiming transaction, which also
//!   marks the claims `running`: two processes' claims can never exceed it together (R2).
//! - This process's limits (over all queues, and per queue) are checked and its place taken
//!   under [`Capacity`]'s lock at the moment of each claim, in the writer's thread, so a claim
//!   of a pass, a hand-over and a [`crate::Runtime::run`] can never take the same place.
//! - Routing: candidates are read among the (kind, version) pairs this process serves, in the
//!   query ([`store::claim_candidates`]), so executions of other kinds, or of versions of its
//!   kinds that it does not serve, however many wait ahead, never hide the ones it can run;
//!   FIFO holds among the pairs it serves. An execution runs only on the code of the version
//!   it was started with: one of a version no process serves stays queued (and the recovery
//!   report counts it) until a process serving it starts.
//! - A candidate with a cancel request pending (its holder released it before it saw the
//!   request) is cancelled instead of claimed.

use chrono::{DateTime, Utc};
use durably_db::Connection;
use durably_journal::lifecycle::{record_execution_event, recorded_steps, running_in_queue};
use durably_journal::{Claimer, Status};
use uuid::Uuid;

use crate::cancel::cancel_if_requested;
use crate::dispatcher::{Capacity, EVENT_CLAIMED, QueueKey};
use crate::registry::Registry;
use crate::store;

/// The most candidates one claim reads in one queue.
pub(crate) const CLAIM_SCAN_MAX: u32 = 256;

/// How many candidates one claim reads beyond the places it may fill: a candidate with a
/// cancel request pending is cancelled instead, and one whose lock a process holds (leaked)
/// is passed over, among them. A read sized to the places, not to [`CLAIM_SCAN_MAX`], keeps a
/// hand-over (one place, at every run's end) to a few rows.
pub(crate) const CANDIDATES_SPARE_MAX: u32 = 16;

/// A claim taken in a transaction: the execution, the version it was started with, and the
/// queue whose place in this process it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Picked {
    pub(crate) id: Uuid,
    pub(crate) version: u32,
    pub(crate) queue: QueueKey,
}

/// Where a claim's place in this process comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place<'a> {
    /// A place free now (a dispatcher's pass).
    Free,
    /// The place a run ending in this transaction holds in queue `from`.
    HandedOver(&'a QueueKey),
}

/// Claims up to `wanted` candidates of `queue` of the kinds `registry` serves, each with a
/// place in `capacity` taken as `place` says, and appends each claim to `picked` at once: a
/// caller whose transaction then fails gives back every place in `picked`.
///
/// # Errors
/// A storage error.
pub(crate) fn claim_from(
    conn: &Connection,
    claimer: &mut Claimer,
    (registry, capacity): (&Registry, &Capacity),
    (queue, wanted): (&QueueKey, u32),
    place: Place<'_>,
    now: DateTime<Utc>,
    picked: &mut Vec<Picked>,
) -> durably_journal::Result<()> {
    // Locked before the count, so that claimers of this queue on other hosts count after
    // this claim commits (PostgreSQL; SQLite's writer serializes them already).
    let limited = match queue {
        Some(name) => store::lock_queue(conn, name)?,
        None => None,
    };
    let mut room = match (queue, limited) {
        (Some(name), Some(limit)) => {
            wanted.min(limit.saturating_sub(running_in_queue(conn, name)?))
        }
        _ => wanted,
    };
    if room == 0 {
        return Ok(());
    }
    let served: Vec<(&str, u32)> = registry.kinds().collect();
    let scan = room
        .saturating_add(CANDIDATES_SPARE_MAX)
        .min(CLAIM_SCAN_MAX);
    for (id, _, version) in store::claim_candidates(conn, queue.as_deref(), &served, scan)? {
        if room == 0 {
            break;
        }
        // Its holder released it with a cancel request pending: cancel, not run.
        if cancel_if_requested(conn, id, now)? {
            continue;
        }
        // Held across the claim, so that nothing else takes the place between the look and
        // the claim: the claim is a few statements in this thread.
        let mut places = capacity.places();
        if !places.fits(queue, place) {
            break;
        }
        if claimer.claim(conn, id, Status::Queued)?.is_none() {
            continue;
        }
        places.take(queue, place);
        drop(places);
        picked.push(Picked {
            id,
            version,
            queue: queue.clone(),
        });
        store::set_steps_at_open(conn, id, recorded_steps(conn, id)?)?;
        if limited.is_some() {
            let detail = serde_json::json!({ "queue": queue });
            record_execution_event(conn, now, id, None, EVENT_CLAIMED, &detail)?;
        }
        room -= 1;
    }
    Ok(())
}
