//! The parent link of child executions (`runtime_executions.parent_execution_id`,
//! `parent_seq`; migration 0002): set in the transaction of the parent's step that starts the
//! child, read when a child ends (to tell its parent) and when a parent is cancelled (to
//! cancel its children).

use durably_db::{Connection, OptionalExtension, params};
use durably_journal::Result;
use uuid::Uuid;

/// Links child `child` to step `seq` of `parent`. The child's runtime row exists (it was
/// inserted in this transaction).
pub(crate) fn set_parent(conn: &Connection, child: Uuid, parent: Uuid, seq: u32) -> Result<()> {
    conn.prepare_cached(
        "UPDATE runtime_executions SET parent_execution_id = ?2, parent_seq = ?3
         WHERE execution_id = ?1",
    )?
    .execute(params![child.to_string(), parent.to_string(), seq])?;
    Ok(())
}

/// The parent of execution `child` and the parent's step that started it; `None` for an
/// execution that is nobody's child. One primary-key seek.
pub(crate) fn parent_of(conn: &Connection, child: Uuid) -> Result<Option<(Uuid, u32)>> {
    let found: Option<(Option<String>, Option<u32>)> = conn
        .prepare_cached(
            "SELECT parent_execution_id, parent_seq FROM runtime_executions
             WHERE execution_id = ?1",
        )?
        .query_row(params![child.to_string()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    match found {
        Some((Some(parent), Some(seq))) => Ok(Some((parsed(&parent)?, seq))),
        _ => Ok(None),
    }
}

/// The children of execution `parent`, in the order its steps started them. A range read of
/// `runtime_children_by_parent`.
pub(crate) fn children_of(conn: &Connection, parent: Uuid) -> Result<Vec<Uuid>> {
    let mut statement = conn.prepare_cached(
        "SELECT execution_id FROM runtime_executions
         WHERE parent_execution_id = ?1 ORDER BY parent_seq",
    )?;
    let rows = statement.query_map(params![parent.to_string()], |row| row.get::<_, String>(0))?;
    rows.map(|text| parsed(&text?)).collect()
}

/// The children of execution `parent` started by its steps below `before_seq`, as (the start
/// step's seq, the child), in seq order. A range read of `runtime_children_by_parent`.
pub(crate) fn children_below(
    conn: &Connection,
    parent: Uuid,
    before_seq: u32,
) -> Result<Vec<(u32, Uuid)>> {
    let mut statement = conn.prepare_cached(
        "SELECT parent_seq, execution_id FROM runtime_executions
         WHERE parent_execution_id = ?1 AND parent_seq < ?2 ORDER BY parent_seq",
    )?;
    let rows = statement.query_map(params![parent.to_string(), before_seq], |row| {
        Ok((row.get::<_, u32>(0)?, row.get::<_, String>(1)?))
    })?;
    rows.map(|row| {
        let (seq, child) = row?;
        Ok((seq, parsed(&child)?))
    })
    .collect()
}

/// Whether a step of `parent` below `before_seq` consumed the end message of `child` (the
/// message keyed by the child's id). One seek of `messages_by_key`.
pub(crate) fn end_consumed_below(
    conn: &Connection,
    parent: Uuid,
    child: Uuid,
    before_seq: u32,
) -> Result<bool> {
    let found = conn
        .prepare_cached(
            "SELECT 1 FROM messages
             WHERE execution_id = ?1 AND idempotency_key = ?2 AND consumed_seq < ?3",
        )?
        .query_row(
            params![parent.to_string(), child.to_string(), before_seq],
            |_| Ok(()),
        )
        .optional()?;
    Ok(found.is_some())
}

fn parsed(text: &str) -> Result<Uuid> {
    Uuid::parse_str(text).map_err(|error| {
        durably_journal::Error::Inconsistent(format!(
            "runtime_executions holds {text:?} as an execution id: {error}"
        ))
    })
}
