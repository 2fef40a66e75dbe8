//! Cancellation of workflow runs (plan §4.6): [`Client::cancel`] from any process, and how a
//! run here sees it.
//!
//! An execution nobody drives (queued, waiting, stuck, awaiting an operator, interrupted, or
//! running with a dead holder) is cancelled at once. One a live process runs gets a request,
//! which that process sees two ways:
//! - **strictly**: the journal refuses every write of the run after the request commits, but a
//!   guarded step's result, `fail` and `finish_cancelled` (R5), so no step is recorded after it
//!   whatever the run does;
//! - **fast**: the run's [`CancelSignal`] trips within one watcher poll, so a run between steps
//!   stops before its next step and a run waiting stops at once.
//!
//! Either way the run ends `cancelled` through `finish_cancelled`. A step's closure already
//! running is not interrupted: a guarded step finishes its protocol, a pure or idempotent
//! step's result is refused and the step is not recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use durably_db::Connection;
use durably_journal::lifecycle::{CANCEL_REASON_BYTES_MAX, cancel_now, cancel_requests};
use durably_journal::{CancelOutcome, Execution, Status};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::client::Client;
use crate::dispatcher::Dispatch;
use crate::error::{Error, Result};
use crate::store;
use crate::task::Ran;
use crate::waiting::Waits;

/// The most pending requests one check after a commit reads. Requests are pending only until
/// their holders see them (a poll) or are found dead (a sweep), so more than this at once is
/// a sign of trouble; the rest are seen at the next change.
pub(crate) const CANCEL_REQUESTS_SCAN_MAX: u32 = 4096;

/// Whether a run has been asked to stop, and why: tripped by a cancel request (seen by the
/// watcher, or refused by the journal), or by the execution's deadline (reason `timeout`).
/// Get it with [`crate::WorkflowContext::cancellation`] to stop long work inside a step's
/// closure early (a closure is never interrupted by the runtime).
#[derive(Debug, Clone)]
pub struct CancelSignal {
    execution_id: Uuid,
    reason: Arc<watch::Sender<Option<String>>>,
}

impl CancelSignal {
    pub(crate) fn new(execution_id: Uuid) -> Self {
        Self {
            execution_id,
            reason: Arc::new(watch::Sender::new(None)),
        }
    }

    /// Trips the signal; the first reason stays.
    pub(crate) fn trip(&self, reason: &str) {
        self.reason.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason.to_owned());
            true
        });
    }

    /// Why the run was asked to stop; `None` while it was not.
    pub fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// [`Error::Cancelled`] with the reason, once the run was asked to stop: what a wait of
    /// the run returns then.
    pub(crate) async fn stopped(&self) -> Error {
        Error::Cancelled {
            execution_id: self.execution_id,
            reason: self.cancelled().await,
        }
    }

    /// Ends when the run is asked to stop, with the reason; at once if it was already.
    pub async fn cancelled(&self) -> String {
        let mut receiver = self.reason.subscribe();
        loop {
            if let Some(reason) = receiver.borrow_and_update().clone() {
                return reason;
            }
            // The sender lives in `self`, so the channel stays open while this waits.
            if receiver.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// The runs of this process by execution id, so a request seen by the watcher trips the
/// right signal.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    signals: Mutex<HashMap<Uuid, CancelSignal>>,
    /// Notified when the last run ends, so the request watcher can end after a shutdown.
    emptied: Notify,
}

impl Runs {
    fn signals(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, CancelSignal>> {
        // A map of signals is valid whatever a panicking holder did.
        self.signals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, id: Uuid, signal: CancelSignal) {
        self.signals().insert(id, signal);
    }

    fn remove(&self, id: Uuid) {
        let mut signals = self.signals();
        signals.remove(&id);
        if signals.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    fn is_empty(&self) -> bool {
        self.signals().is_empty()
    }

    fn trip(&self, id: Uuid, reason: &str) {
        if let Some(signal) = self.signals().get(&id) {
            signal.trip(reason);
        }
    }

    async fn until_empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            if self.is_empty() {
                return;
            }
            emptied.await;
        }
    }
}

/// What one run needs to be stopped: its signal, registered with this process's runs while
/// the run lives, and the timer of its deadline.
#[derive(Debug)]
pub(crate) struct RunWatch {
    id: Uuid,
    signal: CancelSignal,
    /// The client, clock and parking threshold of the run's waits.
    waits: Arc<Waits>,
    runs: Arc<Runs>,
    deadline: Option<tokio::task::JoinHandle<()>>,
}

impl RunWatch {
    /// Watches the run of `id` that is about to start, registered with `runs`. A request
    /// committed before the run was registered trips its signal at once, since no later
    /// change may announce it.
    pub(crate) fn start(waits: &Arc<Waits>, runs: &Arc<Runs>, id: Uuid) -> Self {
        let signal = CancelSignal::new(id);
        runs.insert(id, signal.clone());
        let found = waits.client.journal().read(|conn| {
            Ok((
                durably_journal::lifecycle::pending_cancel(conn, id)?,
                store::deadline_at(conn, id)?,
            ))
        });
        let (pending, deadline) = found.unwrap_or_else(|error| {
            // The fence still refuses the run's writes after a request, and the due pass still
            // enforces the deadline: only the fast path is lost.
            tracing::warn!(execution_id = %id, %error, "cannot read a run's cancel request");
            (None, None)
        });
        if let Some(reason) = pending {
            signal.trip(&reason);
        }
        let deadline = deadline.map(|at| {
            let (clock, signal) = (Arc::clone(&waits.clock), signal.clone());
            // The holder's own timer: the deadline trips the run without waiting for the due
            // pass's request to be seen.
            tokio::spawn(async move {
                clock.sleep_until(at).await;
                signal.trip(crate::deadlines::DEADLINE_REASON);
            })
        });
        Self {
            id,
            signal,
            waits: Arc::clone(waits),
            runs: Arc::clone(runs),
            deadline,
        }
    }

    pub(crate) fn signal(&self) -> &CancelSignal {
        &self.signal
    }

    pub(crate) fn waits(&self) -> &Arc<Waits> {
        &self.waits
    }

    /// Ends the run's execution `cancelled` with `reason`, clearing its deadline in the same
    /// transaction. A lock lost meanwhile leaves it to whoever took it.
    pub(crate) async fn finish_cancelled(&self, execution: Execution, reason: &str) -> Result<Ran> {
        let id = self.id;
        tracing::info!(execution_id = %id, "a run stops on a cancel");
        fail::fail_point!("runtime::after-cancel-observed", |_| std::process::abort());
        execution
            .finish_cancelled(
                reason,
                crate::task::clear_deadline(id, self.waits.client.now()),
            )
            .await?;
        Ok(Ran::Cancelled)
    }

    /// Passes an ending's result on, unless a committed cancel request refused it (it came
    /// after the run's last step, before the watcher saw it): the refused handle is gone, its
    /// lock released, so the execution is cancelled as an operator would.
    pub(crate) async fn unless_cancelled(
        &self,
        ended: durably_journal::Result<()>,
        ran: Ran,
    ) -> Result<Ran> {
        match ended {
            Ok(()) => Ok(ran),
            Err(durably_journal::Error::CancelRequested { reason, .. }) => {
                self.waits.client.cancel(self.id, &reason).await?;
                Ok(Ran::Cancelled)
            }
            Err(error) => Err(error.into()),
        }
    }
}

impl Drop for RunWatch {
    fn drop(&mut self) {
        if let Some(timer) = &self.deadline {
            timer.abort();
        }
        self.runs.remove(self.id);
    }
}

/// Trips the signals of this process's runs whose executions got a cancel request, after
/// every commit the watcher reports, until the runtime stops and its last run has ended.
pub(crate) async fn watch_requests(dispatch: Arc<Dispatch>) -> Result<()> {
    let mut changes = dispatch.client.changes()?;
    let mut stop = dispatch.stop.subscribe();
    let stopped_and_idle = async {
        let _ = stop.wait_for(|stopped| *stopped).await;
        dispatch.runs.until_empty().await;
    };
    tokio::pin!(stopped_and_idle);
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return Err(Error::Watcher(std::io::Error::other("the watcher thread ended")));
                }
            }
            () = &mut stopped_and_idle => return Ok(()),
        }
        if dispatch.runs.is_empty() {
            continue;
        }
        let requests = dispatch
            .client
            .journal()
            .read(|conn| cancel_requests(conn, CANCEL_REQUESTS_SCAN_MAX));
        match requests {
            Ok(requests) => {
                for (id, reason) in requests {
                    dispatch.runs.trip(id, &reason);
                }
            }
            // The next change reads again; the fence refuses the runs' writes meanwhile.
            Err(error) => tracing::warn!(%error, "cannot read pending cancel requests"),
        }
    }
}

/// Cancels execution `id`, found by a claim or a recovery, if a cancel request is pending on
/// it (its holder died or released it before ending it): it is cancelled instead of run.
/// Returns whether it was.
pub(crate) fn cancel_if_requested(
    conn: &Connection,
    id: Uuid,
    now: chrono::DateTime<chrono::Utc>,
) -> durably_journal::Result<bool> {
    let Some(reason) = durably_journal::lifecycle::pending_cancel(conn, id)? else {
        return Ok(false);
    };
    let cancelled = cancel_now(conn, id, now, &reason)?.is_some();
    if cancelled {
        crate::task::clear_deadline(id, now)(conn)?;
    }
    Ok(cancelled)
}

impl Client {
    /// Cancels execution `id` with `reason`, from any process:
    /// - an execution nobody runs (`queued`, `waiting`, `stuck`, `awaiting_operator`,
    ///   `interrupted`, or `running` with a dead holder) is `cancelled` at once:
    ///   [`CancelOutcome::Cancelled`];
    /// - one a live process runs gets a request: [`CancelOutcome::Requested`] with the holder's
    ///   pid. That process stops the run before its next step (at once while it waits), lets a
    ///   guarded step already in flight finish, and ends it `cancelled`. No step is recorded
    ///   after the request commits.
    ///
    /// Its handle's [`crate::WorkflowHandle::result`] then returns [`Error::Cancelled`] with
    /// the reason. A step left in the ambiguous window stays there, for an operator, should
    /// the execution be resumed ([`Client::resume`]).
    ///
    /// # Errors
    /// Nothing is written on any error: [`Error::NotFound`] for an unknown id,
    /// [`Error::AlreadyEnded`] for a finished execution, [`Error::PayloadTooLarge`] for a
    /// reason over [`CANCEL_REASON_BYTES_MAX`] bytes, [`Error::Journal`] for storage (and a
    /// retryable `Locked` when a live process holds an execution that is not running, a
    /// moment's state).
    pub async fn cancel(&self, id: Uuid, reason: &str) -> Result<CancelOutcome> {
        if reason.len() > CANCEL_REASON_BYTES_MAX {
            return Err(Error::PayloadTooLarge {
                what: format!("the cancel reason of execution {id}"),
                bytes: reason.len(),
                max: CANCEL_REASON_BYTES_MAX,
            });
        }
        let now = self.now();
        let cancelled = self
            .journal()
            .operator()
            .cancel_with(id, reason, crate::task::clear_deadline(id, now))
            .await;
        match cancelled {
            Ok(outcome) => Ok(outcome),
            Err(durably_journal::Error::NotFound(_)) => Err(Error::NotFound(id)),
            Err(durably_journal::Error::Refused(refusal)) => Err(self
                .ended(id)
                .unwrap_or_else(|_| Error::Journal(durably_journal::Error::Refused(refusal)))),
            Err(error) => Err(error.into()),
        }
    }

    /// [`Error::AlreadyEnded`] with the status execution `id` ended in.
    fn ended(&self, id: Uuid) -> Result<Error> {
        let status = self
            .journal()
            .read(|conn| durably_journal::execution_status(conn, id))?
            .filter(|status| status.is_final())
            .ok_or(Error::NotFound(id))?;
        Ok(Error::AlreadyEnded {
            execution_id: id,
            status,
        })
    }
}

/// Whether `status` is one a cancel moves at once, with no holder to ask.
pub(crate) fn nobody_runs(status: Status) -> bool {
    status.is_parked() || status == Status::Interrupted
}
