//! The SQL of step rows: every statement the step protocol writes or reads on the writer
//! thread. Each function runs inside a fenced transaction ([`super::fence::Fence`]); the audit
//! event that goes with a change is written in the same transaction as the change.

use durably_db::{Connection, OptionalExtension, params};
use serde_json::json;

use crate::error::{AmbiguityReason, Error, Result};
use crate::events;
use crate::records::event_kind;
use crate::states::{PolicyKind, Status, StepState};
use crate::step::Effect;

/// A step's outcome, ready to be written.
#[derive(Debug, Clone)]
pub(super) struct ResultRow {
    pub(super) seq: u32,
    pub(super) name: String,
    pub(super) effect: Effect,
    pub(super) key: String,
    pub(super) state: StepState,
    pub(super) result: Option<String>,
    pub(super) error: Option<String>,
    pub(super) attempts: u32,
}

impl ResultRow {
    /// A guarded step's intent row gets its result; other steps get their one row. One
    /// statement either way, so it may run without a savepoint.
    pub(super) fn record(&self, conn: &Connection, resource: &str, now: &str) -> Result<()> {
        let Self {
            seq,
            name,
            effect,
            key,
            state,
            result,
            error,
            attempts,
        } = self;
        match effect {
            Effect::Guarded => {
                let changed = conn
                    .prepare_cached(
                        "UPDATE steps SET state = ?3, result = ?4, error = ?5, attempts = ?6,
                                          result_at = ?7
                         WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
                    )?
                    .execute(params![
                        resource,
                        seq,
                        state.as_str(),
                        result,
                        error,
                        attempts,
                        now
                    ])?;
                expect_one_row(changed, resource, *seq)
            }
            Effect::Pure | Effect::Idempotent => {
                conn.prepare_cached(
                    "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key,
                                        result, error, attempts, result_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )?
                .execute(params![
                    resource,
                    seq,
                    name,
                    effect.as_str(),
                    state.as_str(),
                    key,
                    result,
                    error,
                    attempts,
                    now
                ])?;
                Ok(())
            }
        }
    }
}

/// A guarded step's intent: the row that opens the ambiguous window.
pub(super) struct IntentRow {
    pub(super) seq: u32,
    pub(super) name: String,
    pub(super) policy: PolicyKind,
    pub(super) key: String,
}

impl IntentRow {
    pub(super) fn record(&self, conn: &Connection, resource: &str, now: &str) -> Result<()> {
        conn.prepare_cached(
            "INSERT INTO steps (execution_id, seq, name, effect, policy, state,
                                idempotency_key, attempts, intent_at)
             VALUES (?1, ?2, ?3, 'guarded', ?4, 'intent', ?5, 1, ?6)",
        )?
        .execute(params![
            resource,
            self.seq,
            self.name,
            self.policy.as_str(),
            self.key,
            now
        ])?;
        Ok(())
    }
}

/// How a policy closes a step's ambiguous window without running it.
pub(super) enum Closing<'a> {
    /// Skip: the step is recorded as skipped.
    Skipped,
    /// Reconcile: the probe found the effect, and this is its result (JSON).
    Reconciled(&'a str),
}

/// Closes the ambiguous window of step `seq` as `closing` says, with its audit event.
pub(super) fn close_intent(
    conn: &Connection,
    resource: &str,
    seq: u32,
    closing: &Closing<'_>,
    now: &str,
) -> Result<()> {
    let (state, result, kind, detail) = match closing {
        Closing::Skipped => (
            StepState::Skipped,
            None,
            event_kind::AMBIGUITY_SKIPPED,
            json!({ "policy": "skip" }),
        ),
        Closing::Reconciled(result) => (
            StepState::Completed,
            Some(*result),
            event_kind::AMBIGUITY_RECONCILED,
            json!({ "policy": "reconcile", "found": true }),
        ),
    };
    let changed = conn
        .prepare_cached(
            "UPDATE steps SET state = ?3, result = ?4, result_at = ?5
             WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
        )?
        .execute(params![resource, seq, state.as_str(), result, now])?;
    expect_one_row(changed, resource, seq)?;
    events::record(conn, now, Some(resource), Some(seq), kind, &detail)
}

/// Sets a guarded step's attempt count.
pub(super) fn set_attempts(
    conn: &Connection,
    resource: &str,
    seq: u32,
    attempts: u32,
) -> Result<()> {
    conn.prepare_cached("UPDATE steps SET attempts = ?3 WHERE execution_id = ?1 AND seq = ?2")?
        .execute(params![resource, seq, attempts])?;
    Ok(())
}

/// How many times step `seq` was re-run after it was found ambiguous: by `Retry`, or by
/// `Reconcile` when the probe found nothing.
pub(super) fn count_reruns(conn: &Connection, resource: &str, seq: u32) -> Result<u32> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) FROM events WHERE execution_id = ?1 AND seq = ?2
               AND (kind = 'ambiguity_retried'
                    OR (kind = 'ambiguity_reconciled' AND CAST(detail -> 'found' AS TEXT) = 'false'))",
        )?
        .query_row(params![resource, seq], |row| row.get(0))?)
}

/// A step left in the ambiguous window for an operator, and why.
pub(super) struct Awaited<'a> {
    pub(super) seq: u32,
    pub(super) name: &'a str,
    pub(super) policy: PolicyKind,
    pub(super) reason: AmbiguityReason,
}

/// Parks the execution `awaiting_operator`, with the step and the reason in `status_detail`,
/// in the transaction of the `ambiguity_failed` event that says so. From here no open reopens
/// it (R6); the lock is released when the halted handle drops, and the operator's answer
/// (`resolve`) moves it to `interrupted`.
pub(super) fn await_operator(
    conn: &Connection,
    resource: &str,
    awaited: &Awaited<'_>,
    now: &str,
) -> Result<()> {
    let detail = match awaited.reason {
        AmbiguityReason::PolicyFail => json!({ "reason": "policy_fail" }),
        AmbiguityReason::RerunsExhausted { reruns, max } => {
            json!({ "reason": "reruns_exhausted", "reruns": reruns, "max": max })
        }
    };
    let mut detail = detail;
    if let Some(fields) = detail.as_object_mut() {
        fields.insert("seq".to_owned(), awaited.seq.into());
        fields.insert("step".to_owned(), awaited.name.into());
        fields.insert("policy".to_owned(), awaited.policy.as_str().into());
    }
    let changed = conn
        .prepare_cached(
            "UPDATE executions SET status = 'awaiting_operator', status_detail = ?2,
                                   updated_at = ?3
             WHERE execution_id = ?1 AND status = 'running'",
        )?
        .execute(params![resource, detail.to_string(), now])?;
    if changed == 1 {
        Ok(())
    } else {
        Err(Error::Inconsistent(format!(
            "execution {resource} was expected running when step {} was left to an operator",
            awaited.seq
        )))
    }
}

/// Writes the execution's final status and its output or error, and, for an execution of a
/// queue, the `released` event that gives its place back, in the same transaction.
pub(super) fn finalize_row(
    conn: &Connection,
    resource: &str,
    status: Status,
    payload: &str,
    now: &str,
) -> Result<()> {
    let sql = match status {
        Status::Completed => {
            "UPDATE executions SET status = ?2, output = ?3, updated_at = ?4, finalized_at = ?4
             WHERE execution_id = ?1 RETURNING queue"
        }
        Status::Failed | Status::Cancelled => {
            "UPDATE executions SET status = ?2, error = ?3, updated_at = ?4, finalized_at = ?4
             WHERE execution_id = ?1 RETURNING queue"
        }
        Status::Queued
        | Status::Running
        | Status::Waiting
        | Status::Interrupted
        | Status::Stuck
        | Status::AwaitingOperator => {
            return Err(Error::Inconsistent(format!(
                "execution {resource} cannot be finalized as {status}"
            )));
        }
    };
    let queue: Option<String> = conn
        .prepare_cached(sql)?
        .query_row(params![resource, status.as_str(), payload, now], |row| {
            row.get(0)
        })
        .optional()?
        .flatten();
    if let Some(queue) = queue {
        let detail = json!({ "queue": queue });
        events::record(
            conn,
            now,
            Some(resource),
            None,
            event_kind::RELEASED,
            &detail,
        )?;
    }
    Ok(())
}

/// The first step at or after `?2` that is still in the ambiguous window.
pub(super) const FIRST_OPEN_INTENT_FROM: &str =
    "SELECT seq FROM steps WHERE execution_id = ?1 AND seq >= ?2 AND state = 'intent' LIMIT 1";

/// The first step at or after `from_seq` still in the ambiguous window, if any.
///
/// Completion reads only the steps from the handle's `next_seq` on. Every step before it was
/// run or replayed by the handle to an outcome: a step that stopped in the ambiguous window
/// halts the handle, and completing a halted handle is refused before this. Nobody else wrote
/// an intent since the open, because every step write is fenced by the handle's lock. Reading
/// from `next_seq` finds what this run never reached, such as a recorded intent past a shorter
/// path through the program, with one index seek however long the execution is.
pub(crate) fn first_open_intent(
    conn: &Connection,
    resource: &str,
    from_seq: u32,
) -> Result<Option<u32>> {
    Ok(conn
        .prepare_cached(FIRST_OPEN_INTENT_FROM)?
        .query_row(params![resource, from_seq], |row| row.get(0))
        .optional()?)
}

fn expect_one_row(changed: usize, resource: &str, seq: u32) -> Result<()> {
    if changed == 1 {
        Ok(())
    } else {
        Err(Error::Inconsistent(format!(
            "step {seq} of execution {resource} was expected in the intent state"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::FIRST_OPEN_INTENT_FROM;
    use crate::inspect::query_plan;

    /// The completion check is one index seek, whatever the execution's length.
    #[test]
    fn the_completion_check_seeks_past_the_steps_this_run_resolved() {
        assert_eq!(
            query_plan(
                FIRST_OPEN_INTENT_FROM,
                durably_db::params!["an execution", 7]
            ),
            ["SEARCH steps USING INDEX steps_by_execution (execution_id=? AND seq>?)"]
        );
    }
}
