//! The slot ledger: the `jobs`, `fires` and `skipped_slots` tables of `schema/0003_scheduler.sql`.
//!
//! Every function here runs on a connection the journal hands out, inside its transaction
//! (`Journal::write` for changes, `Journal::read` for queries), so each change commits
//! atomically with the rest of its request.
//!
//! Invariant: `jobs.last_slot_ms` only grows, and every change to it goes through
//! [`raise_mark`]. The loop registers only slots after it, re-read inside the registering
//! transaction, so two processes can never both register a slot as new.

use durably_journal::{Error as JournalError, Result as JournalResult};
use durably_lock::Judge;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

use crate::catch_up::{SkippedSlots, SlotCount};
use crate::outcome::FireState;
use crate::slot::Slot;

/// The most unfinished fires of one job the recovery scan and the overlap check look at in one
/// pass. More than this many unfinished fires of one job are picked up by later passes.
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
    now: &str,
) -> JournalResult<Option<PreviousJob>> {
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
            conn.prepare_cached(
                "INSERT INTO events (at, execution_id, seq, kind, detail)
                 VALUES (?1, NULL, NULL, ?2, ?3)",
            )?
            .execute(params![now, EVENT_JOB_REDEFINED, detail.to_string()])?;
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
    pub(crate) job: &'a str,
    pub(crate) slot: Slot,
    pub(crate) execution_id: &'a str,
    pub(crate) now: &'a str,
    /// Register only a slot after the high-water mark (the loop); `false` for an explicit fire.
    pub(crate) above_mark_only: bool,
    /// `Some` under `Overlap::Skip`: whether this process itself is running a fire of the job.
    pub(crate) overlap_skip: Option<bool>,
}

/// Registers a fire (`INSERT` of a `pending` row, or of a `skipped` one when the previous fire
/// still runs under `Overlap::Skip`) and raises the high-water mark, in the caller's
/// transaction.
pub(crate) fn register_fire(
    conn: &Connection,
    judge: &Judge,
    fire: &FireRegistration<'_>,
) -> JournalResult<Registered> {
    let existing: Option<(String, i64)> = conn
        .prepare_cached("SELECT state, attempts FROM fires WHERE job = ?1 AND slot_ms = ?2")?
        .query_row(params![fire.job, fire.slot.as_millis()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    if let Some((state, attempts)) = existing {
        return Ok(Registered::Existing {
            state: parse_state(&state)?,
            attempts: u32::try_from(attempts).unwrap_or(0),
        });
    }
    if fire.above_mark_only
        && high_water_mark(conn, fire.job)?.is_some_and(|mark| mark >= fire.slot.as_millis())
    {
        return Ok(Registered::AtOrBelowMark);
    }
    let overlapping = match fire.overlap_skip {
        None => false,
        Some(true) => true,
        Some(false) => !live_unfinished(conn, judge, fire.job, Some(fire.slot))?.is_empty(),
    };
    let (state, reason, finished_at) = if overlapping {
        ("skipped", Some(REASON_OVERLAP), Some(fire.now))
    } else {
        ("pending", None, None)
    };
    conn.prepare_cached(
        "INSERT INTO fires (job, slot, slot_ms, execution_id, state, reason, registered_at,
                            finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        fire.job,
        fire.slot.to_rfc3339(),
        fire.slot.as_millis(),
        fire.execution_id,
        state,
        reason,
        fire.now,
        finished_at,
    ])?;
    raise_mark(conn, fire.job, fire.slot)?;
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

/// Marks attempt `attempt` of a fire as started.
pub(crate) fn mark_running(
    conn: &Connection,
    job: &str,
    slot: Slot,
    attempt: u32,
    now: &str,
) -> JournalResult<()> {
    conn.prepare_cached(
        "UPDATE fires SET state = 'running', attempts = max(attempts, ?3),
                          started_at = coalesce(started_at, ?4)
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')",
    )?
    .execute(params![job, slot.as_millis(), attempt, now])?;
    Ok(())
}

/// Records a fire's final state. A row already final is left as it is.
pub(crate) fn mark_finished(
    conn: &Connection,
    job: &str,
    slot: Slot,
    state: FireState,
    reason: Option<&str>,
    now: &str,
) -> JournalResult<()> {
    debug_assert!(state.is_final());
    conn.prepare_cached(
        "UPDATE fires SET state = ?3, reason = ?4, finished_at = ?5
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')",
    )?
    .execute(params![job, slot.as_millis(), state.as_str(), reason, now])?;
    Ok(())
}

/// Leaves a note on an unfinished fire (an ambiguous body waiting for an operator).
pub(crate) fn note(conn: &Connection, job: &str, slot: Slot, reason: &str) -> JournalResult<()> {
    conn.prepare_cached(
        "UPDATE fires SET reason = ?3
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')",
    )?
    .execute(params![job, slot.as_millis(), reason])?;
    Ok(())
}

/// The job's unfinished fires (oldest first, at most [`UNFINISHED_FIRES_SCANNED_MAX`]), each
/// with whether a live holder has its execution locked. `except` leaves one slot out.
pub(crate) fn unfinished(
    conn: &Connection,
    judge: &Judge,
    job: &str,
    except: Option<Slot>,
) -> JournalResult<Vec<(Slot, bool)>> {
    let mut statement = conn.prepare_cached(
        "SELECT slot_ms, execution_id FROM fires
         WHERE job = ?1 AND state IN ('pending', 'running') AND slot_ms <> ?2
         ORDER BY slot_ms LIMIT ?3",
    )?;
    let except_ms = except.map_or(-1, Slot::as_millis);
    let rows = statement
        .query_map(
            params![job, except_ms, UNFINISHED_FIRES_SCANNED_MAX],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut fires = Vec::with_capacity(rows.len());
    for (slot_ms, execution_id) in rows {
        let slot = Slot::from_millis(slot_ms)
            .map_err(|error| JournalError::Inconsistent(format!("fires row of {job}: {error}")))?;
        let held_live = match durably_lock::read(conn, &execution_id)?.and_then(|row| row.holder) {
            None => false,
            Some(holder) => !judge.judge(&holder).is_dead(),
        };
        fires.push((slot, held_live));
    }
    Ok(fires)
}

/// The job's unfinished fires that a live holder is running, other than `except`.
fn live_unfinished(
    conn: &Connection,
    judge: &Judge,
    job: &str,
    except: Option<Slot>,
) -> JournalResult<Vec<Slot>> {
    Ok(unfinished(conn, judge, job, except)?
        .into_iter()
        .filter_map(|(slot, live)| live.then_some(slot))
        .collect())
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
