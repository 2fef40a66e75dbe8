//! The runtime's rows of a fork (`crate::fork`): the link in `runtime_executions`, and the
//! original's workflow events and patch answers that the copied steps recorded.

use durably_db::{Connection, params};
use durably_journal::Result;
use uuid::Uuid;

/// Inserts the runtime row of `fork`, started at `version`, copied from `original`'s steps
/// below `fork_seq`.
pub(crate) fn insert_fork_row(
    conn: &Connection,
    fork: Uuid,
    version: u32,
    (original, fork_seq): (Uuid, u32),
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO runtime_executions (execution_id, version, forked_from, fork_seq)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        fork.to_string(),
        version,
        original.to_string(),
        fork_seq
    ])?;
    Ok(())
}

/// Copies to `fork` the workflow events `original`'s steps below `before_seq` set (those whose
/// last value was set at or after it are the fork's to set again), and the patch answers it
/// recorded below `before_seq`, so the fork's copied markers answer as the original's did.
pub(crate) fn copy_fork_rows(
    conn: &Connection,
    original: Uuid,
    fork: Uuid,
    before_seq: u32,
) -> Result<()> {
    let (original, fork) = (original.to_string(), fork.to_string());
    conn.prepare_cached(
        "INSERT INTO workflow_events (execution_id, key, value, seq, set_at)
         SELECT ?2, key, value, seq, set_at FROM workflow_events
         WHERE execution_id = ?1 AND seq < ?3",
    )?
    .execute(params![original, fork, before_seq])?;
    conn.prepare_cached(
        "INSERT INTO runtime_patches (execution_id, patch_id, answer, seq, decided_at)
         SELECT ?2, patch_id, answer, seq, decided_at FROM runtime_patches
         WHERE execution_id = ?1 AND seq < ?3",
    )?
    .execute(params![original, fork, before_seq])?;
    Ok(())
}
