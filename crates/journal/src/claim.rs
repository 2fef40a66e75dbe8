//! Claims: opening parked executions in batches, for crates built on the journal (the runtime's
//! dispatcher). A claim takes the execution's lock and moves its status to `running` in one
//! transaction with whatever else the caller writes there (a queue's limit count, its own
//! rows); many claims share one commit. An execution's end can claim its successor in its own
//! transaction ([`Execution::complete_claiming`]), so a place given up is taken again with no
//! commit between. A claimed execution is then opened without another write
//! ([`Journal::open_claim`]).
//!
//! Invariant: an execution is `running` exactly while its lock is held (or its holder died and
//! no sweep has run yet). A claim sets both in one transaction; a [`Claim`] dropped unopened
//! releases the lock, leaving a `running` row with no holder, which the next sweep marks
//! `interrupted`, as after a crash.

use std::sync::Arc;

use durably_db::{Connection, OptionalExtension, params};
use durably_lock::Locker;
use serde::Serialize;
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
        let mut claimer = self.claimer();
        let claimed = self
            .inner
            .writer
            .write(move |conn| {
                select(conn, &mut claimer)?;
                Ok(claimer.claimed)
            })
            .await?;
        Ok(self.committed(claimed))
    }

    /// A claimer with nothing claimed yet, for one transaction of this journal's writer.
    fn claimer(&self) -> Claimer {
        Claimer {
            locker: Arc::clone(&self.inner.locker),
            handles: Arc::clone(&self.inner.handles),
            now: self.now(),
            claimed: Vec::new(),
        }
    }

    /// The claims of a transaction that has committed, each with the fence of its lock.
    fn committed(&self, claimed: Vec<Claimed>) -> Vec<Claim> {
        claimed
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
            .collect()
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
            span: crate::telemetry::execution_span(id, &claim.row.kind),
        }))
    }
}

/// The statements of the savepoint the claims beside an execution's end run in, so that claims
/// that fail are taken back alone and the end still commits: open, release, roll back.
const END_CLAIMS_SAVEPOINT: [&str; 3] = [
    "SAVEPOINT durably_end_claims",
    "RELEASE durably_end_claims",
    "ROLLBACK TO durably_end_claims",
];

impl Execution {
    /// Completes the execution as [`Execution::complete`] does and, in the same transaction,
    /// claims what `select` picks with a [`Claimer`], as [`Journal::claim_executions`] does:
    /// the end and the claims commit together. A runtime hands the place the execution held
    /// to its successor this way, with no commit in between. The end is written before
    /// `select` runs, so a count of `running` executions there no longer counts this one.
    ///
    /// `select` runs inside a savepoint: if it fails, its claims and writes are taken back,
    /// the error is logged, and the end commits alone (no claim).
    ///
    /// # Errors
    /// As [`Execution::complete`]; then nothing was claimed.
    pub async fn complete_claiming<F>(
        self,
        output: &impl Serialize,
        select: F,
    ) -> Result<Vec<Claim>>
    where
        F: FnOnce(&Connection, &mut Claimer) -> Result<()> + Send + 'static,
    {
        let (journal, beside) = claims_beside_end(&self, select);
        Ok(journal.committed(self.complete_returning(output, beside).await?))
    }

    /// Fails the execution as [`Execution::fail`] does and claims beside its end, as
    /// [`Execution::complete_claiming`] does.
    ///
    /// # Errors
    /// As [`Execution::fail`]; then nothing was claimed.
    pub async fn fail_claiming<F>(self, error: &impl Serialize, select: F) -> Result<Vec<Claim>>
    where
        F: FnOnce(&Connection, &mut Claimer) -> Result<()> + Send + 'static,
    {
        let (journal, beside) = claims_beside_end(&self, select);
        Ok(journal.committed(self.fail_returning(error, beside).await?))
    }
}

/// The journal of `execution`, and the hook of its end that runs `select` with a new
/// [`Claimer`] ([`claim_beside_end`]).
fn claims_beside_end<F>(
    execution: &Execution,
    select: F,
) -> (
    Journal,
    impl FnOnce(&Connection) -> Result<Vec<Claimed>> + Send + 'static,
)
where
    F: FnOnce(&Connection, &mut Claimer) -> Result<()> + Send + 'static,
{
    let (id, journal) = (execution.id(), execution.journal().clone());
    let claimer = journal.claimer();
    (journal, move |conn: &Connection| {
        claim_beside_end(conn, id, claimer, select)
    })
}

/// Runs `select` beside the end of execution `id`, inside [`END_CLAIMS_SAVEPOINT`]: its
/// claims, or nothing of it if it fails.
fn claim_beside_end<F>(
    conn: &Connection,
    id: Uuid,
    mut claimer: Claimer,
    select: F,
) -> Result<Vec<Claimed>>
where
    F: FnOnce(&Connection, &mut Claimer) -> Result<()>,
{
    let [open, release, roll_back] = END_CLAIMS_SAVEPOINT;
    // Cached: they run at every end of a runtime's run.
    let run = |sql: &str| conn.prepare_cached(sql)?.execute([]).map(drop);
    run(open)?;
    match select(conn, &mut claimer) {
        Ok(()) => {
            run(release)?;
            Ok(claimer.claimed)
        }
        Err(error) => {
            run(roll_back)?;
            run(release)?;
            tracing::warn!(execution_id = %id, %error, "the claims beside an execution's end failed; it ends without them");
            Ok(Vec::new())
        }
    }
}
