//! [`Fence`]: what one execution's handle needs to write: the writer, the lock and its epoch,
//! and what the next write carries (the deferred open and the pending step rows, see
//! [`super::deferred`]).
//!
//! Invariant: every write made through a fence first checks, in the same transaction, that
//! the fence's epoch is still the lock's epoch, or takes the lock itself (a deferred open). A
//! handle whose lock was taken over writes nothing ([`crate::Error::LockLost`]).
//!
//! Invariant (R5): once a cancel request has committed, no step row commits but the result of
//! a guarded step, whose intent committed before the request. Every write reads, in its
//! transaction, whether a request is pending (one seek on the primary key). If one is, the
//! write keeps only the guarded steps' results it carries and drops its other pending rows
//! (they ran before the request was seen, and run again if the execution is resumed); then
//! it is refused with nothing else written ([`crate::Error::CancelRequested`]), unless it is
//! one of the writes a request admits ([`CancelRequests`]). The order of commits, not a
//! clock, decides.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use durably_db::{Connection, Dialect, OptionalExtension, Sql, params};
use durably_lock::{Clock, Locker, format_timestamp};
use uuid::Uuid;

use super::deferred::{Carry, DeferredOpen, Pending};
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::step::FencingToken;
use crate::writer::{Undo, Writer};

/// The cancel check of every fenced write (R5), which runs before the fence. On PostgreSQL it
/// locks the execution row `FOR SHARE` whatever it finds, so a cancel request (an `UPDATE` of
/// the row) waits for the step writes in flight, and a write after the request sees it; and
/// since a takeover locks the same row `FOR UPDATE` before its epoch swap, the lock order is
/// the execution row, then its lock row, everywhere. SQLite's single writer serializes them.
const CANCEL_CHECK: Sql = Sql {
    sqlite: "SELECT cancel_requested_at IS NOT NULL, cancel_reason FROM executions
             WHERE execution_id = ?1",
    postgres: "SELECT cancel_requested_at IS NOT NULL, cancel_reason FROM executions
               WHERE execution_id = ?1 FOR SHARE",
};

/// The reason of the cancel request pending on execution `resource`, if one is (an empty
/// reason when none was given), read under [`CANCEL_CHECK`]'s lock.
fn pending_cancel_locked(conn: &Connection, resource: &str) -> Result<Option<String>> {
    let row: Option<(bool, Option<String>)> = conn
        .prepare_cached(conn.pick(&CANCEL_CHECK))?
        .query_row(params![resource], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(requested, reason)| requested.then(|| reason.unwrap_or_default())))
}

/// The cancel check and the fence in one statement, on PostgreSQL, for the writes whose fence
/// can run first (those without a caller's first hook): one round trip instead of two. The
/// lock order stays the execution row, then its lock row: the materialized CTE locks the
/// execution row as the outer scan reads it, and only then is the row's correlated subquery
/// evaluated, which locks the lock row `FOR SHARE` ([`Locker::fence`]'s lock). No row: the
/// execution row is gone; `held` false: the fence fails. Either way the write falls back to the
/// separate fence, which reports why.
const CANCEL_AND_FENCE_CHECK: &str = "WITH execution AS MATERIALIZED (
         SELECT execution_id, cancel_requested_at IS NOT NULL AS requested, cancel_reason
         FROM executions WHERE execution_id = ?1 FOR SHARE)
     SELECT requested, cancel_reason,
            EXISTS (SELECT 1 FROM locks WHERE resource = execution.execution_id
                    AND instance_id = ?2 AND epoch = ?3 FOR SHARE) AS held
     FROM execution";

/// What a fenced write's first statement found.
#[derive(Default)]
struct Checked {
    /// The reason of the pending cancel request (empty when none was given), if one is.
    request: Option<String>,
    /// The fence has passed already, in this transaction and under its lock. `false` leaves
    /// it to [`Locker::fence`] at its usual place, which fails there if it must.
    fenced: bool,
}

/// The cancel check of a fenced write on execution `resource`, with the fence at `epoch` in
/// the same statement when `fence_first` and the backend is PostgreSQL.
fn check_first(
    conn: &Connection,
    locker: &Locker,
    resource: &str,
    epoch: u64,
    fence_first: bool,
) -> Result<Checked> {
    if !fence_first || conn.dialect() != Dialect::Postgres {
        return Ok(Checked {
            request: pending_cancel_locked(conn, resource)?,
            fenced: false,
        });
    }
    locker.ensure_live()?;
    let instance = locker.instance_id().to_string();
    let row: Option<(bool, Option<String>, bool)> = conn
        .prepare_cached(CANCEL_AND_FENCE_CHECK)?
        .query_row(params![resource, instance, epoch as i64], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    Ok(
        row.map_or_else(Checked::default, |(requested, reason, held)| Checked {
            request: requested.then(|| reason.unwrap_or_default()),
            fenced: held,
        }),
    )
}

/// How many times a write that carries step results is tried when the database is busy. The
/// effects have already run, so giving up early would run them again (or, for a guarded step,
/// leave it ambiguous) for no good reason.
const CARRY_WRITE_TRIES_MAX: u32 = 3;

/// A caller's hook that runs first in a write of the handle, before what the write carries: if
/// it declines ([`Error::Aborted`]), nothing was taken, and what was pending stays pending.
pub(crate) type FirstHook = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

/// A [`FirstHook`] kept outside the request, so that a request that never ran leaves it here
/// for the next try.
type FirstSlot = Arc<Mutex<Option<FirstHook>>>;

/// What a write of the handle does while a cancel request is pending (R5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelRequests {
    /// Refused: nothing of it is written but the guarded steps' results it carries.
    Refuse,
    /// Written (`fail`, a release, `finish_cancelled`), without the pending rows it carries
    /// other than guarded steps' results.
    Admit,
    /// A write of what is pending alone: written if that is only guarded steps' results
    /// (a guarded step in flight finishes its protocol), refused otherwise.
    Carried,
}

/// What a write's transaction decided; a refusal commits only the guarded results it carried.
enum Fenced<T> {
    Done(T),
    Refused(String),
}

/// The writer, the lock and the epoch of one execution's handle.
#[derive(Debug)]
pub(crate) struct Fence {
    writer: Writer,
    locker: Arc<Locker>,
    id: Uuid,
    resource: Arc<str>,
    /// The lock's epoch; 0 until a deferred open has committed (no lock yet).
    epoch: Arc<AtomicU64>,
    clock: Arc<dyn Clock>,
    /// What the next write carries. Taken by the request that writes it, inside its
    /// transaction: a request that never ran (the database was busy) leaves it here.
    carry: Arc<Mutex<Carry>>,
    /// The seqs of the step rows pushed to the carry whose carrying write has not been
    /// confirmed committed yet: pending, or taken by a write still in flight (W1 with
    /// parallel steps, see `super::reservation`). A row lost with a failed write stays here.
    unconfirmed: Mutex<BTreeSet<u32>>,
    /// Keeps the journal open while a handle (or its heartbeat task) can still write. The
    /// journal's last drop joins its writer thread, which ends only once every writer handle
    /// is gone; a fence that outlived the journal would make that join wait on a task that
    /// cannot run meanwhile. Read only by an end that claims other executions, which need
    /// fences of their own.
    journal: Journal,
}

impl Fence {
    /// The fence of an execution whose lock this journal holds at `epoch`.
    pub(crate) fn new(journal: &Journal, id: Uuid, epoch: u64) -> Self {
        Self::with_carry(journal, id, epoch, Carry::default())
    }

    /// The fence of an execution not written yet: its first write inserts the row and takes
    /// the lock as `open` says.
    pub(crate) fn unopened(journal: &Journal, id: Uuid, open: DeferredOpen) -> Self {
        Self::with_carry(journal, id, 0, Carry::opening(open))
    }

    fn with_carry(journal: &Journal, id: Uuid, epoch: u64, carry: Carry) -> Self {
        Self {
            writer: journal.inner.writer.clone(),
            locker: Arc::clone(&journal.inner.locker),
            id,
            resource: Arc::from(id.to_string()),
            epoch: Arc::new(AtomicU64::new(epoch)),
            clock: Arc::clone(&journal.inner.clock),
            carry: Arc::new(Mutex::new(carry)),
            unconfirmed: Mutex::new(BTreeSet::new()),
            journal: journal.clone(),
        }
    }

    /// The journal this fence writes to.
    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The epoch as the token handed to step closures: 0 before a deferred open.
    pub(crate) fn token(&self) -> FencingToken {
        FencingToken(self.epoch.load(Ordering::SeqCst))
    }

    /// Whether the execution's row and lock are written (always, but for a deferred open
    /// whose first write has not committed).
    pub(crate) fn is_open(&self) -> bool {
        self.epoch.load(Ordering::SeqCst) != 0
    }

    /// Now, on the journal's clock.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// What the next write carries.
    pub(super) fn carry(&self) -> MutexGuard<'_, Carry> {
        self.carry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a step row to what the next write carries.
    pub(super) fn push(&self, pending: Pending) {
        self.unconfirmed_seqs().insert(pending.row.seq);
        self.carry().push(pending);
    }

    fn unconfirmed_seqs(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        self.unconfirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes step `seq`'s row back from what is pending: its write was declined or failed
    /// before it took the row.
    pub(super) fn drop_pending(&self, seq: u32) {
        self.carry().drop_step(seq);
        self.unconfirmed_seqs().remove(&seq);
    }

    /// The seqs of step rows not yet confirmed committed, in order.
    pub(super) fn unconfirmed(&self) -> Vec<u32> {
        self.unconfirmed_seqs().iter().copied().collect()
    }

    /// Which of `seqs` are not yet confirmed committed.
    pub(super) fn still_unconfirmed(&self, seqs: &[u32]) -> Vec<u32> {
        let unconfirmed = self.unconfirmed_seqs();
        seqs.iter()
            .copied()
            .filter(|seq| unconfirmed.contains(seq))
            .collect()
    }

    /// Runs `work(conn, resource, now)` in the writer after the fence check, in the same
    /// transaction, inside its own savepoint.
    pub(crate) async fn write<T, W>(&self, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        self.write_with(Undo::Savepoint, work).await
    }

    /// [`Fence::write`], with the way a failure of `work` is taken back chosen by the caller.
    /// Writes that change rows with one statement after the fence check (which only reads)
    /// take [`Undo::OneStatement`].
    pub(crate) async fn write_with<T, W>(&self, undo: Undo, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        self.write_at(undo, move |conn, resource, _, now| {
            work(conn, resource, now)
        })
        .await
    }

    /// [`Fence::write_with`], with `work` also handed the time of the write as a value, for the
    /// caller's hooks: `work(conn, resource, at, now)`, where `now` is `at` as stored.
    ///
    /// The write carries what is pending (the deferred open first, then the step rows, in
    /// seq order, before `work`): all of it commits with `work` or none of it does. A carrying
    /// write always takes a savepoint.
    pub(crate) async fn write_at<T, W>(&self, undo: Undo, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, DateTime<Utc>, &str) -> Result<T> + Send + 'static,
    {
        let carrying = !self.carry().is_empty();
        let undo = if carrying { Undo::Savepoint } else { undo };
        self.submit(undo, carrying, None, CancelRequests::Refuse, work)
            .await
    }

    /// [`Fence::write_with`] for the writes a cancel request admits: `fail` and
    /// `finish_cancelled` (see [`CancelRequests::Admit`]).
    pub(crate) async fn write_admitted<T, W>(&self, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        let carrying = !self.carry().is_empty();
        self.submit(
            Undo::Savepoint,
            carrying,
            None,
            CancelRequests::Admit,
            move |conn, resource, _, now| work(conn, resource, now),
        )
        .await
    }

    /// [`Fence::write`], with `first` run before anything else of the transaction (before the
    /// fence check and what the write carries), so that its [`Error::Aborted`] leaves what is
    /// pending untaken; `requests` says whether a pending cancel request refuses it.
    pub(crate) async fn write_first<T, W>(
        &self,
        first: FirstHook,
        requests: CancelRequests,
        work: W,
    ) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        let carrying = !self.carry().is_empty();
        let first = Arc::new(Mutex::new(Some(first)));
        self.submit(
            Undo::Savepoint,
            carrying,
            Some(first),
            requests,
            move |conn, resource, _, now| work(conn, resource, now),
        )
        .await
    }

    /// Writes what is pending, after `first` when there is one (which may write a row of its
    /// own); nothing when neither is there. A busy database is tried again, as long as the request that met it never ran
    /// (so what it carried is still pending). Returns whether it wrote.
    ///
    /// # Errors
    /// As [`Fence::write`]; after `first`'s [`Error::Aborted`] nothing was taken; after any
    /// other error but a busy database, what was pending is lost (it was taken by a
    /// transaction that did not commit).
    pub(crate) async fn flush(&self, first: Option<FirstHook>) -> Result<bool> {
        let hooked = first.is_some();
        let first: FirstSlot = Arc::new(Mutex::new(first));
        for try_number in 1..=CARRY_WRITE_TRIES_MAX {
            let undo = {
                let carry = self.carry();
                if carry.is_empty() && !hooked {
                    return Ok(false);
                }
                // One row with no hook is one statement after the fence check.
                if carry.is_one_plain_row() && !hooked {
                    Undo::OneStatement
                } else {
                    Undo::Savepoint
                }
            };
            let slot = hooked.then(|| Arc::clone(&first));
            // Every row of the write is in by then: a hooked step's row, its hook, the rest.
            let last = move |_: &Connection, _: &str, _, _: &str| {
                if hooked {
                    fail::fail_point!("journal::before-hooked-result-commit", |_| {
                        std::process::abort()
                    });
                }
                Ok(())
            };
            match self
                .submit(undo, true, slot, CancelRequests::Carried, last)
                .await
            {
                // Tried again only when the request never ran: the hook is still in its
                // slot, or (with none) what it was to carry is still pending.
                Err(Error::Busy { .. })
                    if try_number < CARRY_WRITE_TRIES_MAX
                        && if hooked {
                            is_kept(&first)
                        } else {
                            !self.carry().is_empty()
                        } => {}
                Err(error) => return Err(error),
                Ok(()) => return Ok(true),
            }
        }
        Err(Error::Inconsistent(
            "the carrying write loop ended without an answer".to_owned(),
        ))
    }

    /// Writes a deferred open that has not committed yet, with what is pending, before a step
    /// write whose hook runs first in its transaction: a step's hook writes rows that name the
    /// execution (an event, a message, a consumed message), so its row must be there before
    /// them. Nothing for a handle that is open. (A release's hook only reads, and its release
    /// opens and ends a handle that never wrote in one commit.)
    ///
    /// # Errors
    /// As [`Fence::flush`].
    pub(crate) async fn open_before_hook(&self) -> Result<()> {
        if !self.is_open() {
            self.flush(None).await?;
        }
        Ok(())
    }

    /// Checks that this handle still holds its lock, writing nothing (not even what is
    /// pending). A handle that never opened has no lock to lose.
    pub(crate) async fn check(&self) -> Result<()> {
        if !self.is_open() {
            return Ok(());
        }
        self.submit(
            Undo::OneStatement,
            false,
            None,
            CancelRequests::Refuse,
            |_, _, _, _| Ok(()),
        )
        .await
    }

    async fn submit<T, W>(
        &self,
        undo: Undo,
        carrying: bool,
        first: Option<FirstSlot>,
        requests: CancelRequests,
        work: W,
    ) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, DateTime<Utc>, &str) -> Result<T> + Send + 'static,
    {
        // A lost PostgreSQL instance sends nothing to the writer: another process may own the
        // execution by now. The fence checks again inside the transaction.
        self.locker.ensure_live()?;
        let locker = Arc::clone(&self.locker);
        let (id, resource, epoch) = (self.id, Arc::clone(&self.resource), Arc::clone(&self.epoch));
        let carry = carrying.then(|| Arc::clone(&self.carry));
        let at = self.clock.now();
        let now = format_timestamp(at);
        let opening = carrying && !self.is_open();
        let taken_seqs: Arc<Mutex<Vec<u32>>> = Arc::default();
        let taken_by_this = carrying.then(|| Arc::clone(&taken_seqs));
        let written = self
            .writer
            .write_for(self.id, undo, move |conn| {
                // An execution this write opens has no row yet, so no request. A write with a
                // first hook keeps its fence after the hook (so a hook that declines is
                // answered as such); any other checks its fence with the cancel request.
                let checked = if opening {
                    Checked::default()
                } else {
                    let epoch = epoch.load(Ordering::SeqCst);
                    check_first(conn, &locker, &resource, epoch, first.is_none())?
                };
                let (request, fenced) = (checked.request, checked.fenced);
                // The caller's first hook runs before the carry is taken, so that its refusal
                // leaves what is pending untaken; under a request, only an admitted write runs
                // it.
                let hooked = first.as_deref().is_some_and(is_kept);
                let run_hook = request.is_none() || requests == CancelRequests::Admit;
                if let Some(hook) = first.as_deref().filter(|_| run_hook).and_then(take) {
                    hook(conn)?;
                }
                if let Some(reason) = request {
                    if !fenced {
                        locker.fence(conn, &resource, epoch.load(Ordering::SeqCst))?;
                    }
                    if refused_under_request(conn, (id, &resource), carry, hooked, requests)? {
                        return Ok(Fenced::Refused(reason));
                    }
                } else if let Some(carry) = carry {
                    // Taken here, in the transaction: if it does not commit, it is lost, and
                    // the handle halts (see `super::deferred`).
                    let carry = taken(&carry);
                    if let Some(seqs) = &taken_by_this {
                        *seqs.lock().unwrap_or_else(PoisonError::into_inner) = carry.seqs();
                    }
                    carry.write(conn, &locker, (id, &resource), (&epoch, fenced), &now)?;
                } else if !fenced {
                    locker.fence(conn, &resource, epoch.load(Ordering::SeqCst))?;
                }
                work(conn, &resource, at, &now).map(Fenced::Done)
            })
            .await;
        if opening {
            if written.is_ok() {
                fail::fail_point!("journal::after-lock-commit", |_| std::process::abort());
            } else {
                // The open did not commit: there is no lock, whatever the request set.
                self.epoch.store(0, Ordering::SeqCst);
            }
        }
        if let Ok(Fenced::Done(_)) = &written {
            let taken =
                std::mem::take(&mut *taken_seqs.lock().unwrap_or_else(PoisonError::into_inner));
            let mut unconfirmed = self.unconfirmed_seqs();
            for seq in taken {
                unconfirmed.remove(&seq);
            }
        }
        match written? {
            Fenced::Done(value) => Ok(value),
            Fenced::Refused(reason) => Err(Error::CancelRequested {
                execution_id: self.id,
                reason,
            }),
        }
    }

    /// Refreshes the lease heartbeat of the lock; nothing before a deferred open.
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] when the lock was taken over.
    pub(crate) async fn heartbeat(&self) -> Result<()> {
        if !self.is_open() {
            return Ok(());
        }
        let locker = Arc::clone(&self.locker);
        let (resource, epoch) = (
            Arc::clone(&self.resource),
            self.epoch.load(Ordering::SeqCst),
        );
        self.writer
            .write(move |conn| Ok(locker.heartbeat(conn, &resource, epoch)?))
            .await
    }

    /// Releases the lock inside a transaction the caller is already in (a finalize). A
    /// deferred open in the same transaction has set the epoch by then.
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] when the lock was taken over.
    pub(crate) fn release_in(&self, conn: &Connection) -> Result<()> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        Ok(self.locker.release(conn, &self.resource, epoch)?)
    }

    /// Releases the lock without waiting for the release to commit (a `Drop` cannot wait).
    /// A handle that never opened holds no lock, and writes nothing.
    pub(crate) fn release_detached(&self) {
        if !self.is_open() {
            return;
        }
        let locker = Arc::clone(&self.locker);
        let (resource, epoch) = (
            Arc::clone(&self.resource),
            self.epoch.load(Ordering::SeqCst),
        );
        self.writer.write_detached(self.id, move |conn| {
            release_if_held(conn, &locker, &resource, epoch);
            Ok(())
        });
    }
}

/// In a write's transaction that found a cancel request pending (R5): writes the guarded
/// steps' results the write carries and drops its other pending rows, then says whether the
/// write is refused. A write of what is pending alone is refused only if it dropped a row or
/// has a hook of the caller's (a step of `step_with`, which is never guarded).
fn refused_under_request(
    conn: &Connection,
    (id, resource): (Uuid, &str),
    carry: Option<Arc<Mutex<Carry>>>,
    hooked: bool,
    requests: CancelRequests,
) -> Result<bool> {
    let dropped = match carry {
        Some(carry) => taken(&carry).write_guarded_results(conn, id, resource)?,
        None => false,
    };
    Ok(match requests {
        CancelRequests::Refuse => true,
        CancelRequests::Admit => false,
        CancelRequests::Carried => dropped || hooked,
    })
}

/// Takes what the handle carries, leaving it empty.
fn taken(carry: &Mutex<Carry>) -> Carry {
    std::mem::take(&mut *carry.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Takes the hook out of its slot: a request runs it at most once.
fn take<H>(slot: &Mutex<Option<H>>) -> Option<H> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Whether the hook is still in its slot, that is whether no request has run it.
fn is_kept<H>(slot: &Mutex<Option<H>>) -> bool {
    slot.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some()
}

/// Releases a lock if this instance still holds it; a lock already lost needs no release.
fn release_if_held(conn: &Connection, locker: &Locker, resource: &str, epoch: u64) {
    if let Err(error) = locker.release(conn, resource, epoch) {
        tracing::debug!(execution_id = resource, %error, "lock already gone at release");
    }
}
