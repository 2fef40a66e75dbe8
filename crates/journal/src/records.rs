//! Plain records of what the journal holds, for inspection (`durably ls`, `show`, tests).

use rusqlite::Row;
use serde::Serialize;

/// The status of an execution, as stored in `executions.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Being driven, or abandoned by a process that has not been judged dead yet.
    Running,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled by an operator; never reopens.
    Cancelled,
    /// Its process died; found by the crash-orphan sweep. Resumable.
    Interrupted,
}

impl Status {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }

    /// Parses a stored word.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            "interrupted" => Self::Interrupted,
            _ => return None,
        })
    }

    /// Whether the execution has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `executions`. Payloads are JSON text, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutionRecord {
    /// The execution id (a UUID).
    pub execution_id: String,
    /// What kind of work it is.
    pub kind: String,
    /// A name for people.
    pub name: String,
    /// Its status word.
    pub status: String,
    /// The input (JSON).
    pub input: String,
    /// The output (JSON), once completed.
    pub output: Option<String>,
    /// The error (JSON), once failed or cancelled.
    pub error: Option<String>,
    /// How many times it was opened.
    pub opens: i64,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was finalized.
    pub finalized_at: Option<String>,
}

pub(crate) const EXECUTION_COLUMNS: &str = "execution_id, kind, name, status, input, output, \
                                            error, opens, created_at, updated_at, finalized_at";

impl ExecutionRecord {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            execution_id: row.get(0)?,
            kind: row.get(1)?,
            name: row.get(2)?,
            status: row.get(3)?,
            input: row.get(4)?,
            output: row.get(5)?,
            error: row.get(6)?,
            opens: row.get(7)?,
            created_at: row.get(8)?,
            updated_at: row.get(9)?,
            finalized_at: row.get(10)?,
        })
    }
}

/// One row of `steps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepRecord {
    /// Call order within the execution.
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// `pure`, `idempotent` or `guarded`.
    pub effect: String,
    /// The ambiguity policy of a guarded step.
    pub policy: Option<String>,
    /// `intent`, `completed`, `failed` or `skipped`.
    pub state: String,
    /// The idempotency key handed to the closure.
    pub idempotency_key: String,
    /// The result (JSON), once completed.
    pub result: Option<String>,
    /// The error (JSON), once failed.
    pub error: Option<String>,
    /// Times the closure was started.
    pub attempts: i64,
    /// When the intent committed (guarded steps).
    pub intent_at: Option<String>,
    /// When the result committed.
    pub result_at: Option<String>,
}

pub(crate) const STEP_COLUMNS: &str = "seq, name, effect, policy, state, idempotency_key, result, \
                                       error, attempts, intent_at, result_at";

impl StepRecord {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: row.get(0)?,
            name: row.get(1)?,
            effect: row.get(2)?,
            policy: row.get(3)?,
            state: row.get(4)?,
            idempotency_key: row.get(5)?,
            result: row.get(6)?,
            error: row.get(7)?,
            attempts: row.get(8)?,
            intent_at: row.get(9)?,
            result_at: row.get(10)?,
        })
    }
}

/// One row of `events`, the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    /// Order of writing.
    pub id: i64,
    /// When.
    pub at: String,
    /// The execution it concerns, if one.
    pub execution_id: Option<String>,
    /// The step it concerns, if one.
    pub seq: Option<i64>,
    /// What happened (`takeover`, `ambiguity_skipped`, `operator_resolved`, ...).
    pub kind: String,
    /// Details (JSON).
    pub detail: String,
}

pub(crate) const EVENT_COLUMNS: &str = "id, at, execution_id, seq, kind, detail";

impl EventRecord {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            at: row.get(1)?,
            execution_id: row.get(2)?,
            seq: row.get(3)?,
            kind: row.get(4)?,
            detail: row.get(5)?,
        })
    }
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
    /// Only executions created at or after this time (RFC 3339 UTC).
    pub created_since: Option<String>,
    /// At most this many (newest first). `None`: 100.
    pub limit: Option<u32>,
}

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
    /// An operator cancelled an execution.
    pub const CANCELLED: &str = "cancelled";
}
