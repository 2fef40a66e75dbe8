//! The slot ledger: the `jobs`, `fires` and `skipped_slots` tables, which this crate owns
//! (`schema/scheduler/`), and the only place their SQL lives.
//!
//! Every function here runs on a connection the journal hands out, inside its transaction
//! (`Journal::write` for changes, `Journal::read` for queries), so each change commits
//! atomically with the rest of its request. None of them reads or writes the journal's own
//! tables: what they need of the journal they ask through its functions
//! ([`durably_journal::ambiguous_step_exists`], [`durably_journal::step_attempts_total`],
//! [`durably_journal::record_event`]) and of the lock rows through [`durably_lock::read`].
//!
//! Invariant: `jobs.last_slot_ms` only grows, and every change to it goes through
//! [`raise_mark`]. The loop registers only slots after it, re-read inside the registering
//! transaction, so two processes can never both register a slot as new.

use chrono::{DateTime, Utc};
use durably_journal::{
    Error as JournalError, ExtensionSchema, Migration, Result as JournalResult,
    ambiguous_step_exists, step_attempts_total,
};
use durably_lock::{Judge, format_timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

use crate::catch_up::{SkippedSlots, SlotCount};
use crate::fire_id::Fire;
use crate::job_id::JobId;
use crate::outcome::FireState;
use crate::slot::Slot;

/// The ledger's tables and views in the journal's file, applied by
/// `Journal::migrate_extension` when a `Scheduler` is built. Migration 1 adopts the tables of
/// files whose journal created them before the scheduler owned its schema.
pub(crate) static LEDGER_SCHEMA: ExtensionSchema = ExtensionSchema {
    owner: "scheduler",
    migrations: &[Migration {
        name: "0001_ledger",
        sql: include_str!("../../../schema/scheduler/0001_ledger.sql"),
    }],
    views: include_str!("../../../schema/scheduler/views.sql"),
};

/// The most unfinished fires of one job the recovery scan returns in one pass. The scan pages
/// through the rest with a keyset cursor on later passes (see [`recoverable`]); fires waiting
/// for an operator are passed over, so they can never crowd out the others.
pub(crate) const UNFINISHED_FIRES_SCANNED_MAX: u32 = 100;

/// The reason recorded for a slot skipped under [`crate::Overlap::Skip`].
pub(crate) const REASON_OVERLAP: &str = "previous fire still running";

/// The audit event kind written to the journal's `events` table when a job's definition changes.
pub(crate) const EVENT_JOB_REDEFINED: &str = "scheduler_job_redefined";

/// What the `jobs` row held before a registration.
pub(crate) struct PreviousJob {
    pub(crate) definition: String,
    pub(crate) definition_hash: String,
    pub(crate) last_slot_ms: Option<i64>,
}

/// Inserts or updates the `jobs` row; returns what it held before, if it existed.
pub(crate) fn upsert_job(
    conn: &Connection,
    job: &str,
    definition: &str,
    definition_hash: &str,
    at: DateTime<Utc>,
) -> JournalResult<Option<PreviousJob>> {
    let now = format_timestamp(at);
    let previous = conn
        .prepare_cached(
            "SELECT definition, definition_hash, last_slot_ms FROM jobs WHERE job = ?1",
        )?
        .query_row(params![job], |row| {
            Ok(PreviousJob {
                definition: row.get(0)?,
                definition_hash: row.get(1)?,
                last_slot_ms: row.get(2)?,
            })
        })
        .optional()?;
    match &previous {
        None => {
            conn.prepare_cached(
                "INSERT INTO jobs (job, definition, definition_hash, registered_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?4)",
            )?
            .execute(params![job, definition, definition_hash, now])?;
        }
        Some(old) if old.definition_hash != definition_hash => {
            conn.prepare_cached(
                "UPDATE jobs SET definition = ?2, definition_hash = ?3, updated_at = ?4
                 WHERE job = ?1",
            )?
            .execute(params![job, definition, definition_hash, now])?;
            let detail = json!({
                "job": job,
                "previous_hash": old.definition_hash,
                "hash": definition_hash,
                "last_slot_ms": old.last_slot_ms,
            });
            durably_journal::record_event(conn, at, EVENT_JOB_REDEFINED, &detail)?;
        }
        Some(_) => {}
    }
    Ok(previous)
}

/// The job's high-water mark, in epoch milliseconds.
pub(crate) fn high_water_mark(conn: &Connection, job: &str) -> JournalResult<Option<i64>> {
    let mark: Option<Option<i64>> = conn
        .prepare_cached("SELECT last_slot_ms FROM jobs WHERE job = ?1")?
        .query_row(params![job], |row| row.get(0))
        .optional()?;
    Ok(mark.flatten())
}

/// Raises the job's high-water mark to `slot` unless it is already there or past it.
pub(crate) fn raise_mark(conn: &Connection, job: &str, slot: Slot) -> JournalResult<()> {
    conn.prepare_cached(
        "UPDATE jobs SET last_slot = ?2, last_slot_ms = ?3
         WHERE job = ?1 AND (last_slot_ms IS NULL OR last_slot_ms < ?3)",
    )?
    .execute(params![job, slot.to_rfc3339(), slot.as_millis()])?;
    Ok(())
}

/// What registering a fire found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Registered {
    /// A new `pending` row.
    New,
    /// A new row, recorded as skipped for this reason.
    NewSkipped(String),
    /// The row existed already.
    Existing { state: FireState, attempts: u32 },
    /// Only slots after the high-water mark were wanted, and this one is not.
    AtOrBelowMark,
}

/// How to register one fire.
pub(crate) struct FireRegistration<'a> {
    pub(crate) fire: &'a Fire,
    pub(crate) now: &'a str,
    /// Register only a slot after the high-water mark (the loop); `false` for an explicit fire.
    pub(crate) above_mark_only: bool,
    /// `Some` under `Overlap::Skip`: whether this process itself is running a fire of the job.
    pub(crate) overlap_skip: Option<bool>,
    /// For an explicit fire: the slot of the schedule just before this one (epoch ms). The
    /// mark is raised only if it stands there, so no slot is left between it and this one.
    pub(crate) mark_after: Option<i64>,
    /// For an explicit fire: whether to raise a mark not yet set (the slot is at or before
    /// now, as a first loop pass would have fired it).
    pub(crate) raise_from_unset: bool,
}

/// Registers a fire (`INSERT` of a `pending` row, or of a `skipped` one when the previous fire
/// still runs under `Overlap::Skip`) in the caller's transaction; for the loop
/// (`above_mark_only`) it also raises the high-water mark.
pub(crate) fn register_fire(
    conn: &Connection,
    judge: &Judge,
    registration: &FireRegistration<'_>,
) -> JournalResult<Registered> {
    let fire = registration.fire;
    let job = fire.job.as_str();
    if let Some((state, attempts)) = fire_state(conn, job, fire.slot)? {
        return Ok(Registered::Existing { state, attempts });
    }
    if registration.above_mark_only
        && high_water_mark(conn, job)?.is_some_and(|mark| mark >= fire.slot.as_millis())
    {
        return Ok(Registered::AtOrBelowMark);
    }
    let overlapping = match registration.overlap_skip {
        None => false,
        Some(true) => true,
        Some(false) => live_unfinished_exists(conn, judge, job, fire.slot)?,
    };
    let (state, reason, finished_at) = if overlapping {
        (
            FireState::Skipped,
            Some(REASON_OVERLAP),
            Some(registration.now),
        )
    } else {
        (FireState::Pending, None, None)
    };
    conn.prepare_cached(
        "INSERT INTO fires (job, slot, slot_ms, execution_id, state, reason, registered_at,
                            finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        job,
        fire.slot.to_rfc3339(),
        fire.slot.as_millis(),
        fire.execution_id.to_string(),
        state.as_str(),
        reason,
        registration.now,
        finished_at,
    ])?;
    // The loop decides every slot up to the mark (fired or recorded skipped) in the same
    // transaction, so it raises the mark. An explicit fire raises it only when that hides no
    // slot from the loop (see `FireRegistration::mark_after`).
    let raise = registration.above_mark_only
        || match high_water_mark(conn, job)? {
            None => registration.raise_from_unset,
            Some(mark) => registration.mark_after == Some(mark),
        };
    if raise {
        raise_mark(conn, job, fire.slot)?;
    }
    Ok(match reason {
        Some(reason) => Registered::NewSkipped(reason.to_owned()),
        None => Registered::New,
    })
}

/// Records a run of missed slots, unless another process recorded it or handled past it.
/// `true` when this call recorded it.
pub(crate) fn record_skipped(
    conn: &Connection,
    job: &str,
    skipped: &SkippedSlots,
    reason: &str,
    now: &str,
) -> JournalResult<bool> {
    if high_water_mark(conn, job)?.is_some_and(|mark| mark >= skipped.first.as_millis()) {
        return Ok(false);
    }
    let (count, exact) = match skipped.count {
        SlotCount::Exact(count) => (count, true),
        SlotCount::AtLeast(count) => (count, false),
    };
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO skipped_slots (job, first_slot, first_slot_ms, last_slot,
                 last_slot_ms, slot_count, count_exact, reason, recorded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            job,
            skipped.first.to_rfc3339(),
            skipped.first.as_millis(),
            skipped.last.to_rfc3339(),
            skipped.last.as_millis(),
            i64::try_from(count.max(1)).unwrap_or(i64::MAX),
            exact,
            reason,
            now,
        ])?;
    raise_mark(conn, job, skipped.last)?;
    Ok(inserted == 1)
}

/// Marks attempt `attempt` of a fire as started, and ends any wait for an operator (the fire
/// is being driven again). `attempts` becomes the largest of its value, `attempt`, and the body
/// calls the journal counted over the fire's steps (each guarded step counts its first call
/// and every re-run after a crash).
pub(crate) fn mark_running(
    conn: &Connection,
    fire: &Fire,
    attempt: u32,
    now: &str,
) -> JournalResult<()> {
    let body_calls = step_attempts_total(conn, fire.execution_id)?;
    conn.prepare_cached(
        "UPDATE fires SET state = 'running', awaiting_operator = 0,
                          attempts = max(attempts, ?3, ?4),
                          started_at = coalesce(started_at, ?5)
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')",
    )?
    .execute(params![
        fire.job.as_str(),
        fire.slot.as_millis(),
        attempt,
        body_calls,
        now
    ])?;
    Ok(())
}

/// Records a fire's final state, and its body calls as [`mark_running`] counts them. A row
/// already final is left as it is.
pub(crate) fn mark_finished(
    conn: &Connection,
    fire: &Fire,
    state: FireState,
    reason: Option<&str>,
    now: &str,
) -> JournalResult<()> {
    debug_assert!(state.is_final());
    let body_calls = step_attempts_total(conn, fire.execution_id)?;
    conn.prepare_cached(
        "UPDATE fires SET state = ?3, reason = ?4, finished_at = ?5, awaiting_operator = 0,
                          attempts = max(attempts, ?6)
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')",
    )?
    .execute(params![
        fire.job.as_str(),
        fire.slot.as_millis(),
        state.as_str(),
        reason,
        now,
        body_calls
    ])?;
    Ok(())
}

/// Marks an unfinished fire as waiting for an operator (an ambiguous body the policy will not
/// decide), with the reason. Recovery passes it over until its intent is resolved.
pub(crate) fn await_operator(conn: &Connection, fire: &Fire, reason: &str) -> JournalResult<()> {
    let body_calls = step_attempts_total(conn, fire.execution_id)?;
    conn.prepare_cached(
        "UPDATE fires SET reason = ?3, awaiting_operator = 1, attempts = max(attempts, ?4)
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')",
    )?
    .execute(params![
        fire.job.as_str(),
        fire.slot.as_millis(),
        reason,
        body_calls
    ])?;
    Ok(())
}

/// One page of the job's unfinished fires that recovery may resume: oldest first, after the
/// keyset cursor `after` (epoch milliseconds), at most [`UNFINISHED_FIRES_SCANNED_MAX`]. Each
/// comes with whether a live holder has its execution locked.
///
/// A fire waiting for an operator is passed over and does not count toward the page: its last
/// drive met an ambiguous step (`Error::Ambiguous`: policy `Fail`, or `Retry` past the
/// journal's crash bound) and that step is still in the ambiguous window. `durably resolve`
/// completes or removes the intent, which ends the wait. A page shorter than the maximum is
/// the last one.
pub(crate) fn recoverable(
    conn: &Connection,
    judge: &Judge,
    job: &JobId,
    after: Option<i64>,
) -> JournalResult<Vec<(Fire, bool)>> {
    let mut statement = conn.prepare_cached(
        "SELECT slot_ms, awaiting_operator FROM fires
         WHERE job = ?1 AND state IN ('pending', 'running') AND slot_ms > ?2
         ORDER BY slot_ms",
    )?;
    let mut rows = statement.query(params![job.as_str(), after.unwrap_or(i64::MIN)])?;
    let mut fires = Vec::new();
    while fires.len() < UNFINISHED_FIRES_SCANNED_MAX as usize {
        let Some(row) = rows.next()? else {
            break;
        };
        let slot_ms: i64 = row.get(0)?;
        let awaiting_operator: bool = row.get(1)?;
        let slot = Slot::from_millis(slot_ms)
            .map_err(|error| JournalError::Inconsistent(format!("fires row of {job}: {error}")))?;
        let fire = Fire::new(job, slot);
        if awaiting_operator && ambiguous_step_exists(conn, fire.execution_id)? {
            continue;
        }
        let held = held_live(conn, judge, &fire.execution_id.to_string())?;
        fires.push((fire, held));
    }
    Ok(fires)
}

fn held_live(conn: &Connection, judge: &Judge, execution_id: &str) -> JournalResult<bool> {
    Ok(
        match durably_lock::read(conn, execution_id)?.and_then(|row| row.holder) {
            None => false,
            Some(holder) => !judge.judge(&holder).is_dead(),
        },
    )
}

/// Whether a live holder is running an unfinished fire of the job other than the one at
/// `except`. Not capped: every unfinished fire's lock row is read, and every held one judged,
/// until a live one is found (a fire with a free lock, such as one waiting for an operator,
/// costs no judgement).
fn live_unfinished_exists(
    conn: &Connection,
    judge: &Judge,
    job: &str,
    except: Slot,
) -> JournalResult<bool> {
    let mut statement = conn.prepare_cached(
        "SELECT execution_id FROM fires
         WHERE job = ?1 AND state IN ('pending', 'running') AND slot_ms <> ?2
         ORDER BY slot_ms",
    )?;
    let unfinished = statement
        .query_map(params![job, except.as_millis()], |row| {
            row.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for execution_id in unfinished {
        if held_live(conn, judge, &execution_id)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A fire's state and attempts.
pub(crate) fn fire_state(
    conn: &Connection,
    job: &str,
    slot: Slot,
) -> JournalResult<Option<(FireState, u32)>> {
    let row: Option<(String, i64)> = conn
        .prepare_cached("SELECT state, attempts FROM fires WHERE job = ?1 AND slot_ms = ?2")?
        .query_row(params![job, slot.as_millis()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    row.map(|(state, attempts)| Ok((parse_state(&state)?, u32::try_from(attempts).unwrap_or(0))))
        .transpose()
}

fn parse_state(word: &str) -> JournalResult<FireState> {
    FireState::parse(word)
        .ok_or_else(|| JournalError::Inconsistent(format!("unknown fire state {word:?}")))
}
