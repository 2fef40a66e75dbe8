//! Claims: opening parked executions in batches, for crates built on the journal (the runtime's
//! dispatcher). A claim takes the execution's lock and moves its status to `running` in one
//! transaction with whatever else the caller writes there (a queue's limit count, its own
//! rows); many claims share one commit. A claimed execution is then opened without another
//! write ([`Journal::open_claim`]).
//!
//! Invariant: an execution is `running` exactly while its lock is held (or its holder died and
//! no sweep has run yet). A claim sets both in one transaction; a [`Claim`] dropped unopened
//! releases the lock, leaving a `running` row with no holder, which the next sweep marks
//! `interrupted`, as after a crash.

use std::sync::Arc;

use durably_lock::Locker;
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::error::Result;
use crate::execution::{Execution, Fence, Opening};
use crate::handles::{HandleClaim, OpenHandles};
use crate::journal::Journal;
use crate::ownership::{OwnLocks, acquire_or_locked};
use crate::replay::Replay;
use crate::states::Status;

/// What [`Claimer::claim`] read of a claimed execution's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRow {
    /// The execution.
    pub execution_id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its queue, if any.
    pub queue: Option<String>,
    /// How many times it has been opened, this claim included.
    pub opens: u32,
}

/// One claim inside the transaction of [`Journal::claim_executions`], kept until it commits.
#[derive(Debug)]
struct Claimed {
    row: ClaimedRow,
    input: String,
    epoch: u64,
    handle: HandleClaim,
}

/// Takes claims inside [`Journal::claim_executions`]'s transaction.
#[derive(Debug)]
pub struct Claimer {
    locker: Arc<Locker>,
    handles: Arc<OpenHandles>,
    now: String,
    claimed: Vec<Claimed>,
}

impl Claimer {
    /// Claims execution `id` if its status is `from`: takes this journal's in-process claim on
    /// it, its lock (free on any status but `running`; a lock this process leaked is taken
    /// back, a dead holder's taken over with an audit event), and moves it to `running` with
    /// `opens + 1`, clearing `due_at`, `wait_topic` and `status_detail`. `None`, with nothing
    /// written, when the status is not `from`, a live handle of this journal has it, or a live
    /// process holds its lock.
    ///
    /// The claim commits with the caller's transaction; nothing of it stays if that fails.
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn claim(
        &mut self,
        conn: &Connection,
        id: Uuid,
        from: Status,
    ) -> Result<Option<ClaimedRow>> {
        let Some(handle) = HandleClaim::claim(&self.handles, id) else {
            return Ok(None);
        };
        let resource = id.to_string();
        let status: Option<String> = conn
            .prepare_cached("SELECT status FROM executions WHERE execution_id = ?1")?
            .query_row(params![resource], |row| row.get(0))
            .optional()?;
        if status.as_deref() != Some(from.as_str()) {
            return Ok(None);
        }
        let epoch = match acquire_or_locked(conn, &self.locker, OwnLocks::Reclaim, id, &self.now) {
            Ok(epoch) => epoch,
            Err(crate::Error::Locked { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let (kind, queue, opens, input) = conn
            .prepare_cached(
                "UPDATE executions SET status = 'running', opens = opens + 1, updated_at = ?3,
                                       due_at = NULL, wait_topic = NULL, status_detail = NULL
                 WHERE execution_id = ?1 AND status = ?2
                 RETURNING kind, queue, opens, input",
            )?
            .query_row(params![resource, from.as_str(), self.now], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })?;
        let row = ClaimedRow {
            execution_id: id,
            kind,
            queue,
            opens,
        };
        self.claimed.push(Claimed {
            row: row.clone(),
            input,
            epoch,
            handle,
        });
        Ok(Some(row))
    }

    /// How many executions this claimer has claimed so far.
    pub fn claimed(&self) -> usize {
        self.claimed.len()
    }
}

/// An execution claimed and committed `running` under this journal's lock, not yet opened.
/// Dropped unopened, it releases the lock (the execution stays `running` with no holder, to be
/// swept `interrupted`).
#[derive(Debug)]
#[must_use = "a claim dropped unopened releases its execution's lock"]
pub struct Claim {
    row: ClaimedRow,
    input: String,
    fence: Option<Arc<Fence>>,
    handle: Option<HandleClaim>,
}

impl Claim {
    /// What the claim read of the execution's row.
    pub fn row(&self) -> &ClaimedRow {
        &self.row
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(fence) = &self.fence {
            fence.release_detached();
        }
    }
}

impl Journal {
    /// Claims executions in one writer transaction: `select` runs there with a [`Claimer`], and
    /// may write the caller's own rows beside the claims. Every claim it took commits with
    /// them, or none does.
    ///
    /// # Errors
    /// `select`'s own error or a storage error; then nothing was claimed.
    pub async fn claim_executions<F>(&self, select: F) -> Result<Vec<Claim>>
    where
        F: FnOnce(&Connection, &mut Claimer) -> Result<()> + Send + 'static,
    {
        let mut claimer = Claimer {
            locker: Arc::clone(&self.inner.locker),
            handles: Arc::clone(&self.inner.handles),
            now: self.now(),
            claimed: Vec::new(),
        };
        let claimed = self
            .inner
            .writer
            .write(move |conn| {
                select(conn, &mut claimer)?;
                Ok(claimer.claimed)
            })
            .await?;
        Ok(claimed
            .into_iter()
            .map(|claimed| Claim {
                fence: Some(Arc::new(Fence::new(
                    self,
                    claimed.row.execution_id,
                    claimed.epoch,
                ))),
                row: claimed.row,
                input: claimed.input,
                handle: Some(claimed.handle),
            })
            .collect())
    }

    /// Opens a claimed execution: loads its recorded steps and hands back its handle. Writes
    /// nothing; the claim's transaction already took the lock and marked it `running`.
    ///
    /// # Errors
    /// A storage error reading its steps; the claim's lock is then released.
    pub fn open_claim(&self, mut claim: Claim) -> Result<Execution> {
        let id = claim.row.execution_id;
        let replay = Replay::open(self, id)?;
        let (Some(fence), Some(handle)) = (claim.fence.take(), claim.handle.take()) else {
            return Err(crate::Error::Inconsistent(format!(
                "the claim of execution {id} was already opened"
            )));
        };
        Ok(Execution::new(Opening {
            fence,
            settings: self.inner.settings,
            id,
            is_resume: claim.row.opens > 1,
            input: std::mem::take(&mut claim.input),
            replay,
            claim: handle,
        }))
    }
}
