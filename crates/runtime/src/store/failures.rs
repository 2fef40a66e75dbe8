//! Resume-failure accounting in `runtime_executions`: how many runs in a row ended abnormally
//! without recording a step, and why the last one did.

use durably_db::{Connection, OptionalExtension, params};
use durably_journal::Result;
use uuid::Uuid;

/// Records why execution `execution_id`'s last run ended abnormally (for people: names,
/// seqs, messages, never payloads).
pub(crate) fn set_last_failure(
    conn: &Connection,
    execution_id: Uuid,
    failure: &serde_json::Value,
) -> Result<()> {
    conn.prepare_cached("UPDATE runtime_executions SET last_failure = ?2 WHERE execution_id = ?1")?
        .execute(params![execution_id.to_string(), failure.to_string()])?;
    Ok(())
}

/// Counts a failed run of `execution_id`, which has `steps` recorded steps now: a run that
/// recorded a step since its claim starts a new count at 1, one that did not adds 1. Returns
/// the new count and the last failure's description; `None` when the runtime did not start
/// the execution.
pub(crate) fn count_failed_run(
    conn: &Connection,
    execution_id: Uuid,
    steps: u32,
) -> Result<Option<(u32, Option<String>)>> {
    Ok(conn
        .prepare_cached(
            "UPDATE runtime_executions
             SET resume_failures = CASE WHEN ?2 > steps_at_open THEN 1
                                        ELSE resume_failures + 1 END,
                 steps_at_open = ?2
             WHERE execution_id = ?1
             RETURNING resume_failures, last_failure",
        )?
        .query_row(params![execution_id.to_string(), steps], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?)
}

/// Clears execution `execution_id`'s failure count and last failure: an operator resumed it.
pub(crate) fn reset_failures(conn: &Connection, execution_id: Uuid) -> Result<()> {
    conn.prepare_cached(
        "UPDATE runtime_executions SET resume_failures = 0, last_failure = NULL
         WHERE execution_id = ?1",
    )?
    .execute(params![execution_id.to_string()])?;
    Ok(())
}
