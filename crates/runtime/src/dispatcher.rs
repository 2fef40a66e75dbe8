//! The dispatcher: one task per runtime that claims queued executions of the kinds this
//! process serves, within every limit, and runs each in a task of its own.
//!
//! It wakes on the first of: an in-process notify (a start, a finished task), the watcher (a
//! commit by another process), or a safety tick. Each pass claims in one writer request:
//! per queue, at most the room left under the queue's limit across all processes (counted in
//! the claiming transaction, so two processes can never exceed it together), this process's
//! limit for the queue, and its limit over all queues.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use durably_journal::Status;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::client::Client;
use crate::clock::Clock;
use crate::error::Result;
use crate::parking::wake_parked;
use crate::recovery::recover;
use crate::store;
use crate::task::{self, HeldSlot, Ran};
use crate::waiting::Waits;
use chrono::{DateTime, Utc};
use durably_journal::lifecycle::{
    Wake, claimable, clear_not_before, due, next_due, record_execution_event, recorded_steps,
    running_in_queue,
};
use rusqlite::Connection;

/// The most due executions one pass moves; the rest wait for the next pass, which comes at
/// once because they are still due.
pub(crate) const DUE_BATCH_MAX: u32 = 256;

/// The most queued rows one claim pass reads per queue, served kinds or not.
pub(crate) const CLAIM_SCAN_MAX: u32 = 256;

/// The longest the dispatcher sleeps without a notify: a bound on how late a missed wake-up
/// is found.
const SAFETY_TICK: Duration = Duration::from_secs(1);

/// A queue as this process sees it; `None` is "no queue".
type QueueKey = Option<String>;

/// This process's limits and what it runs now.
#[derive(Debug)]
pub(crate) struct Capacity {
    /// The most executions this process runs at once, over all queues.
    pub(crate) concurrency_max: u32,
    /// The most executions of each served queue this process runs at once.
    pub(crate) process_concurrency_max: BTreeMap<QueueKey, u32>,
    /// Executions running here, per queue.
    running: Mutex<BTreeMap<QueueKey, u32>>,
}

impl Capacity {
    pub(crate) fn new(
        concurrency_max: u32,
        process_concurrency_max: BTreeMap<QueueKey, u32>,
    ) -> Self {
        Self {
            concurrency_max,
            process_concurrency_max,
            running: Mutex::new(BTreeMap::new()),
        }
    }

    /// The room this process has in each served queue now.
    fn rooms(&self) -> Vec<(QueueKey, u32)> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let total: u32 = running.values().sum();
        let free = self.concurrency_max.saturating_sub(total);
        self.process_concurrency_max
            .iter()
            .map(|(queue, max)| {
                let mine = running.get(queue).copied().unwrap_or(0);
                (queue.clone(), free.min(max.saturating_sub(mine)))
            })
            .filter(|(_, room)| *room > 0)
            .collect()
    }

    /// Takes one place in `queue` for a run this process starts itself ([`crate::Runtime::run`])
    /// if it has room; give it back with `add(queue, -1)`.
    pub(crate) fn try_take(&self, queue: &QueueKey) -> bool {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let total: u32 = running.values().sum();
        let max = self
            .process_concurrency_max
            .get(queue)
            .copied()
            .unwrap_or(0);
        let mine = running.entry(queue.clone()).or_default();
        if total >= self.concurrency_max || *mine >= max {
            return false;
        }
        *mine += 1;
        true
    }

    pub(crate) fn add(&self, queue: &QueueKey, delta: i64) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let count = running.entry(queue.clone()).or_default();
        *count = u32::try_from(i64::from(*count) + delta).unwrap_or(0);
    }
}

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
}

/// Runs passes until stopped.
pub(crate) async fn run(dispatch: Arc<Dispatch>) -> Result<()> {
    let mut changes = dispatch.client.changes()?;
    let mut stop = dispatch.stop.subscribe();
    let mut sweep = tokio::time::interval(dispatch.sweep_interval);
    // The runtime's start has just recovered: the first periodic pass waits a full interval.
    sweep.reset();
    loop {
        if *stop.borrow_and_update() {
            return Ok(());
        }
        if dispatch.recover_soon.swap(false, Ordering::SeqCst)
            && let Err(error) = recover(&dispatch.client, dispatch.resume_failures_max).await
        {
            tracing::warn!(%error, "a recovery pass failed");
        }
        // A failed pass (a busy file, a full disk) claimed nothing that commits; the next
        // wake-up, at the latest the safety tick, tries again.
        let next_due = match pass(&dispatch).await {
            Ok(next_due) => next_due,
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
    let (work, next) = dispatch.client.journal().read(|conn| {
        let next = next_due(conn)?;
        let mut work = next.is_some_and(|at| at <= now);
        for (queue, _) in &rooms {
            if work {
                break;
            }
            work = !claimable(conn, queue.as_deref(), 1)?.is_empty();
        }
        Ok((work, next))
    })?;
    if !work {
        return Ok(next);
    }
    claim_pass(dispatch, rooms, now).await?;
    Ok(dispatch.client.journal().read(next_due)?)
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

/// One claim pass after the due pass, in the same transaction: claims what fits, opens each
/// claim and spawns its task.
async fn claim_pass(
    dispatch: &Arc<Dispatch>,
    rooms: Vec<(QueueKey, u32)>,
    now: DateTime<Utc>,
) -> Result<()> {
    let served: Vec<(String, u32)> = dispatch
        .client
        .registry()
        .kinds()
        .map(|(kind, version)| (kind.to_owned(), version))
        .collect();
    // Each claim's version, and whether it holds a slot of a limited queue.
    let versions = Arc::new(Mutex::new(BTreeMap::<Uuid, (u32, bool)>::new()));
    let picked = Arc::clone(&versions);
    let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let woke = Arc::clone(&woken);
    let claims = dispatch
        .client
        .journal()
        .claim_executions(move |conn, claimer| {
            woke.store(due_pass(conn, now)?, Ordering::SeqCst);
            let mut picked = picked.lock().unwrap_or_else(PoisonError::into_inner);
            for (queue, room) in rooms {
                let limited = match &queue {
                    Some(name) => store::stored_queue(conn, name)?.and_then(|q| q.concurrency_max),
                    None => None,
                };
                let mut room = match (&queue, limited) {
                    // Counted in this transaction, which also marks the claims running: two
                    // processes' claims can never exceed the limit together.
                    (Some(name), Some(limit)) => {
                        room.min(limit.saturating_sub(running_in_queue(conn, name)?))
                    }
                    _ => room,
                };
                for (id, kind) in claimable(conn, queue.as_deref(), CLAIM_SCAN_MAX)? {
                    if room == 0 {
                        break;
                    }
                    // A kind or version this process does not serve is passed over, so FIFO
                    // holds among the kinds it serves.
                    let Some(version) = store::started_version(conn, id)? else {
                        continue;
                    };
                    if !served.iter().any(|(k, v)| *k == kind && *v == version) {
                        continue;
                    }
                    if claimer.claim(conn, id, Status::Queued)?.is_none() {
                        continue;
                    }
                    store::set_steps_at_open(conn, id, recorded_steps(conn, id)?)?;
                    if limited.is_some() {
                        let detail = serde_json::json!({ "queue": queue });
                        record_execution_event(conn, now, id, None, EVENT_CLAIMED, &detail)?;
                    }
                    picked.insert(id, (version, limited.is_some()));
                    room -= 1;
                }
            }
            Ok(())
        })
        .await?;
    if woken.load(Ordering::SeqCst) > 0 {
        fail::fail_point!("runtime::after-wake-commit", |_| std::process::abort());
    }
    let versions = std::mem::take(&mut *versions.lock().unwrap_or_else(PoisonError::into_inner));
    for claim in claims {
        let row = claim.row().clone();
        let Some((version, counted)) = versions.get(&row.execution_id).copied() else {
            continue;
        };
        let slot = match (&row.queue, counted) {
            (Some(queue), true) => Some(HeldSlot {
                queue: queue.clone(),
                clock: Arc::clone(&dispatch.clock),
            }),
            _ => None,
        };
        let execution = dispatch.client.journal().open_claim(claim)?;
        dispatch.capacity.add(&row.queue, 1);
        let dispatch = Arc::clone(dispatch);
        tokio::spawn(async move {
            if let Some(workflow) = dispatch.client.registry().get(&row.kind, version) {
                let waits = Arc::clone(&dispatch.waits);
                match task::run(execution, version, workflow, waits, slot).await {
                    Ok(Ran::Halted(reason)) => {
                        tracing::warn!(execution_id = %row.execution_id, %reason, "a workflow run stopped");
                        record_halt(&dispatch, row.execution_id, reason).await;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(execution_id = %row.execution_id, %error, "a workflow run could not end");
                    }
                }
            }
            dispatch.capacity.add(&row.queue, -1);
            dispatch.notify.notify_one();
        });
    }
    Ok(())
}
