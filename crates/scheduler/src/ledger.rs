//! The slot ledger: the `jobs`, `fires` and `skipped_slots` tables, which this crate owns
//! (`schema/scheduler/`), and the only place their SQL lives.
//!
//! Every function here runs on a connection the journal hands out, inside its transaction
//! (`Journal::write` for changes, `Journal::read` for queries), so each change commits
//! atomically with the rest of its request. None of them reads or writes the journal's own
//! tables: what they need of the journal they ask through its functions
//! ([`durably_journal::execution_status`], [`durably_journal::record_event`]); a fire's
//! execution is started through the runtime ([`durably_runtime::PreparedStart`]) in the
//! transaction that inserts its row.
//!
//! Invariant: `jobs.last_slot_ms` only grows, and every change to it goes through
//! [`raise_mark`]. The loop registers only slots after it, re-read inside the registering
//! transaction, so two processes can never both register a slot as new.

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, Sql, params};
use durably_journal::{
    Error as JournalError, ExtensionSchema, Migration, PgSchema, Result as JournalResult, Status,
    execution_status,
};
use durably_lock::format_timestamp;
use serde_json::json;
use uuid::Uuid;

use crate::catch_up::{SkippedSlots, SlotCount};
use crate::fire_id::Fire;
use crate::outcome::FireState;
use crate::slot::Slot;

/// The ledger's tables and views in the journal's file, applied by
/// `Journal::migrate_extension` when a `Scheduler` is built. Migration 1 adopts the tables of
/// files whose journal created them before the scheduler owned its schema.
pub(crate) static LEDGER_SCHEMA: ExtensionSchema = ExtensionSchema {
    owner: "scheduler",
    migrations: &[
        Migration {
            name: "0001_ledger",
            sql: include_str!("../../../schema/scheduler/0001_ledger.sql"),
            postgres: None,
        },
        Migration {
            name: "0002_workflow_fires",
            sql: include_str!("../../../schema/scheduler/0002_workflow_fires.sql"),
            postgres: None,
        },
    ],
    views: include_str!("../../../schema/scheduler/views.sql"),
    postgres: PgSchema {
        baseline: include_str!("../../../schema/postgres/scheduler/0001_ledger.sql"),
        baseline_version: 2,
        views: include_str!("../../../schema/postgres/scheduler/views.sql"),
    },
};

/// The most unfinished fires of one job one page of [`copy_ends`] looks at, to copy the ends
/// of their executions in and to tell whether an earlier fire still runs. Rows whose
/// executions ended are copied and leave the unfinished set; rows that stay (parked
/// executions) are paged past with a cursor, so later calls see the rest.
pub(crate) const UNFINISHED_FIRES_SCANNED_MAX: u32 = 100;

/// The reason recorded for a fire whose execution an operator cancelled.
pub(crate) const REASON_CANCELLED: &str = "its execution was cancelled";

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

/// The read of a `jobs` row before its registration: locked `FOR UPDATE` on PostgreSQL, so
/// that two schedulers registering the job at once take turns.
const PREVIOUS_JOB: Sql = Sql {
    sqlite: "SELECT definition, definition_hash, last_slot_ms FROM jobs WHERE job = ?1",
    postgres: "SELECT definition, definition_hash, last_slot_ms FROM jobs WHERE job = ?1
               FOR UPDATE",
};

/// The insert of a new `jobs` row. On PostgreSQL a row another scheduler inserted since the
/// read inserts nothing (a unique violation would abort the whole transaction), and the row
/// is read again, locked.
const INSERT_JOB: Sql = Sql {
    sqlite: "INSERT INTO jobs (job, definition, definition_hash, registered_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4)",
    postgres: "INSERT INTO jobs (job, definition, definition_hash, registered_at, updated_at)
               VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (job) DO NOTHING",
};

fn previous_job(conn: &Connection, job: &str) -> JournalResult<Option<PreviousJob>> {
    Ok(conn
        .prepare_cached(conn.pick(&PREVIOUS_JOB))?
        .query_row(params![job], |row| {
            Ok(PreviousJob {
                definition: row.get(0)?,
                definition_hash: row.get(1)?,
                last_slot_ms: row.get(2)?,
            })
        })
        .optional()?)
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
    let mut previous = previous_job(conn, job)?;
    if previous.is_none() {
        let inserted = conn
            .prepare_cached(conn.pick(&INSERT_JOB))?
            .execute(params![job, definition, definition_hash, now])?;
        if inserted == 1 {
            return Ok(None);
        }
        // Another scheduler registered the job since the read (PostgreSQL).
        previous = previous_job(conn, job)?;
    }
    match &previous {
        None => {
            return Err(JournalError::Inconsistent(format!(
                "job {job:?} was neither inserted nor found in the jobs table"
            )));
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

/// A job's paused flag and high-water mark, as [`lock_job`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockedJob {
    pub(crate) paused: bool,
    pub(crate) last_slot_ms: Option<i64>,
}

/// The read of [`lock_job`].
const LOCK_JOB: Sql = Sql {
    sqlite: "SELECT paused, last_slot_ms FROM jobs WHERE job = ?1",
    postgres: "SELECT paused, last_slot_ms FROM jobs WHERE job = ?1 FOR UPDATE",
};

/// The job's paused flag and mark, its row locked until the transaction ends on PostgreSQL:
/// schedulers deciding the job's fires on several hosts take turns, each re-reading the mark
/// the previous one raised, so no two decide the same slot. `None` when the job is not in the
/// `jobs` table. On SQLite the writer already serializes them.
pub(crate) fn lock_job(conn: &Connection, job: &str) -> JournalResult<Option<LockedJob>> {
    Ok(conn
        .prepare_cached(conn.pick(&LOCK_JOB))?
        .query_row(params![job], |row| {
            Ok(LockedJob {
                paused: row.get(0)?,
                last_slot_ms: row.get(1)?,
            })
        })
        .optional()?)
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

/// What the ledger holds for a fire about to be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// No row: the fire may be started.
    None,
    /// A row left `pending` by a scheduler from before fires were workflows (registered, never
    /// opened, no execution): the fire may be started, and the row is updated.
    Pending,
    /// The fire was started or decided before.
    Existing(FireState),
}

/// Looks the fire up.
pub(crate) fn find_fire(conn: &Connection, fire: &Fire) -> JournalResult<Found> {
    Ok(match fire_state(conn, fire.job.as_str(), fire.slot)? {
        None => Found::None,
        Some((FireState::Pending, _)) => Found::Pending,
        Some((state, _)) => Found::Existing(state),
    })
}

/// The insert of a fire. On PostgreSQL a slot another scheduler registered since
/// [`find_fire`] inserts nothing (a unique violation would abort the whole transaction):
/// exactly one fire per slot across hosts.
const INSERT_FIRE: Sql = Sql {
    sqlite: "INSERT INTO fires (job, slot, slot_ms, execution_id, state, reason, attempts,
                            registered_at, started_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    postgres: "INSERT INTO fires (job, slot, slot_ms, execution_id, state, reason, attempts,
                                  registered_at, started_at, finished_at)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
               ON CONFLICT (job, slot_ms) DO NOTHING",
};

/// Records a fire whose execution is started in this same transaction (state `running`), or
/// one decided skipped with `reason`. Returns whether it did: `false` when the slot's fire
/// was registered since `found` was read (by another scheduler, on PostgreSQL), and then the
/// caller starts nothing.
pub(crate) fn insert_fire(
    conn: &Connection,
    fire: &Fire,
    found: &Found,
    skipped: Option<&str>,
    now: &str,
) -> JournalResult<bool> {
    let (state, started_at, finished_at) = match skipped {
        None => (FireState::Running, Some(now), None),
        Some(_) => (FireState::Skipped, None, Some(now)),
    };
    if *found == Found::Pending {
        let changed = conn
            .prepare_cached(
                "UPDATE fires SET state = ?3, reason = ?4, attempts = 1, started_at = ?5,
                              finished_at = ?6
             WHERE job = ?1 AND slot_ms = ?2 AND state = 'pending'",
            )?
            .execute(params![
                fire.job.as_str(),
                fire.slot.as_millis(),
                state.as_str(),
                skipped,
                started_at,
                finished_at,
            ])?;
        return Ok(changed == 1);
    }
    let inserted = conn
        .prepare_cached(conn.pick(&INSERT_FIRE))?
        .execute(params![
            fire.job.as_str(),
            fire.slot.to_rfc3339(),
            fire.slot.as_millis(),
            fire.execution_id().to_string(),
            state.as_str(),
            skipped,
            i64::from(skipped.is_none()),
            now,
            started_at,
            finished_at,
        ])?;
    Ok(inserted == 1)
}

/// Whether the job is paused; `None` when the job is not in the `jobs` table.
pub(crate) fn paused(conn: &Connection, job: &str) -> JournalResult<Option<bool>> {
    Ok(conn
        .prepare_cached("SELECT paused FROM jobs WHERE job = ?1")?
        .query_row(params![job], |row| row.get(0))
        .optional()?)
}

/// Sets the job's paused flag; `false` when the job is not in the `jobs` table. Setting the
/// flag it already has changes nothing.
pub(crate) fn set_paused(
    conn: &Connection,
    job: &str,
    paused: bool,
    now: &str,
) -> JournalResult<bool> {
    if self::paused(conn, job)?.is_none() {
        return Ok(false);
    }
    conn.prepare_cached(
        "UPDATE jobs SET paused = ?2, paused_changed_at = ?3 WHERE job = ?1 AND paused <> ?2",
    )?
    .execute(params![job, paused, now])?;
    Ok(true)
}

/// The slots of the job's fires left `pending` by a scheduler from before fires were
/// workflows (registered, never opened), oldest first, at most `limit`.
pub(crate) fn pending_slots(conn: &Connection, job: &str, limit: u32) -> JournalResult<Vec<i64>> {
    conn.prepare_cached(
        "SELECT slot_ms FROM fires WHERE job = ?1 AND state = 'pending' ORDER BY slot_ms LIMIT ?2",
    )?
    .query_map(params![job, limit], |row| row.get(0))?
    .collect::<durably_db::Result<Vec<i64>>>()
    .map_err(JournalError::from)
}

/// The stored definition of a job, `None` when the job is not in the `jobs` table.
pub(crate) fn job_definition(conn: &Connection, job: &str) -> JournalResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT definition FROM jobs WHERE job = ?1")?
        .query_row(params![job], |row| row.get(0))
        .optional()?)
}

/// One `jobs` row as the schedule list shows it.
pub(crate) struct JobRow {
    pub(crate) job: String,
    pub(crate) definition: String,
    pub(crate) last_slot_ms: Option<i64>,
    pub(crate) paused: bool,
}

/// Every job in the `jobs` table, by id.
pub(crate) fn jobs(conn: &Connection) -> JournalResult<Vec<JobRow>> {
    conn.prepare_cached("SELECT job, definition, last_slot_ms, paused FROM jobs ORDER BY job")?
        .query_map([], |row| {
            Ok(JobRow {
                job: row.get(0)?,
                definition: row.get(1)?,
                last_slot_ms: row.get(2)?,
                paused: row.get(3)?,
            })
        })?
        .collect::<durably_db::Result<Vec<_>>>()
        .map_err(JournalError::from)
}

/// How many fires of the job are in each state, as of now: a started fire counts under its
/// execution's end once it has ended (through the `fire_ledger` view).
pub(crate) fn fire_counts(conn: &Connection, job: &str) -> JournalResult<Vec<(FireState, u64)>> {
    let mut statement = conn.prepare_cached(
        "SELECT state, count(*) FROM fire_ledger WHERE job = ?1 GROUP BY state ORDER BY state",
    )?;
    let rows = statement
        .query_map(params![job], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })?
        .collect::<durably_db::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(state, count)| Ok((parse_state(&state)?, u64::try_from(count).unwrap_or(0))))
        .collect()
}

/// The fire state an execution's status gives a started fire, with the reason to record;
/// `None` while the execution has not ended.
fn ended_state(status: Status) -> Option<(FireState, Option<&'static str>)> {
    match status {
        Status::Completed => Some((FireState::Completed, None)),
        Status::Failed => Some((FireState::Failed, None)),
        Status::Cancelled => Some((FireState::Skipped, Some(REASON_CANCELLED))),
        _ => None,
    }
}

/// Copies the end of every ended execution among a page or two of the job's unfinished fires
/// into their rows; returns whether one of those it looked
/// at has not ended, and the cursor to pass to the next call. A row with no execution (an
/// old `pending` one) counts as unfinished.
///
/// The first page is always the oldest unfinished fires (so an earlier fire that still runs
/// is seen). When it is full, a second page follows from `cursor` (a slot in epoch ms, or
/// `i64::MIN`), and the cursor returned moves on past it, back to the start once a page comes
/// up short: fires parked for good at the head (waiting, awaiting an operator) never hide
/// the ends of the fires after them.
pub(crate) fn copy_ends(
    conn: &Connection,
    job: &str,
    now: &str,
    cursor: i64,
) -> JournalResult<(bool, i64)> {
    let head = copy_page(conn, job, now, i64::MIN)?;
    let Some(head_last) = head.full_through else {
        return Ok((head.running, i64::MIN));
    };
    let more = copy_page(conn, job, now, cursor.max(head_last))?;
    Ok((
        head.running || more.running,
        more.full_through.unwrap_or(i64::MIN),
    ))
}

/// What [`copy_page`] saw.
struct Page {
    /// Whether a fire it looked at has not ended.
    running: bool,
    /// The last slot (epoch ms) of a full page; `None` when the page came up short.
    full_through: Option<i64>,
}

/// [`copy_ends`] over one page: the oldest unfinished fires after the slot `after` (ms).
fn copy_page(conn: &Connection, job: &str, now: &str, after: i64) -> JournalResult<Page> {
    let mut statement = conn.prepare_cached(
        "SELECT slot_ms, execution_id FROM fires
         WHERE job = ?1 AND state IN ('pending', 'running') AND slot_ms > ?3
         ORDER BY slot_ms LIMIT ?2",
    )?;
    let unfinished = statement
        .query_map(params![job, UNFINISHED_FIRES_SCANNED_MAX, after], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<durably_db::Result<Vec<_>>>()?;
    let full_through = (unfinished.len() >= UNFINISHED_FIRES_SCANNED_MAX as usize)
        .then(|| unfinished.last().map(|(slot_ms, _)| *slot_ms))
        .flatten();
    let mut running = false;
    for (slot_ms, execution_id) in unfinished {
        let id = Uuid::parse_str(&execution_id).map_err(|error| {
            JournalError::Inconsistent(format!("fires row of job {job:?}: {error}"))
        })?;
        let ended = execution_status(conn, id)?.and_then(ended_state);
        let Some((state, reason)) = ended else {
            running = true;
            continue;
        };
        conn.prepare_cached(
            "UPDATE fires SET state = ?3, reason = ?4, finished_at = ?5
             WHERE job = ?1 AND slot_ms = ?2 AND state = 'running'",
        )?
        .execute(params![job, slot_ms, state.as_str(), reason, now])?;
    }
    Ok(Page {
        running,
        full_through,
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
            "INSERT INTO skipped_slots (job, first_slot, first_slot_ms, last_slot,
                 last_slot_ms, slot_count, count_exact, reason, recorded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (job, first_slot_ms) DO NOTHING",
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

/// A fire's state as of now, and its attempts: a started fire whose execution has ended has
/// that end, even before [`copy_ends`] copied it into the row.
pub(crate) fn fire_state(
    conn: &Connection,
    job: &str,
    slot: Slot,
) -> JournalResult<Option<(FireState, u32)>> {
    let row: Option<(String, i64, String)> = conn
        .prepare_cached(
            "SELECT state, attempts, execution_id FROM fires WHERE job = ?1 AND slot_ms = ?2",
        )?
        .query_row(params![job, slot.as_millis()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let Some((state, attempts, execution_id)) = row else {
        return Ok(None);
    };
    let mut state = parse_state(&state)?;
    if state == FireState::Running {
        let id = Uuid::parse_str(&execution_id).map_err(|error| {
            JournalError::Inconsistent(format!("fires row of job {job:?}: {error}"))
        })?;
        if let Some((ended, _)) = execution_status(conn, id)?.and_then(ended_state) {
            state = ended;
        }
    }
    Ok(Some((state, u32::try_from(attempts).unwrap_or(0))))
}

fn parse_state(word: &str) -> JournalResult<FireState> {
    FireState::parse(word)
        .ok_or_else(|| JournalError::Inconsistent(format!("unknown fire state {word:?}")))
}
