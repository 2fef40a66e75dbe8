//! Reads of the runtime's tables (`schema/runtime/`) for `ls` and `show`, on an
//! [`Inspector`]'s read-only connection. A journal no runtime has used has none of them, and
//! every read here then finds nothing: the reading commands show no runtime section rather
//! than fail. Payloads are read as previews in SQL, the way the journal reads its own: a
//! payload over the reader's cap is not read at all.

use durably::db::{Connection, Dialect, OptionalExtension, Row, params};
use durably::{Inspector, PayloadPreview};
use uuid::Uuid;

use crate::error::Result;

/// The runtime's row of one execution (`runtime_executions`).
#[derive(Debug)]
pub struct RuntimeRow {
    /// The version of its kind it was started with.
    pub version: i64,
    /// When it is cancelled with reason `timeout`.
    pub deadline_at: Option<String>,
    /// Its deduplication key.
    pub dedup_key: Option<String>,
    /// Runs in a row that ended abnormally without recording a step.
    pub resume_failures: i64,
    /// Why the last such run ended (JSON: names, seqs, messages).
    pub last_failure: Option<String>,
    /// The execution it was forked from, and the seq before which it copied its steps.
    pub forked_from: Option<(String, i64)>,
    /// Its forks (at most [`FORKS_SHOWN_MAX`]), each with the seq it copied before.
    pub forks: Vec<(String, i64)>,
}

/// The most forks of one execution `show` lists.
pub const FORKS_SHOWN_MAX: u32 = 20;

/// One message sent to an execution.
#[derive(Debug)]
pub struct MessageRow {
    /// Its id: arrival order.
    pub id: i64,
    /// Its topic.
    pub topic: String,
    /// When it was sent.
    pub sent_at: String,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
    /// The recv step that consumed it; `None` while pending.
    pub consumed_seq: Option<i64>,
    /// When it was consumed.
    pub consumed_at: Option<String>,
    /// Its payload, as a preview.
    pub payload: PayloadPreview,
}

/// One workflow event: the value an execution last set under a key.
#[derive(Debug)]
pub struct WorkflowEventRow {
    /// The key.
    pub key: String,
    /// The step that set it.
    pub seq: i64,
    /// When it was set.
    pub set_at: String,
    /// The value, as a preview.
    pub value: PayloadPreview,
}

/// What `show` reads of the runtime for one execution: pages of its messages and events,
/// newest first, with their counts.
#[derive(Debug, Default)]
pub struct RuntimeReading {
    /// Its runtime row; `None` for an execution the runtime did not start.
    pub row: Option<RuntimeRow>,
    /// Its place in its queue's claim order, when it is claimable.
    pub position: Option<u64>,
    /// A page of its messages, newest first, with one more row when a next page follows.
    pub messages: Vec<MessageRow>,
    /// All of its messages.
    pub messages_count: i64,
    /// Those not consumed yet.
    pub messages_pending: i64,
    /// A page of its workflow events, newest first, with one more row when a next page
    /// follows.
    pub events: Vec<WorkflowEventRow>,
    /// All of its workflow events.
    pub events_count: i64,
}

/// Where a page of `show` starts, and how long it is.
#[derive(Debug, Clone, Copy)]
pub struct Pages {
    /// Rows per page, plus one to see whether a next page follows.
    pub rows: u32,
    /// Messages with an id below this one; `None`: from the newest.
    pub messages_before: Option<i64>,
    /// Workflow events set by a step before this seq; `None`: from the newest.
    pub events_before: Option<u32>,
}

/// Whether the runtime has made its tables in this journal.
///
/// # Errors
/// A storage error.
pub fn runtime_present(conn: &Connection) -> durably::Result<bool> {
    crate::catalog::table_present(conn, "runtime_executions")
}

/// The place of each claimable execution among `ids` in its queue (1: claimed next).
///
/// # Errors
/// A storage error.
pub fn positions(inspector: &Inspector, ids: &[Uuid]) -> Result<Vec<(Uuid, u64)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(inspector.read(|conn| durably::sqlite::queue_positions(conn, ids))?)
}

/// What `show` prints of the runtime for execution `id`: nothing on a journal without the
/// runtime's tables.
///
/// # Errors
/// A storage error, or a read over the read timeout.
pub fn read(inspector: &Inspector, id: Uuid, queued: bool, pages: Pages) -> Result<RuntimeReading> {
    let bytes_max = i64::try_from(inspector.payload_bytes_max()).unwrap_or(i64::MAX);
    Ok(inspector.read(|conn| {
        if !runtime_present(conn)? {
            return Ok(RuntimeReading::default());
        }
        let resource = id.to_string();
        let (messages_count, messages_pending) = conn
            .prepare_cached(
                "SELECT count(*), count(*) FILTER (WHERE consumed_seq IS NULL)
                 FROM messages WHERE execution_id = ?1",
            )?
            .query_row(params![resource], |row| Ok((row.get(0)?, row.get(1)?)))?;
        let events_count = conn
            .prepare_cached("SELECT count(*) FROM workflow_events WHERE execution_id = ?1")?
            .query_row(params![resource], |row| row.get(0))?;
        let position = if queued {
            durably::sqlite::queue_positions(conn, &[id])?
                .first()
                .map(|(_, position)| *position)
        } else {
            None
        };
        Ok(RuntimeReading {
            row: runtime_row(conn, &resource)?,
            position,
            messages: messages_page(conn, &resource, pages, bytes_max)?,
            messages_count,
            messages_pending,
            events: events_page(conn, &resource, pages, bytes_max)?,
            events_count,
        })
    })?)
}

fn runtime_row(conn: &Connection, resource: &str) -> durably::Result<Option<RuntimeRow>> {
    let row = conn
        .prepare_cached(
            "SELECT version, deadline_at, dedup_key, resume_failures, last_failure
             FROM runtime_executions WHERE execution_id = ?1",
        )?
        .query_row(params![resource], |row| {
            Ok(RuntimeRow {
                version: row.get(0)?,
                deadline_at: row.get(1)?,
                dedup_key: row.get(2)?,
                resume_failures: row.get(3)?,
                last_failure: row.get(4)?,
                forked_from: None,
                forks: Vec::new(),
            })
        })
        .optional()?;
    let Some(mut row) = row else {
        return Ok(None);
    };
    if runtime_column_present(conn, "forked_from")? {
        row.forked_from = conn
            .prepare_cached(
                "SELECT forked_from, fork_seq FROM runtime_executions
                 WHERE execution_id = ?1 AND forked_from IS NOT NULL",
            )?
            .query_row(params![resource], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let mut statement = conn.prepare_cached(
            "SELECT execution_id, fork_seq FROM runtime_executions
             WHERE forked_from = ?1 ORDER BY execution_id LIMIT ?2",
        )?;
        let forks = statement.query_map(params![resource, FORKS_SHOWN_MAX], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        row.forks = forks.collect::<Result<_, _>>()?;
    }
    Ok(Some(row))
}

/// Whether `runtime_executions` has `column`: a journal a runtime of an older build used lacks
/// the columns of later runtime migrations (the parent link of 2, the fork link of 3), and a
/// journal no runtime used lacks the table. On PostgreSQL, whose runtime baseline has every
/// column, only the table can be missing.
pub(crate) fn runtime_column_present(conn: &Connection, column: &str) -> durably::Result<bool> {
    if conn.dialect() == Dialect::Postgres {
        return crate::catalog::table_present(conn, "runtime_executions");
    }
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('runtime_executions') WHERE name = ?1)",
        [column],
        |row| row.get(0),
    )?)
}

/// SQL reading payload `column` as a preview: its head when it is at most `?2` bytes, and its
/// size.
fn preview_columns(conn: &Connection, column: &str) -> String {
    PayloadPreview::select_sql(column, "?2", conn.dialect())
}

fn preview(row: &Row<'_>, index: usize) -> durably::db::Result<PayloadPreview> {
    Ok(PayloadPreview {
        head: row.get(index)?,
        bytes: u64::try_from(row.get::<_, i64>(index + 1)?).unwrap_or(0),
    })
}

/// Messages of `resource`, newest first; served by `messages_by_execution`.
fn messages_page(
    conn: &Connection,
    resource: &str,
    pages: Pages,
    bytes_max: i64,
) -> durably::Result<Vec<MessageRow>> {
    let sql = format!(
        "SELECT id, topic, sent_at, idempotency_key, consumed_seq, consumed_at, {}
         FROM messages WHERE execution_id = ?1 AND (id < ?3 OR ?3 IS NULL)
         ORDER BY id DESC LIMIT ?4",
        preview_columns(conn, "payload")
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(
        params![resource, bytes_max, pages.messages_before, pages.rows],
        |row| {
            Ok(MessageRow {
                id: row.get(0)?,
                topic: row.get(1)?,
                sent_at: row.get(2)?,
                idempotency_key: row.get(3)?,
                consumed_seq: row.get(4)?,
                consumed_at: row.get(5)?,
                payload: preview(row, 6)?,
            })
        },
    )?;
    Ok(rows.collect::<durably::db::Result<_>>()?)
}

/// Workflow events of `resource`, newest (highest step) first. Each step sets at most one
/// key, so the seq orders them and marks a page's end.
fn events_page(
    conn: &Connection,
    resource: &str,
    pages: Pages,
    bytes_max: i64,
) -> durably::Result<Vec<WorkflowEventRow>> {
    let sql = format!(
        "SELECT key, seq, set_at, {}
         FROM workflow_events WHERE execution_id = ?1 AND (seq < ?3 OR ?3 IS NULL)
         ORDER BY seq DESC LIMIT ?4",
        preview_columns(conn, "value")
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(
        params![resource, bytes_max, pages.events_before, pages.rows],
        |row| {
            Ok(WorkflowEventRow {
                key: row.get(0)?,
                seq: row.get(1)?,
                set_at: row.get(2)?,
                value: preview(row, 3)?,
            })
        },
    )?;
    Ok(rows.collect::<durably::db::Result<_>>()?)
}
