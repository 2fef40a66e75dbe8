//! Reading what the journal holds: executions, steps, events, lock holders, and the
//! executions a program should resume. Nothing here writes. Each query is a function of a
//! connection, so that [`Journal`] and [`crate::Inspector`] read with the same SQL.

use durably_lock::{Judge, Judgement, LockRow};
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::error::Result;
use crate::journal::Journal;
use crate::records::{
    AWAITING_OPERATOR_QUERY, AwaitingOperatorStep, EVENT_COLUMNS, EXECUTION_COLUMNS, EventRecord,
    ExecutionRecord, LIST_LIMIT_DEFAULT, ListFilter, STEP_COLUMNS, StepRecord, execution_columns,
};
use crate::states::Status;

impl Journal {
    /// The executions a program should resume at start: interrupted ones, and running ones
    /// whose lock is free or whose holder is dead. Oldest first.
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn recoverable(&self) -> Result<Vec<ExecutionRecord>> {
        let candidates = self.read(|conn| {
            let mut statement = conn.prepare_cached(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions
                 WHERE status IN ('running', 'interrupted') ORDER BY created_at"
            ))?;
            let rows = statement.query_map([], ExecutionRecord::from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })?;
        let mut recoverable = Vec::with_capacity(candidates.len());
        for record in candidates {
            let resource = record.execution_id.to_string();
            let lock = self.read(|conn| Ok(durably_lock::read(conn, &resource)?))?;
            let free = match lock.and_then(|row| row.holder) {
                None => true,
                Some(holder) => self.inner.locker.judge().judge(&holder).is_dead(),
            };
            if free {
                recoverable.push(record);
            }
        }
        Ok(recoverable)
    }

    /// The steps an operator must answer: for each execution `awaiting_operator`, its step
    /// in the ambiguous window, with its policy and why no policy decided it. Longest waiting
    /// first. No process reopens these executions until the step is resolved
    /// ([`crate::Operator::resolve_seen`]).
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn awaiting_operator(&self) -> Result<Vec<AwaitingOperatorStep>> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(AWAITING_OPERATOR_QUERY)?;
            let rows = statement.query_map([], AwaitingOperatorStep::from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// One execution's row.
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn get(&self, id: Uuid) -> Result<Option<ExecutionRecord>> {
        self.read(|conn| get(conn, id))
    }

    /// Executions, newest first, filtered.
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionRecord>> {
        self.read(|conn| list(conn, filter))
    }

    /// One execution's steps, in order.
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn steps(&self, id: Uuid) -> Result<Vec<StepRecord>> {
        self.read(|conn| steps(conn, id))
    }

    /// One execution's audit events, in order.
    ///
    /// # Errors
    /// A storage error, or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn events(&self, id: Uuid) -> Result<Vec<EventRecord>> {
        self.read(|conn| events(conn, id))
    }

    /// Every held lock with this instance's judgement of its holder.
    ///
    /// # Errors
    /// A storage error or a damaged lock row.
    pub fn lock_holders(&self) -> Result<Vec<(LockRow, Judgement)>> {
        let rows = self.read(|conn| Ok(durably_lock::held(conn)?))?;
        Ok(judged(rows, self.inner.locker.judge()))
    }
}

/// One execution's row.
pub(crate) fn get(conn: &Connection, id: Uuid) -> Result<Option<ExecutionRecord>> {
    let columns = execution_columns(conn)?;
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {columns} FROM executions WHERE execution_id = ?1"
    ))?;
    Ok(statement
        .query_row(params![id.to_string()], ExecutionRecord::from_row)
        .optional()?)
}

/// Executions, newest first, filtered.
pub(crate) fn list(conn: &Connection, filter: &ListFilter) -> Result<Vec<ExecutionRecord>> {
    let created_since = filter.created_since.map(durably_lock::format_timestamp);
    let columns = execution_columns(conn)?;
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {columns} FROM executions
         WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR kind = ?2)
           AND (?3 IS NULL OR instr(name, ?3) > 0) AND (?4 IS NULL OR created_at >= ?4)
         ORDER BY created_at DESC, execution_id LIMIT ?5"
    ))?;
    let rows = statement.query_map(
        params![
            filter.status.map(Status::as_str),
            filter.kind,
            filter.name_contains,
            created_since,
            filter.limit.unwrap_or(LIST_LIMIT_DEFAULT),
        ],
        ExecutionRecord::from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// One execution's steps, in order.
pub(crate) fn steps(conn: &Connection, id: Uuid) -> Result<Vec<StepRecord>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {STEP_COLUMNS} FROM steps WHERE execution_id = ?1 ORDER BY seq"
    ))?;
    let rows = statement.query_map(params![id.to_string()], StepRecord::from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// One execution's audit events, in order.
pub(crate) fn events(conn: &Connection, id: Uuid) -> Result<Vec<EventRecord>> {
    let mut statement = conn.prepare_cached(&format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE execution_id = ?1 ORDER BY id"
    ))?;
    let rows = statement.query_map(params![id.to_string()], EventRecord::from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// The held locks among `rows`, each with `judge`'s judgement of its holder.
pub(crate) fn judged(rows: Vec<LockRow>, judge: &Judge) -> Vec<(LockRow, Judgement)> {
    rows.into_iter()
        .filter_map(|row| {
            let judgement = judge.judge(row.holder.as_ref()?);
            Some((row, judgement))
        })
        .collect()
}
