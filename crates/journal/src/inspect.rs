//! Reading what the journal holds: executions, steps, events, lock holders, and the
//! executions a program should resume. Nothing here writes. Each query is a function of a
//! connection, so that [`Journal`] and [`Inspector`] read with the same SQL.
//!
//! Every query that returns payloads reads them through [`PayloadColumn`]: a payload over the
//! reader's cap is refused (whole) or left out (previews) in SQL, before it is loaded. Steps
//! and events are read a page at a time, in key order, with one indexed range read per page,
//! so no reading call has to hold a whole long execution.

use durably_db::{Connection, Params, Row, params};
use durably_lock::{Judge, Judgement, LockRow};
use uuid::Uuid;

use crate::error::Result;
use crate::inspector::Inspector;
use crate::journal::Journal;
use crate::payload::{PayloadColumn, PayloadPreview};
use crate::records::{
    self, AwaitingOperatorStep, EventRecord, ExecutionRecord, LIST_LIMIT_DEFAULT, ListFilter,
    StepRecord,
};
use crate::states::Status;

impl Journal {
    /// The executions a program should resume at start: interrupted ones, and running ones
    /// whose lock is free or whose holder is dead. Oldest first.
    ///
    /// # Errors
    /// A storage error, [`crate::Error::PayloadTooLarge`] for a stored payload over the cap,
    /// or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn recoverable(&self) -> Result<Vec<ExecutionRecord>> {
        let bytes_max = self.payload_bytes_max();
        let candidates = self.read(|conn| {
            let sql = format!(
                "SELECT {} FROM executions
                 WHERE status IN ('running', 'interrupted') ORDER BY created_at",
                records::execution_columns::<crate::Payload>(conn, bytes_max)?
            );
            collect(conn, &sql, [], |row| {
                records::read_execution(row, bytes_max)
            })
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
            let mut statement = conn.prepare_cached(records::AWAITING_OPERATOR_QUERY)?;
            let rows = statement.query_map([], AwaitingOperatorStep::from_row)?;
            Ok(rows.collect::<durably_db::Result<Vec<_>>>()?)
        })
    }

    /// One execution's row.
    ///
    /// # Errors
    /// A storage error, [`crate::Error::PayloadTooLarge`] for a stored payload over the cap,
    /// or [`crate::Error::Inconsistent`] for a damaged row.
    pub fn get(&self, id: Uuid) -> Result<Option<ExecutionRecord>> {
        let bytes_max = self.payload_bytes_max();
        self.read(|conn| get(conn, id, bytes_max))
    }

    /// Executions, newest first, filtered.
    ///
    /// # Errors
    /// As [`Journal::get`].
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionRecord>> {
        let bytes_max = self.payload_bytes_max();
        self.read(|conn| list(conn, filter, bytes_max))
    }

    /// All of one execution's steps, in order. An execution can have any number of steps:
    /// [`Journal::steps_page`] reads them a page at a time.
    ///
    /// # Errors
    /// As [`Journal::get`].
    pub fn steps(&self, id: Uuid) -> Result<Vec<StepRecord>> {
        let bytes_max = self.payload_bytes_max();
        self.read(|conn| steps_page(conn, id, None, None, bytes_max))
    }

    /// At most `limit` of one execution's steps, in order, starting after step `after` (from
    /// the first step when `None`). The next page starts after the last step of this one.
    ///
    /// # Errors
    /// As [`Journal::get`].
    pub fn steps_page(&self, id: Uuid, after: Option<u32>, limit: u32) -> Result<Vec<StepRecord>> {
        let bytes_max = self.payload_bytes_max();
        self.read(|conn| steps_page(conn, id, after, Some(limit), bytes_max))
    }

    /// All of one execution's audit events, in order. [`Journal::events_page`] reads them a
    /// page at a time.
    ///
    /// # Errors
    /// As [`Journal::get`].
    pub fn events(&self, id: Uuid) -> Result<Vec<EventRecord>> {
        let bytes_max = self.payload_bytes_max();
        self.read(|conn| events_page(conn, id, None, None, bytes_max))
    }

    /// At most `limit` of one execution's audit events, in order, starting after the event
    /// with id `after` (from the first when `None`).
    ///
    /// # Errors
    /// As [`Journal::get`].
    pub fn events_page(
        &self,
        id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>> {
        let bytes_max = self.payload_bytes_max();
        self.read(|conn| events_page(conn, id, after, Some(limit), bytes_max))
    }

    /// The same readings with payloads as previews ([`PayloadPreview`]), for listings that
    /// show payloads to people: a payload of any size costs them at most the payload cap.
    pub fn previews(&self) -> Previews<'_> {
        Previews::of(Reader::Journal(self))
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

/// A journal's readings with payloads as [`PayloadPreview`]s: `journal.previews()` or
/// `inspector.previews()`. A payload over the reader's cap has no head and is not read at all;
/// it is never an error.
#[derive(Debug, Clone, Copy)]
pub struct Previews<'reader> {
    reader: Reader<'reader>,
}

/// Who reads for [`Previews`]: the connection and the payload cap come from it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reader<'reader> {
    Journal(&'reader Journal),
    Inspector(&'reader Inspector),
}

impl Reader<'_> {
    /// Runs `work` in one read transaction of the reader, with the reader's payload cap.
    fn read<T>(self, work: impl Fn(&Connection, usize) -> Result<T>) -> Result<T> {
        match self {
            Self::Journal(journal) => {
                let bytes_max = journal.payload_bytes_max();
                journal.read(|conn| work(conn, bytes_max))
            }
            Self::Inspector(inspector) => {
                let bytes_max = inspector.payload_bytes_max();
                inspector.read(|conn| work(conn, bytes_max))
            }
        }
    }
}

impl<'reader> Previews<'reader> {
    pub(crate) fn of(reader: Reader<'reader>) -> Self {
        Self { reader }
    }

    /// As [`Journal::get`], with previews.
    ///
    /// # Errors
    /// A storage error, [`crate::Error::Inconsistent`] for a damaged row, or what the reader's
    /// read gives ([`Inspector::read`]).
    pub fn get(&self, id: Uuid) -> Result<Option<ExecutionRecord<PayloadPreview>>> {
        self.reader.read(|conn, bytes_max| get(conn, id, bytes_max))
    }

    /// As [`Journal::list`], with previews.
    ///
    /// # Errors
    /// As [`Previews::get`].
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionRecord<PayloadPreview>>> {
        self.reader
            .read(|conn, bytes_max| list(conn, filter, bytes_max))
    }

    /// As [`Journal::steps_page`], with previews.
    ///
    /// # Errors
    /// As [`Previews::get`].
    pub fn steps_page(
        &self,
        id: Uuid,
        after: Option<u32>,
        limit: u32,
    ) -> Result<Vec<StepRecord<PayloadPreview>>> {
        self.reader
            .read(|conn, bytes_max| steps_page(conn, id, after, Some(limit), bytes_max))
    }

    /// As [`Journal::events_page`], with previews.
    ///
    /// # Errors
    /// As [`Previews::get`].
    pub fn events_page(
        &self,
        id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventRecord<PayloadPreview>>> {
        self.reader
            .read(|conn, bytes_max| events_page(conn, id, after, Some(limit), bytes_max))
    }
}

/// Execution `id`'s row, payloads read as `P`.
pub(crate) fn get<P: PayloadColumn>(
    conn: &Connection,
    id: Uuid,
    bytes_max: usize,
) -> Result<Option<ExecutionRecord<P>>> {
    let sql = format!(
        "SELECT {} FROM executions WHERE execution_id = ?1",
        records::execution_columns::<P>(conn, bytes_max)?
    );
    let mut rows = collect(conn, &sql, params![id.to_string()], |row| {
        records::read_execution(row, bytes_max)
    })?;
    Ok(rows.pop())
}

/// The executions `filter` picks, newest first, payloads read as `P`.
pub(crate) fn list<P: PayloadColumn>(
    conn: &Connection,
    filter: &ListFilter,
    bytes_max: usize,
) -> Result<Vec<ExecutionRecord<P>>> {
    // A journal older than the runtime's columns has no queue and no cancel request: its
    // rows match only when neither filter is set.
    let runtime_filters = if records::has_runtime_columns(conn)? {
        "(queue = ?6 OR ?6 IS NULL) AND (?7 = 0 OR cancel_requested_at IS NOT NULL)"
    } else {
        "CAST(?6 AS TEXT) IS NULL AND ?7 = 0"
    };
    let sql = format!(
        "SELECT {} FROM executions
         WHERE (status = ?1 OR ?1 IS NULL) AND (kind = ?2 OR ?2 IS NULL)
           AND (instr(name, ?3) > 0 OR ?3 IS NULL) AND (created_at >= ?4 OR ?4 IS NULL)
           AND {runtime_filters}
         ORDER BY created_at DESC, execution_id LIMIT ?5",
        records::execution_columns::<P>(conn, bytes_max)?
    );
    let parameters = params![
        filter.status.map(Status::as_str),
        filter.kind,
        filter.name_contains,
        filter.created_since.map(durably_lock::format_timestamp),
        filter.limit.unwrap_or(LIST_LIMIT_DEFAULT),
        filter.queue,
        filter.cancel_requested,
    ];
    collect(conn, &sql, parameters, |row| {
        records::read_execution(row, bytes_max)
    })
}

/// The rows of a page of steps: those of `?1` after seq `?2`, at most `?3`.
const STEPS_PAGE: &str = "WHERE execution_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";

/// The `LIMIT` of a page with no bound. Not SQLite's `-1`, which PostgreSQL refuses.
const NO_LIMIT: i64 = i64::MAX;

/// The rows of a page of events: those of `?1` after id `?2`, at most `?3`.
const EVENTS_PAGE: &str = "WHERE execution_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3";

/// At most `limit` steps of execution `id` after step `after` (every one when `None`), in
/// order, payloads read as `P`. One range read of `steps_by_execution`.
pub(crate) fn steps_page<P: PayloadColumn>(
    conn: &Connection,
    id: Uuid,
    after: Option<u32>,
    limit: Option<u32>,
    bytes_max: usize,
) -> Result<Vec<StepRecord<P>>> {
    let sql = format!(
        "SELECT {} FROM steps {STEPS_PAGE}",
        records::step_columns::<P>(bytes_max, conn.dialect())
    );
    let parameters = params![
        id.to_string(),
        after.map_or(-1, i64::from),
        limit.map_or(NO_LIMIT, i64::from)
    ];
    collect(conn, &sql, parameters, |row| {
        records::read_step(row, id, bytes_max)
    })
}

/// At most `limit` audit events of execution `id` after event `after` (every one when
/// `None`), in order, details read as `P`. One range read of `events_by_execution`.
pub(crate) fn events_page<P: PayloadColumn>(
    conn: &Connection,
    id: Uuid,
    after: Option<i64>,
    limit: Option<u32>,
    bytes_max: usize,
) -> Result<Vec<EventRecord<P>>> {
    let sql = format!(
        "SELECT {} FROM events {EVENTS_PAGE}",
        records::event_columns::<P>(bytes_max, conn.dialect())
    );
    let parameters = params![
        id.to_string(),
        after.unwrap_or(i64::MIN),
        limit.map_or(NO_LIMIT, i64::from)
    ];
    collect(conn, &sql, parameters, |row| {
        records::read_event(row, bytes_max)
    })
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

/// Runs the cached statement `sql` and reads every row it returns with `read`.
fn collect<T>(
    conn: &Connection,
    sql: &str,
    parameters: impl Params,
    mut read: impl FnMut(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut statement = conn.prepare_cached(sql)?;
    let mut rows = statement.query(parameters)?;
    let mut records = Vec::new();
    while let Some(row) = rows.next()? {
        records.push(read(&row)?);
    }
    Ok(records)
}

/// The query plan of `sql` with `parameters` on a new journal, one line per step: for the
/// tests that pin a query to its index.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn query_plan(sql: &str, parameters: impl Params) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let conn = crate::storage::open_writer(&path, crate::config::Durability::Full, 1_000).unwrap();
    crate::storage::migrate(&conn, &path).unwrap();
    let conn = Connection::from(conn);
    let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows = statement.query_map(parameters, |row| row.get(3)).unwrap();
    rows.collect::<durably_db::Result<_>>().unwrap()
}

#[cfg(test)]
mod tests {
    use durably_db::params;

    use super::{EVENTS_PAGE, STEPS_PAGE, query_plan};

    /// A page is one range read of an index, wherever it starts in however long an execution.
    #[test]
    fn a_page_of_steps_or_events_is_one_index_range_read() {
        for (table, page, index) in [
            (
                "steps",
                STEPS_PAGE,
                "steps_by_execution (execution_id=? AND seq>?)",
            ),
            (
                "events",
                EVENTS_PAGE,
                "events_by_execution (execution_id=? AND id>?)",
            ),
        ] {
            let sql = format!("SELECT * FROM {table} {page}");
            assert_eq!(
                query_plan(&sql, params!["an execution", 7, 100]),
                [format!("SEARCH {table} USING INDEX {index}")]
            );
        }
    }
}
