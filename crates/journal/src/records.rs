//! Records of what the journal holds, for inspection (`durably ls`, `show`, tests). Every
//! column is parsed once, here, at the row boundary: ids into [`Uuid`], times into
//! [`DateTime<Utc>`], closed vocabularies into their enums, payloads into [`Payload`] (or
//! [`PayloadPreview`], for listings). A value that does not parse means a damaged or foreign
//! row and is an error, never a guess.
//!
//! The payload columns come last in each column list: each is two result columns (see
//! [`PayloadColumn`]), chosen by the record's payload type.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use durably_db::{Dialect, FromSqlError, Row};
use serde::{Serialize, Serializer};
use uuid::Uuid;

use crate::error::{AmbiguityReason, Result as JournalResult};
#[cfg(doc)]
use crate::payload::PayloadPreview;
use crate::payload::{Payload, PayloadColumn};
use crate::states::{PolicyKind, Status, StepState};
use crate::step::{Effect, IdempotencyKey};

/// One row of `executions`, with its payloads whole ([`Payload`]) or as previews
/// ([`PayloadPreview`], from [`crate::Journal::previews`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutionRecord<P = Payload> {
    /// The execution id.
    pub execution_id: Uuid,
    /// What kind of work it is.
    pub kind: String,
    /// A name for people.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// The input.
    pub input: P,
    /// The output, once completed.
    pub output: Option<P>,
    /// The error, once failed or cancelled.
    pub error: Option<P>,
    /// How many times it was opened.
    pub opens: u32,
    /// When it was created.
    #[serde(serialize_with = "timestamp")]
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    #[serde(serialize_with = "timestamp")]
    pub updated_at: DateTime<Utc>,
    /// When it was finalized.
    #[serde(serialize_with = "optional_timestamp")]
    pub finalized_at: Option<DateTime<Utc>>,
    /// The runtime queue it runs in; `None` for no queue (and for hand-driven executions).
    pub queue: Option<String>,
    /// Its priority within its queue: larger runs first.
    pub priority: i64,
    /// When a queued or waiting execution becomes runnable without any other event.
    #[serde(serialize_with = "optional_timestamp")]
    pub due_at: Option<DateTime<Utc>>,
    /// The message topic a waiting execution waits for.
    pub wait_topic: Option<String>,
    /// When a cancel was requested while a live process held it.
    #[serde(serialize_with = "optional_timestamp")]
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Why the cancel was requested.
    pub cancel_reason: Option<String>,
    /// Why it is in its status: names, seqs and reasons, never payloads (at most 2 KiB).
    pub status_detail: Option<serde_json::Value>,
}

/// The schema version whose migration added the runtime's columns to `executions`.
const RUNTIME_COLUMNS_SINCE: i64 = 7;

/// Whether `executions` has the runtime's columns (schema version 7 and later). Always on
/// PostgreSQL, whose journal baseline is version 7.
///
/// # Errors
/// A storage error reading the schema version.
pub(crate) fn has_runtime_columns(conn: &durably_db::Connection) -> durably_db::Result<bool> {
    // PostgreSQL's oldest journal schema, its baseline, equals version 7.
    if conn.dialect() == Dialect::Postgres {
        return Ok(true);
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    Ok(version >= RUNTIME_COLUMNS_SINCE)
}

/// The columns [`read_execution`] reads, payloads read as `P`. A journal older than migration
/// 7 has no runtime columns, and they read as unset: only a reader meets one (a writer
/// migrates it first), and the reading commands read old journals without migrating them.
///
/// # Errors
/// A storage error reading the schema version.
pub(crate) fn execution_columns<P: PayloadColumn>(
    conn: &durably_db::Connection,
    bytes_max: usize,
) -> durably_db::Result<String> {
    let runtime = if has_runtime_columns(conn)? {
        "queue, priority, due_at, wait_topic, cancel_requested_at, cancel_reason, status_detail"
    } else {
        "NULL, 0, NULL, NULL, NULL, NULL, NULL"
    };
    Ok(format!(
        "execution_id, kind, name, status, opens, created_at, updated_at, finalized_at, \
         {runtime}, {}, {}, {}",
        P::select("input", bytes_max, conn.dialect()),
        P::select("output", bytes_max, conn.dialect()),
        P::select("error", bytes_max, conn.dialect()),
    ))
}

/// An execution from a row of [`execution_columns`].
pub(crate) fn read_execution<P: PayloadColumn>(
    row: &Row<'_>,
    bytes_max: usize,
) -> JournalResult<ExecutionRecord<P>> {
    let execution_id = uuid(row, 0)?;
    let payload = |index, column: &'static str| {
        P::read(row, index, bytes_max, || {
            format!("the stored {column} of execution {execution_id}")
        })
    };
    Ok(ExecutionRecord {
        execution_id,
        kind: row.get(1)?,
        name: row.get(2)?,
        status: word(row, 3)?,
        opens: row.get(4)?,
        created_at: time(row, 5)?,
        updated_at: time(row, 6)?,
        finalized_at: optional_time(row, 7)?,
        queue: row.get(8)?,
        priority: row.get(9)?,
        due_at: optional_time(row, 10)?,
        wait_topic: row.get(11)?,
        cancel_requested_at: optional_time(row, 12)?,
        cancel_reason: row.get(13)?,
        status_detail: row
            .get::<_, Option<String>>(14)?
            .map(|text| parse_column(14, &text, |text| serde_json::from_str(text)))
            .transpose()?,
        input: payload(15, "input")?.ok_or_else(|| {
            crate::Error::Inconsistent(format!("execution {execution_id} has no input"))
        })?,
        output: payload(17, "output")?,
        error: payload(19, "error")?,
    })
}

/// A step an operator must answer before its execution runs again: the step in the ambiguous
/// window of an execution whose status is `awaiting_operator`
/// ([`crate::Journal::awaiting_operator`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AwaitingOperatorStep {
    /// The execution.
    pub execution_id: Uuid,
    /// The step's sequence number.
    pub seq: u32,
    /// The step's name.
    pub step: String,
    /// The step's ambiguity policy.
    pub policy: PolicyKind,
    /// Why no policy decided it.
    pub reason: AmbiguityReason,
    /// Since when the execution has waited.
    #[serde(serialize_with = "timestamp")]
    pub since: DateTime<Utc>,
}

pub(crate) const AWAITING_OPERATOR_QUERY: &str =
    "SELECT e.execution_id, s.seq, s.name, s.policy, e.status_detail, e.updated_at
     FROM executions AS e
     JOIN steps AS s ON s.execution_id = e.execution_id
                    AND s.seq = CAST(e.status_detail ->> 'seq' AS INTEGER)
     WHERE e.status = 'awaiting_operator' AND s.state = 'intent'
     ORDER BY e.updated_at, e.id";

impl AwaitingOperatorStep {
    pub(crate) fn from_row(row: &Row<'_>) -> durably_db::Result<Self> {
        let detail: String = row.get(4)?;
        Ok(Self {
            execution_id: uuid(row, 0)?,
            seq: row.get(1)?,
            step: row.get(2)?,
            policy: word(row, 3)?,
            reason: parse_column(4, &detail, |text| serde_json::from_str(text))?,
            since: time(row, 5)?,
        })
    }
}

/// One row of `steps`, with its payloads whole ([`Payload`]) or as previews
/// ([`PayloadPreview`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepRecord<P = Payload> {
    /// Call order within the execution.
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// What the step does to the outside world.
    pub effect: Effect,
    /// The ambiguity policy of a guarded step.
    pub policy: Option<PolicyKind>,
    /// Where the step is in its protocol.
    pub state: StepState,
    /// The idempotency key handed to the closure.
    pub idempotency_key: IdempotencyKey,
    /// The result, once completed.
    pub result: Option<P>,
    /// The error, once failed.
    pub error: Option<P>,
    /// Times the closure was started.
    pub attempts: u32,
    /// When the intent committed (guarded steps).
    #[serde(serialize_with = "optional_timestamp")]
    pub intent_at: Option<DateTime<Utc>>,
    /// When the result committed.
    #[serde(serialize_with = "optional_timestamp")]
    pub result_at: Option<DateTime<Utc>>,
}

/// The columns [`read_step`] reads, payloads read as `P`.
pub(crate) fn step_columns<P: PayloadColumn>(bytes_max: usize, dialect: Dialect) -> String {
    format!(
        "seq, name, effect, policy, state, idempotency_key, attempts, intent_at, result_at, \
         {}, {}",
        P::select("result", bytes_max, dialect),
        P::select("error", bytes_max, dialect),
    )
}

/// A step of `execution_id`, from a row of [`step_columns`].
pub(crate) fn read_step<P: PayloadColumn>(
    row: &Row<'_>,
    execution_id: Uuid,
    bytes_max: usize,
) -> JournalResult<StepRecord<P>> {
    let seq: u32 = row.get(0)?;
    let payload = |index, column: &'static str| {
        P::read(row, index, bytes_max, || {
            format!("the stored {column} of step {seq} of execution {execution_id}")
        })
    };
    Ok(StepRecord {
        seq,
        name: row.get(1)?,
        effect: word(row, 2)?,
        policy: optional_word(row, 3)?,
        state: word(row, 4)?,
        idempotency_key: IdempotencyKey(uuid(row, 5)?),
        attempts: row.get(6)?,
        intent_at: optional_time(row, 7)?,
        result_at: optional_time(row, 8)?,
        result: payload(9, "result")?,
        error: payload(11, "error")?,
    })
}

/// One row of `events`, the audit trail, with its detail whole ([`Payload`]) or as a preview
/// ([`PayloadPreview`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRecord<P = Payload> {
    /// Order of writing.
    pub id: i64,
    /// When.
    #[serde(serialize_with = "timestamp")]
    pub at: DateTime<Utc>,
    /// The execution it concerns, if one.
    pub execution_id: Option<Uuid>,
    /// The step it concerns, if one.
    pub seq: Option<u32>,
    /// What happened: one of [`event_kind`]'s words, or a word of a crate built on the journal.
    pub kind: String,
    /// Details (JSON): ids, names and reasons, never payloads.
    pub detail: P,
}

/// The columns [`read_event`] reads, the detail read as `P`.
pub(crate) fn event_columns<P: PayloadColumn>(bytes_max: usize, dialect: Dialect) -> String {
    format!(
        "id, at, execution_id, seq, kind, {}",
        P::select("detail", bytes_max, dialect)
    )
}

/// An event from a row of [`event_columns`].
pub(crate) fn read_event<P: PayloadColumn>(
    row: &Row<'_>,
    bytes_max: usize,
) -> JournalResult<EventRecord<P>> {
    let id: i64 = row.get(0)?;
    let detail = P::read(row, 5, bytes_max, || {
        format!("the stored detail of event {id}")
    })?
    .ok_or_else(|| crate::Error::Inconsistent(format!("event {id} has no detail")))?;
    Ok(EventRecord {
        id,
        at: time(row, 1)?,
        execution_id: row
            .get::<_, Option<String>>(2)?
            .map(|text| parse_column(2, &text, Uuid::parse_str))
            .transpose()?,
        seq: row.get(3)?,
        kind: row.get(4)?,
        detail,
    })
}

/// Filters of [`crate::Journal::list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only names containing this text.
    pub name_contains: Option<String>,
    /// Only executions created at or after this time.
    pub created_since: Option<DateTime<Utc>>,
    /// Only executions of this runtime queue.
    pub queue: Option<String>,
    /// Only executions with a pending cancel request.
    pub cancel_requested: bool,
    /// At most this many (newest first). `None`: [`LIST_LIMIT_DEFAULT`].
    pub limit: Option<u32>,
}

/// How many executions [`crate::Journal::list`] returns when the filter sets no limit.
pub const LIST_LIMIT_DEFAULT: u32 = 100;

/// The audit event kinds the journal writes, as stored in `events.kind`.
pub mod event_kind {
    /// A lock was taken over from a dead holder when opening.
    pub const TAKEOVER: &str = "takeover";
    /// The orphan sweep reclaimed an execution whose process died.
    pub const ORPHAN_RECLAIMED: &str = "orphan_reclaimed";
    /// A running execution had no lock holder and was marked interrupted.
    pub const UNLOCKED_INTERRUPTED: &str = "unlocked_interrupted";
    /// An ambiguous step was skipped under the Skip policy.
    pub const AMBIGUITY_SKIPPED: &str = "ambiguity_skipped";
    /// An ambiguous step was run again under the Retry policy.
    pub const AMBIGUITY_RETRIED: &str = "ambiguity_retried";
    /// An ambiguous step was reported to the caller under the Fail policy.
    pub const AMBIGUITY_FAILED: &str = "ambiguity_failed";
    /// A reconcile probe answered for an ambiguous step.
    pub const AMBIGUITY_RECONCILED: &str = "ambiguity_reconciled";
    /// An attempt of a step failed with a retryable error.
    pub const ATTEMPT_FAILED: &str = "attempt_failed";
    /// An operator resolved an ambiguous step.
    pub const OPERATOR_RESOLVED: &str = "operator_resolved";
    /// An execution was cancelled: by an operator while nobody held it, by its deadline, or
    /// by its holder on seeing a cancel request (`finish_cancelled`).
    pub const CANCELLED: &str = "cancelled";
    /// An operator asked the live holder of a running execution to stop; the detail names the
    /// newest step row (`last_step_id`) at that commit, after which no step row is added (R5).
    pub const CANCEL_REQUESTED: &str = "cancel_requested";
    /// A running execution was parked `waiting` for a time or a message, its lock released.
    pub const PARKED: &str = "parked";
    /// A running execution was put back `queued`, its lock released.
    pub const YIELDED: &str = "yielded";
    /// A running execution was parked `stuck` for an operator's resume, its lock released.
    pub const STUCK: &str = "stuck";
    /// An execution of a queue was finalized (completed, failed, or cancelled by its holder),
    /// giving its place in the queue back: with the runtime's `claimed` event, the events
    /// recount a queue's running executions in commit order.
    pub const RELEASED: &str = "released";
}

/// Parses column `index` with `parse`; a failure is a conversion error naming the column, which
/// the journal reports as [`crate::Error::Inconsistent`].
fn parse_column<T, E>(
    index: usize,
    text: &str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> durably_db::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    parse(text).map_err(|error| durably_db::Error::Column {
        index,
        source: FromSqlError::Other(Box::new(error)),
    })
}

/// A value of column `index` that is not of the storage class asked for, as the error naming
/// the column.
fn at(index: usize) -> impl FnOnce(FromSqlError) -> durably_db::Error {
    move |source| durably_db::Error::Column { index, source }
}

/// A timestamp that is not RFC 3339.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 timestamp")]
struct BadTimestamp(String);

fn parse_time(text: &str) -> Result<DateTime<Utc>, BadTimestamp> {
    durably_lock::parse_timestamp(text).ok_or_else(|| BadTimestamp(text.to_owned()))
}

pub(crate) fn uuid(row: &Row<'_>, index: usize) -> durably_db::Result<Uuid> {
    parse_column(
        index,
        row.get_ref(index)?.as_str().map_err(at(index))?,
        Uuid::parse_str,
    )
}

pub(crate) fn word<T>(row: &Row<'_>, index: usize) -> durably_db::Result<T>
where
    T: FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    parse_column(
        index,
        row.get_ref(index)?.as_str().map_err(at(index))?,
        T::from_str,
    )
}

fn optional_word<T>(row: &Row<'_>, index: usize) -> durably_db::Result<Option<T>>
where
    T: FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    row.get_ref(index)?
        .as_str_or_null()
        .map_err(at(index))?
        .map(|text| parse_column(index, text, T::from_str))
        .transpose()
}

fn time(row: &Row<'_>, index: usize) -> durably_db::Result<DateTime<Utc>> {
    parse_column(
        index,
        row.get_ref(index)?.as_str().map_err(at(index))?,
        parse_time,
    )
}

fn optional_time(row: &Row<'_>, index: usize) -> durably_db::Result<Option<DateTime<Utc>>> {
    row.get_ref(index)?
        .as_str_or_null()
        .map_err(at(index))?
        .map(|text| parse_column(index, text, parse_time))
        .transpose()
}

/// Serializes a time in the journal's own text form (RFC 3339 UTC, milliseconds, `Z`).
fn timestamp<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&durably_lock::format_timestamp(*time))
}

// serde's `serialize_with` hands over `&Option<_>`.
#[allow(clippy::ref_option)]
fn optional_timestamp<S: Serializer>(
    time: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => timestamp(time, serializer),
        None => serializer.serialize_none(),
    }
}
