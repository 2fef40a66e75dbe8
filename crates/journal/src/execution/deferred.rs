//! Write-behind and the deferred open: what a handle keeps instead of writing at once, and the
//! rules that decide when it is written. The runtime turns both on; a hand-driven handle
//! writes through (its callers rely on "returned, so durable").
//!
//! With [`Execution::defer_results`], step results wait in the handle (its carry) and ride on
//! the handle's next write:
//! - W1: before an idempotent closure runs, everything pending is written, so an effect only
//!   ever sees durable inputs: a re-run after a crash repeats its key with the same inputs.
//! - W2: a guarded step's intent carries everything pending.
//! - W3: pure closures run with rows pending; the carry is written once it holds
//!   [`DEFERRED_STEPS_MAX`] rows or [`DEFERRED_BYTES_MAX`] bytes. A pending guarded result is
//!   written before any closure runs, so it waits only while the workflow's own code runs
//!   between two steps.
//! - W4: every other write of the handle carries what is pending: a `Timing::Now` step, a
//!   retry's audit event, a release, a fail and the finalize (which thus rides on the last
//!   step's write); [`Execution::flush`] forces it.
//! - W5: a handle dropped with rows pending loses them; the steps run again on the next run
//!   (a lost guarded result leaves its step in the ambiguous window, for its policy).
//!
//! A handle from [`crate::Journal::begin_execution`] has no row and no lock yet: its first
//! write, whatever it is, first inserts the row (`running`) and takes the lock, then runs the
//! caller's open hook, then its own rows. Until then closures get `FencingToken(0)`.
//!
//! Invariant: what a handle carries is taken by the transaction that writes it. If that
//! transaction does not commit, it is lost and the handle halts: the lost rows are the newest
//! steps, so the journal keeps a gapless prefix of them, as after a crash.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use durably_db::Connection;
use durably_lock::{Locker, format_timestamp};
use uuid::Uuid;

use super::Execution;
use super::hooks::{ResultHook, StepRef, Timing};
use super::reservation::Shared;
use super::step_rows::ResultRow;
use crate::error::{Error, Result};
use crate::ownership::{OwnLocks, acquire_or_locked};
use crate::step::Effect;

/// The most step rows a deferring handle keeps before it writes them (W3).
pub const DEFERRED_STEPS_MAX: usize = 64;

/// The most payload bytes a deferring handle keeps before it writes them (W3).
pub const DEFERRED_BYTES_MAX: usize = 1024 * 1024;

/// The caller's rows of a deferred open, written in its transaction after the lock is taken.
pub(crate) type OpenHook = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

/// An execution's row, to insert with the handle's first write.
pub(crate) struct DeferredOpen {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) input: String,
    pub(crate) with_open: OpenHook,
}

impl DeferredOpen {
    /// Inserts the row `running`, takes the lock and runs the caller's hook. Returns the
    /// lock's epoch.
    fn write(self, conn: &Connection, locker: &Locker, id: Uuid, now: &str) -> Result<u64> {
        let row = crate::open::NewRow {
            id,
            kind: &self.kind,
            name: &self.name,
            input: &self.input,
        };
        if !crate::open::insert_running(conn, &row, now)? {
            return Err(Error::OpenRaced(id));
        }
        // This handle holds the in-process claim, so a lock of this instance on `id` is a leak.
        let epoch = match acquire_or_locked(conn, locker, OwnLocks::Reclaim, id, now) {
            Err(Error::Locked { .. }) => return Err(Error::OpenRaced(id)),
            other => other?,
        };
        (self.with_open)(conn)?;
        Ok(epoch)
    }
}

/// A step's row waiting in the handle, with its hook and the time it ended.
pub(crate) struct Pending {
    pub(crate) row: ResultRow,
    pub(crate) hook: Option<ResultHook>,
    pub(crate) at: DateTime<Utc>,
}

impl Pending {
    fn bytes(&self) -> usize {
        self.row.result.as_ref().map_or(0, String::len)
            + self.row.error.as_ref().map_or(0, String::len)
    }

    fn write(self, conn: &Connection, id: Uuid, resource: &str) -> Result<()> {
        self.row
            .record(conn, resource, &format_timestamp(self.at))?;
        let Some(hook) = self.hook else {
            return Ok(());
        };
        let step = StepRef {
            execution_id: id,
            seq: self.row.seq,
            state: self.row.state,
            now: self.at,
        };
        // A deferred hook runs in a write the caller did not make: it cannot decline it.
        hook(conn, step).map_err(|error| match error {
            Error::Aborted(reason) => Error::Inconsistent(format!(
                "the hook of deferred step {} of execution {id} declined ({reason}); a hook that \
                 may decline runs with Timing::Now",
                self.row.seq
            )),
            other => other,
        })?;
        fail::fail_point!("journal::before-hooked-result-commit", |_| {
            std::process::abort()
        });
        Ok(())
    }
}

/// What a handle's next write carries: the deferred open, then step rows in seq order.
#[derive(Default)]
pub(crate) struct Carry {
    open: Option<DeferredOpen>,
    rows: Vec<Pending>,
    bytes: usize,
}

impl fmt::Debug for Carry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Carry")
            .field("open", &self.open.is_some())
            .field("rows", &self.rows.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Carry {
    pub(crate) fn opening(open: DeferredOpen) -> Self {
        Self {
            open: Some(open),
            ..Self::default()
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_none() && self.rows.is_empty()
    }

    /// Whether it is one row without a hook: one statement after the fence check.
    pub(crate) fn is_one_plain_row(&self) -> bool {
        self.open.is_none() && self.rows.len() == 1 && self.rows[0].hook.is_none()
    }

    pub(crate) fn push(&mut self, pending: Pending) {
        self.bytes += pending.bytes();
        self.rows.push(pending);
    }

    fn over_limits(&self) -> bool {
        self.rows.len() >= DEFERRED_STEPS_MAX || self.bytes >= DEFERRED_BYTES_MAX
    }

    /// Whether a guarded step's result is among the rows.
    fn holds_guarded_result(&self) -> bool {
        self.rows
            .iter()
            .any(|pending| pending.row.effect == Effect::Guarded)
    }

    /// Drops step `seq`'s row if it is pending (siblings in flight may have pushed theirs
    /// after it).
    pub(super) fn drop_step(&mut self, seq: u32) {
        if let Some(index) = self.rows.iter().position(|pending| pending.row.seq == seq) {
            let dropped = self.rows.remove(index);
            self.bytes -= dropped.bytes();
        }
    }

    /// The lowest seq among the pending rows.
    fn first_seq(&self) -> Option<u32> {
        self.rows.iter().map(|pending| pending.row.seq).min()
    }

    /// The seqs of the pending rows.
    pub(crate) fn seqs(&self) -> Vec<u32> {
        self.rows.iter().map(|pending| pending.row.seq).collect()
    }

    /// After a cancel request (R5): writes only the guarded steps' results (their intents
    /// committed before the request) and drops the other rows, which ran before the request
    /// was seen and run again if the execution is resumed. The caller has checked the fence;
    /// a deferred open never meets a request (its row does not exist yet). Returns whether a
    /// row was dropped.
    pub(crate) fn write_guarded_results(
        self,
        conn: &Connection,
        id: Uuid,
        resource: &str,
    ) -> Result<bool> {
        let mut dropped = false;
        for pending in self.rows {
            if pending.row.effect == Effect::Guarded {
                pending.write(conn, id, resource)?;
            } else {
                dropped = true;
            }
        }
        Ok(dropped)
    }

    /// Writes the open (or checks the fence at `epoch`, unless `fenced` says the transaction
    /// has already), then the rows. The open stores the epoch it took in `epoch` at once, so a
    /// release later in the same transaction uses it.
    pub(crate) fn write(
        self,
        conn: &Connection,
        locker: &Locker,
        (id, resource): (Uuid, &str),
        (epoch, fenced): (&AtomicU64, bool),
        now: &str,
    ) -> Result<()> {
        match self.open {
            Some(open) => epoch.store(open.write(conn, locker, id, now)?, Ordering::SeqCst),
            None if fenced => {}
            None => locker.fence(conn, resource, epoch.load(Ordering::SeqCst))?,
        }
        for pending in self.rows {
            pending.write(conn, id, resource)?;
        }
        Ok(())
    }
}

impl Execution {
    /// Turns on write-behind for this handle (the runtime's handles): pure and idempotent
    /// results, and guarded results until the next closure, wait in the handle and ride on its
    /// next write, by rules W1–W5 (see `docs/design.md`, "Hooks, releases and write-behind").
    /// A step call returning is then no longer a promise that its result is durable; the
    /// handle's next write, [`Execution::flush`], or its end is.
    pub fn defer_results(&mut self) {
        self.shared.state().deferring = true;
    }

    /// Writes what the handle keeps pending now (the deferred open and step results), in one
    /// commit; nothing when nothing is pending.
    ///
    /// # Errors
    /// [`Error::LockLost`], [`Error::OpenRaced`] for a deferred open that lost, or a storage
    /// error. Then nothing was written, what was pending is lost, and the handle is halted.
    pub async fn flush(&self) -> Result<()> {
        let shared = &self.shared;
        shared.refuse_if_released()?;
        let first = shared.fence.carry().first_seq();
        match shared.fence.flush(None).await {
            Ok(written) => {
                if written {
                    fail::fail_point!("journal::after-deferred-flush-commit", |_| {
                        std::process::abort()
                    });
                }
                Ok(())
            }
            Err(error) => {
                let next_seq = shared.state().next_seq;
                shared.halt_at(first.unwrap_or(next_seq));
                Err(error)
            }
        }
    }
}

impl Shared {
    /// W1 and W3's guarded rule: what must be durable before a closure of `effect` runs.
    pub(super) async fn before_closure(&self, effect: Effect) -> Result<()> {
        if !self.state().deferring {
            return Ok(());
        }
        let needed = {
            let carry = self.fence.carry();
            match effect {
                Effect::Idempotent => !carry.rows.is_empty(),
                Effect::Pure => carry.holds_guarded_result(),
                // The intent carries them (W2).
                Effect::Guarded => false,
            }
        };
        if needed && self.fence.flush(None).await? {
            fail::fail_point!("journal::after-deferred-flush-commit", |_| {
                std::process::abort()
            });
        }
        Ok(())
    }

    /// Records a step's outcome: kept pending when the handle defers results and `timing`
    /// allows it, else written now, with `hook` (which, written now, may decline with
    /// [`Error::Aborted`]: then nothing is written, and what was pending stays pending).
    /// Returns whether it was written.
    pub(super) async fn record_result(
        &self,
        row: ResultRow,
        hook: Option<ResultHook>,
        timing: Timing,
    ) -> Result<bool> {
        let at = self.fence.now();
        if self.state().deferring && timing == Timing::Deferred {
            self.fence.push(Pending { row, hook, at });
            let full = self.fence.carry().over_limits();
            if full && self.fence.flush(None).await? {
                fail::fail_point!("journal::after-deferred-flush-commit", |_| {
                    std::process::abort()
                });
            }
            return Ok(false);
        }
        let Some(hook) = hook else {
            let seq = row.seq;
            self.fence.push(Pending {
                row,
                hook: None,
                at,
            });
            let written = self.fence.flush(None).await;
            if written.is_err() {
                // A write that never ran (a busy database) left the row pending: it must not
                // ride on a later write after its step was told it failed.
                self.fence.drop_pending(seq);
            }
            return written;
        };
        // Before this step's row is written: its hook writes rows that name the execution.
        self.fence.open_before_hook().await?;
        // The row goes with its hook, first in the write, never into what is pending: a
        // sibling step's write (steps in parallel) could otherwise carry it without its hook.
        let step = StepRef {
            execution_id: self.id,
            seq: row.seq,
            state: row.state,
            now: at,
        };
        let (resource, now) = (self.id.to_string(), format_timestamp(at));
        let first: super::fence::FirstHook = Box::new(move |conn: &Connection| {
            hook(conn, step)?;
            row.record(conn, &resource, &now)
        });
        self.fence.flush(Some(first)).await
    }
}
