//! Claim candidates among the (kind, version) pairs a process serves.
//!
//! This is the one statement of the runtime that reads the journal's `executions` table (its
//! status, queue, priority and order), joined to `runtime_executions` for the version: the
//! journal does not know versions, and the filter must be in the query, so that however many
//! executions of versions this process does not serve wait ahead, the ones it serves are
//! found. It only reads; every change of an execution's status stays the journal's.

use durably_db::{Connection, Dialect};
use durably_journal::Result;
use uuid::Uuid;

/// A claim candidate: the execution, its kind and the version it was started with.
pub(crate) type Candidate = (Uuid, String, u32);

/// The SQL of [`claim_candidates`] for no queue or one (`?1`), over `pairs` served pairs
/// (`?3`, `?4` the first kind and version, and so on). It walks `executions_claimable` in
/// claim order and seeks each entry's `runtime_executions` row. `LIMIT +?2`, and the pairs as
/// a list of parameters: see the journal's `claimable_sql` for why neither is bound
/// otherwise.
///
/// With `lock` (a claim on PostgreSQL) the candidates are locked `FOR UPDATE OF e SKIP
/// LOCKED`: claimers on other hosts pass over the rows one is claiming instead of waiting for
/// its commit and then finding them `running`. SQLite's single writer needs no lock, and a
/// read-only look ([`has_candidate`]) takes none.
fn claim_candidates_sql(in_queue: bool, pairs: usize, lock: bool) -> String {
    let queue = if in_queue {
        "e.queue = ?1"
    } else {
        "e.queue IS NULL AND CAST(?1 AS TEXT) IS NULL"
    };
    let pairs: Vec<String> = (0..pairs)
        .map(|at| format!("(?{}, CAST(?{} AS INTEGER))", 2 * at + 3, 2 * at + 4))
        .collect();
    format!(
        "SELECT e.execution_id, e.kind, r.version
         FROM executions AS e INDEXED BY executions_claimable
         JOIN runtime_executions AS r ON r.execution_id = e.execution_id
         WHERE e.status = 'queued' AND e.due_at IS NULL AND {queue}
           AND (e.kind, r.version) IN (VALUES {})
         ORDER BY e.priority DESC, e.id LIMIT +?2{}",
        pairs.join(", "),
        if lock {
            " FOR UPDATE OF e SKIP LOCKED"
        } else {
            ""
        }
    )
}

/// Claim candidates of `queue` (`None`: executions with no queue) started with one of the
/// (kind, version) pairs of `served`: `queued`, not waiting for a time, highest priority first
/// and first come, first served within a priority. At most `max`. Executions of other kinds
/// or versions are passed over in the query (each costs the read of its rows), so none of
/// them, however many, hides a candidate. An empty `served` finds nothing. On PostgreSQL the
/// candidates are locked until the claiming transaction ends, and rows another host's claim
/// holds are passed over.
///
/// # Errors
/// A storage error, or [`durably_journal::Error::Inconsistent`] for a damaged id.
pub(crate) fn claim_candidates(
    conn: &Connection,
    queue: Option<&str>,
    served: &[(&str, u32)],
    max: u32,
) -> Result<Vec<Candidate>> {
    candidates(
        conn,
        queue,
        served,
        max,
        conn.dialect() == Dialect::Postgres,
    )
}

/// Whether `queue` has a claim candidate among `served`, as [`claim_candidates`] finds them,
/// read without locking: for a read-only transaction.
///
/// # Errors
/// As [`claim_candidates`].
pub(crate) fn has_candidate(
    conn: &Connection,
    queue: Option<&str>,
    served: &[(&str, u32)],
) -> Result<bool> {
    Ok(!candidates(conn, queue, served, 1, false)?.is_empty())
}

fn candidates(
    conn: &Connection,
    queue: Option<&str>,
    served: &[(&str, u32)],
    max: u32,
    lock: bool,
) -> Result<Vec<Candidate>> {
    if served.is_empty() {
        return Ok(Vec::new());
    }
    let sql = claim_candidates_sql(queue.is_some(), served.len(), lock);
    let mut statement = conn.prepare_cached(&sql)?;
    let mut parameters: Vec<&dyn durably_db::ToSql> = vec![&queue, &max];
    for (kind, version) in served {
        parameters.push(kind);
        parameters.push(version);
    }
    let rows = statement.query_map(parameters.as_slice(), |row| {
        Ok((row.get::<_, String>(0)?, row.get(1)?, row.get(2)?))
    })?;
    let mut candidates = Vec::new();
    for row in rows {
        let (id, kind, version) = row?;
        let id = Uuid::parse_str(&id).map_err(|error| {
            durably_journal::Error::Inconsistent(format!(
                "executions holds {id:?} as an execution id: {error}"
            ))
        })?;
        candidates.push((id, kind, version));
    }
    Ok(candidates)
}

/// Among the first `scan_max` queued executions (in the claimable index's order, any queue) of
/// the kinds of `served`, how many were started with each version `served` does not list, as
/// (kind, version, count) by kind and version: executions left queued for a process serving
/// their version.
///
/// # Errors
/// A storage error.
pub(crate) fn queued_other_versions(
    conn: &Connection,
    served: &[(&str, u32)],
    scan_max: u32,
) -> Result<Vec<(String, u32, usize)>> {
    if served.is_empty() {
        return Ok(Vec::new());
    }
    let pairs: Vec<String> = (0..served.len())
        .map(|at| format!("(?{}, CAST(?{} AS INTEGER))", 2 * at + 2, 2 * at + 3))
        .collect();
    let sql = format!(
        "SELECT kind, version, count(*) FROM (
             SELECT e.kind, r.version FROM executions AS e INDEXED BY executions_claimable
             JOIN runtime_executions AS r ON r.execution_id = e.execution_id
             WHERE e.status = 'queued' AND e.due_at IS NULL
               AND e.kind IN (SELECT column1 FROM (VALUES {pairs}) AS served)
             LIMIT +?1) AS scanned
         WHERE (kind, version) NOT IN (VALUES {pairs})
         GROUP BY kind, version ORDER BY kind, version",
        pairs = pairs.join(", ")
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let mut parameters: Vec<&dyn durably_db::ToSql> = vec![&scan_max];
    for (kind, version) in served {
        parameters.push(kind);
        parameters.push(version);
    }
    let rows = statement.query_map(parameters.as_slice(), |row| {
        let count: i64 = row.get(2)?;
        Ok((
            row.get(0)?,
            row.get(1)?,
            usize::try_from(count).unwrap_or(0),
        ))
    })?;
    Ok(rows.collect::<durably_db::Result<_>>()?)
}
