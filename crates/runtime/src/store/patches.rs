//! The `runtime_patches` table: the answer each execution got from `patched(id)`, so it never
//! flips (see `crate::patches`).

use durably_db::{Connection, OptionalExtension, params};
use durably_journal::Result;
use uuid::Uuid;

/// A recorded answer of `patched`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PatchAnswer {
    /// What `patched` returned.
    pub(crate) answer: bool,
    /// The execution's next step seq when it asked: a `true` answer's marker step.
    pub(crate) seq: u32,
}

/// The answer execution `execution_id` recorded for `patch_id`, if any. One primary-key seek.
pub(crate) fn patch_answer(
    conn: &Connection,
    execution_id: Uuid,
    patch_id: &str,
) -> Result<Option<PatchAnswer>> {
    Ok(conn
        .prepare_cached(
            "SELECT answer, seq FROM runtime_patches WHERE execution_id = ?1 AND patch_id = ?2",
        )?
        .query_row(params![execution_id.to_string(), patch_id], |row| {
            Ok(PatchAnswer {
                answer: row.get(0)?,
                seq: row.get(1)?,
            })
        })
        .optional()?)
}

/// Records `answer` for (`execution_id`, `patch_id`) unless an answer is recorded already, and
/// returns the one recorded: the first answer stays, so an answer never flips.
pub(crate) fn record_patch_answer(
    conn: &Connection,
    execution_id: Uuid,
    patch_id: &str,
    answer: PatchAnswer,
    at: &str,
) -> Result<PatchAnswer> {
    conn.prepare_cached(
        "INSERT INTO runtime_patches (execution_id, patch_id, answer, seq, decided_at)
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (execution_id, patch_id) DO NOTHING",
    )?
    .execute(params![
        execution_id.to_string(),
        patch_id,
        answer.answer,
        answer.seq,
        at
    ])?;
    patch_answer(conn, execution_id, patch_id)?.ok_or_else(|| {
        durably_journal::Error::Inconsistent(format!(
            "the answer of execution {execution_id} to patch {patch_id:?} is missing after it \
             was recorded"
        ))
    })
}

/// One execution's recorded answer to a patch, as [`executions_answering`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnsweredPatch {
    /// The execution.
    pub(crate) execution_id: Uuid,
    /// The seq it was asked at.
    pub(crate) seq: u32,
    /// When it was decided.
    pub(crate) decided_at: String,
}

/// The executions that answered `answer` to `patch_id` with an id after `after`, in id
/// order, at most `max`: a keyset page on `runtime_patches_by_patch` (whose entries end with
/// the primary key). The caller keeps the unfinished ones.
pub(crate) fn executions_answering(
    conn: &Connection,
    (patch_id, answer): (&str, bool),
    after: Option<Uuid>,
    max: u32,
) -> Result<Vec<AnsweredPatch>> {
    let mut statement = conn.prepare_cached(
        "SELECT execution_id, seq, decided_at FROM runtime_patches
         WHERE patch_id = ?1 AND answer = ?2 AND execution_id > ?3
         ORDER BY execution_id LIMIT +?4",
    )?;
    let after = after.map(|id| id.to_string()).unwrap_or_default();
    let rows = statement.query_map(params![patch_id, answer, after, max], |row| {
        let text: String = row.get(0)?;
        let execution_id = Uuid::parse_str(&text).map_err(|error| durably_db::Error::Column {
            index: 0,
            source: durably_db::FromSqlError::Other(Box::new(error)),
        })?;
        Ok(AnsweredPatch {
            execution_id,
            seq: row.get(1)?,
            decided_at: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<durably_db::Result<_>>()?)
}
