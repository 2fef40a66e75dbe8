//! The crash-orphan sweep and the retention sweep.

use std::collections::HashMap;
use std::time::Duration;

use durably_db::{Connection, params};
use durably_lock::{
    DeathReason, HolderRecord, Judge, Judgement, LockRow, Locker, format_timestamp,
};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::operator::Operator;
use crate::ownership;
use crate::records::{self, event_kind};
use crate::states::Status;

/// Dead holders' locks reclaimed per transaction by the crash-orphan sweep, at most: after a
/// crash of a process that held thousands of executions, the sweep commits once per batch
/// instead of once per lock, and another writer waits at most one batch.
pub const SWEEP_BATCH_LOCKS_MAX: usize = 256;

/// Executions deleted per retention batch: small enough that one batch holds the write lock
/// for milliseconds, not seconds.
pub const GC_BATCH_EXECUTIONS_DEFAULT: u32 = 200;

/// Steps and events deleted per retention transaction, at most (one execution with more loses
/// them over several transactions). Bounds how long a batch holds the write lock.
pub const GC_BATCH_ROWS_MAX: u64 = 1_000;

/// What the crash-orphan sweep found (and, unless a dry run, reclaimed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Locks of dead holders.
    pub reclaimed: Vec<Reclaimed>,
    /// Running executions that had no lock holder at all, marked interrupted.
    pub unlocked: Vec<Uuid>,
}

/// One lock reclaimed from a dead holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reclaimed {
    /// The locked resource (the execution id, for executions).
    pub resource: String,
    /// The dead holder's pid.
    pub pid: i64,
    /// Why it was judged dead.
    pub reason: String,
}

/// Settings of one retention sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    /// Delete completed executions finalized longer ago than this.
    pub completed_older_than: Duration,
    /// Delete failed and cancelled executions finalized longer ago than this.
    pub failed_older_than: Duration,
    /// Count only; delete nothing.
    pub dry_run: bool,
    /// Executions deleted per transaction.
    pub batch_executions_max: u32,
}

/// What a retention sweep deleted (or would delete, in a dry run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Completed executions.
    pub completed: u64,
    /// Failed and cancelled executions.
    pub failed: u64,
    /// Transactions used.
    pub batches: u64,
}

impl Operator<'_> {
    /// The crash-orphan sweep: takes over every lock whose holder is dead, marks its execution
    /// interrupted with an audit event, and releases the lock; then marks running executions
    /// with no lock holder interrupted. A live holder's lock is never touched. Each holder is
    /// judged once per pass, and up to [`SWEEP_BATCH_LOCKS_MAX`] locks are reclaimed per
    /// transaction. A dry run reports what the sweep would do, read in one transaction, and
    /// changes nothing.
    ///
    /// # Errors
    /// A storage error; the batches committed before it stay reclaimed.
    pub async fn sweep(&self, dry_run: bool) -> Result<SweepReport> {
        let journal = self.journal;
        if dry_run {
            return journal.read(|conn| preview(conn, journal.inner.locker.judge()));
        }
        let dead = journal.read(|conn| dead_locks(conn, journal.inner.locker.judge()))?;
        let mut report = SweepReport::default();
        for batch in dead.chunks(SWEEP_BATCH_LOCKS_MAX) {
            fail::fail_point!("journal::sweep-before-takeover", |_| std::process::abort());
            let locker = journal.inner.locker.clone();
            let (batch, now) = (batch.to_vec(), journal.now());
            let done = journal
                .write(move |conn| reclaim_batch(conn, &locker, &batch, &now))
                .await?;
            report.reclaimed.extend(done);
            fail::fail_point!("journal::sweep-between-reclaims", |_| std::process::abort());
        }
        let now = journal.now();
        report.unlocked = journal
            .write(move |conn| interrupt_unlocked(conn, &now))
            .await?;
        journal.read(|conn| Ok(journal.inner.locker.remove_dead_liveness_files(conn)?))?;
        Ok(report)
    }

    /// The retention sweep: deletes finalized executions (with their steps, events and lock
    /// rows) older than the given ages, in small batches so other writers wait at most one
    /// batch. `progress` is called after each batch with the running totals.
    ///
    /// # Errors
    /// A storage error; batches already committed stay deleted.
    pub async fn collect_garbage(
        &self,
        options: GcOptions,
        mut progress: impl FnMut(&GcReport),
    ) -> Result<GcReport> {
        let mut report = GcReport::default();
        let now = self.journal.inner.clock.now();
        for (class, age) in [
            (Retained::Completed, options.completed_older_than),
            (Retained::Failed, options.failed_older_than),
        ] {
            let cutoff = now
                .checked_sub_signed(
                    chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX),
                )
                .map_or_else(|| "0000".to_owned(), format_timestamp);
            let deleted = if options.dry_run {
                // A count over every due execution takes a second on a journal of millions:
                // on a blocking thread, so the caller's async worker keeps running its tasks.
                let journal = self.journal.clone();
                tokio::task::spawn_blocking(move || {
                    journal.read(|conn| count_due(conn, class, &cutoff))
                })
                .await
                .map_err(|error| Error::ReadFailed {
                    reason: error.to_string(),
                })??
            } else {
                self.delete_in_batches(class, &cutoff, options, &mut report, &mut progress)
                    .await?
            };
            class.count_in(&mut report, deleted);
        }
        Ok(report)
    }

    /// Default retention ages of this journal, as a dry-run-off [`GcOptions`].
    pub fn default_gc_options(&self) -> GcOptions {
        GcOptions {
            completed_older_than: self.journal.inner.completed_retention,
            failed_older_than: self.journal.inner.failed_retention,
            dry_run: false,
            batch_executions_max: GC_BATCH_EXECUTIONS_DEFAULT,
        }
    }

    async fn delete_in_batches(
        &self,
        class: Retained,
        cutoff: &str,
        options: GcOptions,
        report: &mut GcReport,
        progress: &mut impl FnMut(&GcReport),
    ) -> Result<u64> {
        let batch = options.batch_executions_max.max(1);
        let mut deleted = 0;
        // Ends: every pass deletes at least one execution or one chunk of a huge one's
        // children, or finds nothing and stops. No count bounds it up front: counting every
        // due execution and child row took a second on a journal of millions, and the read
        // stalled the caller's async worker (and every task queued on it) meanwhile.
        loop {
            let cutoff = cutoff.to_owned();
            let batch_deleted = self
                .journal
                .write(move |conn| delete_batch(conn, class, &cutoff, batch))
                .await?;
            if batch_deleted.executions == 0 && batch_deleted.rows == 0 {
                break;
            }
            deleted += batch_deleted.executions;
            report.batches += 1;
            class.count_in(report, deleted);
            progress(report);
            fail::fail_point!("journal::gc-between-batches", |_| std::process::abort());
        }
        Ok(deleted)
    }
}

/// The two retention classes, each with its own age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retained {
    /// Completed executions.
    Completed,
    /// Failed and cancelled executions.
    Failed,
}

impl Retained {
    /// The statuses of the class (one status is given twice, so every query takes two).
    fn statuses(self) -> [Status; 2] {
        match self {
            Self::Completed => [Status::Completed, Status::Completed],
            Self::Failed => [Status::Failed, Status::Cancelled],
        }
    }

    /// Puts the class's running total in its field of `report`.
    fn count_in(self, report: &mut GcReport, deleted: u64) {
        match self {
            Self::Completed => report.completed = deleted,
            Self::Failed => report.failed = deleted,
        }
    }
}

/// Judgements of lock holders, one per holder identity: the thousands of locks a crashed
/// process leaves are judged by one look at its liveness file and `/proc`, not one per lock. A
/// lease belongs to one lock (its heartbeat), so a holder with a lease is judged again for
/// each lock unless its process is already known dead.
struct Judgements<'judge> {
    judge: &'judge Judge,
    known: HashMap<HolderKey, Judgement>,
}

/// What identifies a holder's process: instance, pid, start time, boot, pid namespace, host.
type HolderKey = (String, i64, i64, String, i64, String);

impl<'judge> Judgements<'judge> {
    fn new(judge: &'judge Judge) -> Self {
        Self {
            judge,
            known: HashMap::new(),
        }
    }

    fn judge(&mut self, holder: &HolderRecord) -> Judgement {
        let key = (
            holder.instance_id.clone(),
            holder.pid,
            holder.start_time,
            holder.boot_id.clone(),
            holder.pid_ns,
            holder.hostname.clone(),
        );
        // A dead process is dead for each of its locks; a verdict on a live or unknown one
        // holds for its locks without a lease only.
        let reusable = |judgement: &Judgement| match judgement {
            Judgement::Dead(DeathReason::LeaseExpired { .. }) => false,
            Judgement::Dead(_) => true,
            Judgement::Alive(_) | Judgement::Unknown(_) => holder.lease_ms.is_none(),
        };
        if let Some(known) = self.known.get(&key).filter(|known| reusable(known)) {
            return known.clone();
        }
        let judgement = self.judge.judge(holder);
        if reusable(&judgement) {
            self.known.insert(key, judgement.clone());
        }
        judgement
    }
}

/// The held locks whose holder is judged dead, each holder judged once. A lock row that does
/// not read as a lock is skipped with a warning, and never judged dead.
fn dead_locks(conn: &Connection, judge: &Judge) -> Result<Vec<(LockRow, DeathReason)>> {
    // One pass: on PostgreSQL the held advisory keys are read once, not once per holder.
    let pass = judge.pass();
    let mut judgements = Judgements::new(&pass);
    Ok(durably_lock::held_readable(conn)?
        .into_iter()
        .filter_map(|row| match judgements.judge(row.holder.as_ref()?) {
            Judgement::Dead(reason) => Some((row, reason)),
            Judgement::Alive(_) | Judgement::Unknown(_) => None,
        })
        .collect())
}

/// Reclaims a batch of dead holders' locks in the caller's transaction, judging each holder
/// again under the write lock (once per holder in the batch). Returns those reclaimed; a lock
/// another sweeper took first, or whose holder heartbeat since, is left out.
fn reclaim_batch(
    conn: &Connection,
    locker: &Locker,
    batch: &[(LockRow, DeathReason)],
    now: &str,
) -> Result<Vec<Reclaimed>> {
    let mut judgements = Judgements::new(locker.judge());
    let mut done = Vec::with_capacity(batch.len());
    for (row, reason) in batch {
        if reclaim_one(conn, locker, &mut judgements, row, reason, now)? {
            done.push(reclaimed(row, reason));
        }
    }
    Ok(done)
}

/// Reclaims one dead holder's lock. `false` when another sweeper won.
fn reclaim_one(
    conn: &Connection,
    locker: &Locker,
    judgements: &mut Judgements<'_>,
    row: &LockRow,
    reason: &DeathReason,
    now: &str,
) -> Result<bool> {
    let Some(holder) = &row.holder else {
        return Ok(false);
    };
    let is_execution = ownership::lock_execution_row(conn, &row.resource)?;
    // The holder was judged outside this transaction. Judge it again under the write lock (on
    // PostgreSQL, under the execution row's lock, which holds the holder's writes off), on
    // the row as it is now: a lease holder may have heartbeaten since, and nothing can change
    // between this judgement and the swap below.
    let current = durably_lock::read(conn, &row.resource)?;
    let still_dead = current.as_ref().is_some_and(|current| {
        current.epoch == row.epoch
            && current
                .holder
                .as_ref()
                .is_some_and(|now| judgements.judge(now).is_dead())
    });
    if !still_dead {
        return Ok(false);
    }
    let Some(epoch) = locker.take_over(conn, &row.resource, row.epoch)? else {
        return Ok(false);
    };
    conn.prepare_cached(
        "UPDATE executions SET status = 'interrupted', updated_at = ?2
         WHERE execution_id = ?1 AND status = 'running'",
    )?
    .execute(params![row.resource, now])?;
    let mut detail = json!({
        "resource": row.resource,
        "pid": holder.pid,
        "epoch": row.epoch,
        "reason": reason.to_string(),
    });
    ownership::note_lease_expired_holder(&mut detail, holder, reason);
    events::record(
        conn,
        now,
        is_execution.then_some(row.resource.as_str()),
        None,
        event_kind::ORPHAN_RECLAIMED,
        &detail,
    )?;
    locker.release(conn, &row.resource, epoch)?;
    let because = crate::telemetry::TakenBecause::of(reason);
    crate::telemetry::taken_over(crate::telemetry::TakenBy::Sweep, because);
    Ok(true)
}

/// Reclaims every dead holder at journal open, before the writer thread starts, up to
/// [`SWEEP_BATCH_LOCKS_MAX`] locks per transaction.
pub(crate) fn reclaim_orphans(conn: &Connection, locker: &Locker) -> Result<()> {
    let now = format_timestamp(locker.judge().clock().now());
    let dead = dead_locks(conn, locker.judge())?;
    for batch in dead.chunks(SWEEP_BATCH_LOCKS_MAX) {
        fail::fail_point!("journal::sweep-before-takeover", |_| std::process::abort());
        in_transaction(conn, |conn| reclaim_batch(conn, locker, batch, &now))?;
        fail::fail_point!("journal::sweep-between-reclaims", |_| std::process::abort());
    }
    in_transaction(conn, |conn| interrupt_unlocked(conn, &now))?;
    locker.remove_dead_liveness_files(conn)?;
    Ok(())
}

fn in_transaction<T>(conn: &Connection, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    // SQLite takes the write lock at once; PostgreSQL locks rows as the statements reach them.
    conn.execute_batch(conn.pick(&durably_db::Sql {
        sqlite: "BEGIN IMMEDIATE",
        postgres: "BEGIN",
    }))?;
    match work(conn) {
        Ok(value) => {
            conn.execute_batch("COMMIT")?;
            Ok(value)
        }
        Err(error) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

/// What the crash-orphan sweep would do now, read in one transaction and changing nothing: the
/// locks whose holder `judge` finds dead, and the running executions with no holder. A dry
/// run's report, for [`Operator::sweep`] and [`crate::Inspector::sweep_preview`] alike.
pub(crate) fn preview(conn: &Connection, judge: &Judge) -> Result<SweepReport> {
    let reclaimed = dead_locks(conn, judge)?
        .iter()
        .map(|(row, reason)| reclaimed(row, reason))
        .collect();
    Ok(SweepReport {
        reclaimed,
        unlocked: unlocked_running(conn)?,
    })
}

fn reclaimed(row: &LockRow, reason: &DeathReason) -> Reclaimed {
    Reclaimed {
        resource: row.resource.clone(),
        pid: row.holder.as_ref().map_or(0, |holder| holder.pid),
        reason: reason.to_string(),
    }
}

const UNLOCKED_RUNNING: &str = "SELECT execution_id FROM executions
     WHERE status = 'running'
       AND NOT EXISTS (SELECT 1 FROM locks
                       WHERE resource = execution_id AND instance_id IS NOT NULL)";

fn unlocked_running(conn: &Connection) -> Result<Vec<Uuid>> {
    let mut statement = conn.prepare_cached(UNLOCKED_RUNNING)?;
    let rows = statement.query_map([], |row| records::uuid(row, 0))?;
    Ok(rows.collect::<durably_db::Result<Vec<Uuid>>>()?)
}

/// Marks the running executions that no lock holds `interrupted`. On PostgreSQL another
/// session may finish, or open and lock, one of them between the look and the update: its row
/// is locked first (the execution row, as everywhere), and the update re-checks, in a statement
/// that sees what that session committed, that it is still running and unlocked. SQLite's
/// single writer makes the look and the update atomic already.
fn interrupt_unlocked(conn: &Connection, now: &str) -> Result<Vec<Uuid>> {
    let mut interrupted = Vec::new();
    for uuid in unlocked_running(conn)? {
        let id = uuid.to_string();
        crate::ownership::lock_execution_row(conn, &id)?;
        let changed = conn
            .prepare_cached(
                "UPDATE executions SET status = 'interrupted', updated_at = ?2
                 WHERE execution_id = ?1 AND status = 'running'
                   AND NOT EXISTS (SELECT 1 FROM locks
                                   WHERE resource = ?1 AND instance_id IS NOT NULL)",
            )?
            .execute(params![id, now])?;
        if changed == 0 {
            continue;
        }
        interrupted.push(uuid);
        events::record(
            conn,
            now,
            Some(&id),
            None,
            event_kind::UNLOCKED_INTERRUPTED,
            &json!({}),
        )?;
    }
    Ok(interrupted)
}

fn count_due(conn: &Connection, class: Retained, cutoff: &str) -> Result<u64> {
    let statuses = class.statuses();
    let count: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM executions WHERE status IN (?1, ?2) AND finalized_at < ?3",
        )?
        .query_row(
            params![statuses[0].as_str(), statuses[1].as_str(), cutoff],
            |row| row.get(0),
        )?;
    Ok(count.max(0) as u64)
}

/// What one retention transaction deleted.
#[derive(Debug, Clone, Copy, Default)]
struct BatchDeleted {
    executions: u64,
    rows: u64,
}

/// Deletes, in one transaction, up to `batch` due executions with their steps, events and free
/// lock rows, keeping the child rows deleted under [`GC_BATCH_ROWS_MAX`]: a transaction's length
/// is set by the rows it deletes, not by the executions. An execution with more children than
/// that loses them in chunks over several transactions first.
fn delete_batch(
    conn: &Connection,
    class: Retained,
    cutoff: &str,
    batch: u32,
) -> Result<BatchDeleted> {
    let statuses = class.statuses();
    // Oldest first within each status, in the order of `executions_by_status`, so a batch
    // reads only its own rows from the index. Ordering by `finalized_at` across two statuses
    // (or adding `execution_id`) would make SQLite sort every due row for every batch: O(due)
    // work per batch, on the writer thread, while every other writer waits.
    let ids: Vec<String> = conn
        .prepare_cached(
            "SELECT execution_id FROM executions
             WHERE status IN (?1, ?2) AND finalized_at < ?3
             ORDER BY status, finalized_at LIMIT ?4",
        )?
        .query_map(
            params![statuses[0].as_str(), statuses[1].as_str(), cutoff, batch],
            |row| row.get(0),
        )?
        .collect::<durably_db::Result<_>>()?;
    let mut deleted = BatchDeleted::default();
    for id in ids {
        let children = child_rows(conn, &id)?;
        if children > GC_BATCH_ROWS_MAX {
            if deleted.executions == 0 {
                deleted.rows = delete_children_chunk(conn, &id)?;
            }
            break;
        }
        if deleted.executions > 0 && deleted.rows + children > GC_BATCH_ROWS_MAX {
            break;
        }
        conn.prepare_cached("DELETE FROM locks WHERE resource = ?1 AND instance_id IS NULL")?
            .execute(params![id])?;
        // Steps and events go with it (ON DELETE CASCADE).
        conn.prepare_cached("DELETE FROM executions WHERE execution_id = ?1")?
            .execute(params![id])?;
        deleted.executions += 1;
        deleted.rows += children;
    }
    Ok(deleted)
}

/// Steps and events of one execution.
fn child_rows(conn: &Connection, id: &str) -> Result<u64> {
    let count: i64 = conn
        .prepare_cached(
            "SELECT (SELECT count(*) FROM steps WHERE execution_id = ?1)
                  + (SELECT count(*) FROM events WHERE execution_id = ?1)",
        )?
        .query_row(params![id], |row| row.get(0))?;
    Ok(count.max(0) as u64)
}

/// Deletes up to [`GC_BATCH_ROWS_MAX`] steps and events of one execution, newest first.
fn delete_children_chunk(conn: &Connection, id: &str) -> Result<u64> {
    let chunk = GC_BATCH_ROWS_MAX as i64;
    let steps = conn
        .prepare_cached(
            "DELETE FROM steps WHERE execution_id = ?1 AND seq IN
                 (SELECT seq FROM steps WHERE execution_id = ?1 ORDER BY seq DESC LIMIT ?2)",
        )?
        .execute(params![id, chunk])?;
    let events = conn
        .prepare_cached(
            "DELETE FROM events WHERE id IN
                 (SELECT id FROM events WHERE execution_id = ?1 ORDER BY id DESC LIMIT ?2)",
        )?
        .execute(params![id, chunk])?;
    Ok((steps + events) as u64)
}

impl From<std::convert::Infallible> for Error {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}
