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

/// The most unfinished fires of one job the recovery scan looks at in one pass. The scan pages
/// through the rest with a keyset cursor on later passes (see [`recoverable`]); fires waiting
/// for an operator are not scanned at all, so they can never crowd out the others.
pub(crate) const UNFINISHED_FIRES_SCANNED_MAX: u32 = 100;

/// The SQL condition, on a `fires` row aliased `f`, of a fire waiting for an operator: its
/// last drive met an ambiguous step (`Error::Ambiguous`: policy `Fail`, or `Retry` past the
/// journal's crash bound) and that step is still in the ambiguous window. `durably resolve`
/// completes or removes the intent, which ends the wait.
const AWAITING_OPERATOR: &str = "(f.awaiting_operator = 1 AND EXISTS (
        SELECT 1 FROM steps AS s WHERE s.execution_id = f.execution_id AND s.state = 'intent'))";

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
        Some(false) => live_unfinished_exists(conn, judge, fire.job, Some(fire.slot))?,
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
    // The loop decides every slot up to the mark (fired or recorded skipped) in the same
    // transaction, so it raises the mark. An explicit fire raises it only when that hides no
    // slot from the loop (see `FireRegistration::mark_after`).
    let raise = fire.above_mark_only
        || match high_water_mark(conn, fire.job)? {
            None => fire.raise_from_unset,
            Some(mark) => fire.mark_after == Some(mark),
        };
    if raise {
        raise_mark(conn, fire.job, fire.slot)?;
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

/// The real number of body calls of a fire so far: the attempts the journal counted over its
/// steps (each guarded step counts its first call and every re-run after a crash).
const STEP_ATTEMPTS: &str = "(SELECT coalesce(sum(s.attempts), 0) FROM steps AS s
                               WHERE s.execution_id = fires.execution_id)";

/// Marks attempt `attempt` of a fire as started, and ends any wait for an operator (the fire
/// is being driven again). `attempts` becomes the larger of `attempt` and the body calls the
/// journal counted.
pub(crate) fn mark_running(
    conn: &Connection,
    job: &str,
    slot: Slot,
    attempt: u32,
    now: &str,
) -> JournalResult<()> {
    conn.prepare_cached(&format!(
        "UPDATE fires SET state = 'running', awaiting_operator = 0,
                          attempts = max(attempts, ?3, {STEP_ATTEMPTS}),
                          started_at = coalesce(started_at, ?4)
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')"
    ))?
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
    conn.prepare_cached(&format!(
        "UPDATE fires SET state = ?3, reason = ?4, finished_at = ?5, awaiting_operator = 0,
                          attempts = max(attempts, {STEP_ATTEMPTS})
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')"
    ))?
    .execute(params![job, slot.as_millis(), state.as_str(), reason, now])?;
    Ok(())
}

/// Marks an unfinished fire as waiting for an operator (an ambiguous body the policy will not
/// decide), with the reason. Recovery leaves it alone until its intent is resolved.
pub(crate) fn await_operator(
    conn: &Connection,
    job: &str,
    slot: Slot,
    reason: &str,
) -> JournalResult<()> {
    conn.prepare_cached(&format!(
        "UPDATE fires SET reason = ?3, awaiting_operator = 1,
                          attempts = max(attempts, {STEP_ATTEMPTS})
         WHERE job = ?1 AND slot_ms = ?2 AND state IN ('pending', 'running')"
    ))?
    .execute(params![job, slot.as_millis(), reason])?;
    Ok(())
}

/// One page of the job's unfinished fires that recovery may resume: oldest first, after the
/// keyset cursor `after` (epoch milliseconds), at most [`UNFINISHED_FIRES_SCANNED_MAX`], leaving
/// out fires waiting for an operator. Each comes with whether a live holder has its execution
/// locked. A page shorter than the maximum is the last one.
pub(crate) fn recoverable(
    conn: &Connection,
    judge: &Judge,
    job: &str,
    after: Option<i64>,
) -> JournalResult<Vec<(Slot, bool)>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT f.slot_ms, f.execution_id FROM fires AS f
         WHERE f.job = ?1 AND f.state IN ('pending', 'running') AND f.slot_ms > ?2
           AND NOT {AWAITING_OPERATOR}
         ORDER BY f.slot_ms LIMIT ?3"
    ))?;
    let rows = statement
        .query_map(
            params![job, after.unwrap_or(i64::MIN), UNFINISHED_FIRES_SCANNED_MAX],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut fires = Vec::with_capacity(rows.len());
    for (slot_ms, execution_id) in rows {
        let slot = Slot::from_millis(slot_ms)
            .map_err(|error| JournalError::Inconsistent(format!("fires row of {job}: {error}")))?;
        fires.push((slot, held_live(conn, judge, &execution_id)?));
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

/// Whether a live holder is running an unfinished fire of the job other than `except`. Not
/// capped: every unfinished fire whose lock has a holder is judged until a live one is found
/// (fires with a free lock, such as those waiting for an operator, cost no judgement).
fn live_unfinished_exists(
    conn: &Connection,
    judge: &Judge,
    job: &str,
    except: Option<Slot>,
) -> JournalResult<bool> {
    let mut statement = conn.prepare_cached(
        "SELECT f.execution_id FROM fires AS f JOIN locks AS l ON l.resource = f.execution_id
         WHERE f.job = ?1 AND f.state IN ('pending', 'running') AND f.slot_ms <> ?2
           AND l.instance_id IS NOT NULL
         ORDER BY f.slot_ms",
    )?;
    let except_ms = except.map_or(i64::MIN, Slot::as_millis);
    let held = statement
        .query_map(params![job, except_ms], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for execution_id in held {
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
