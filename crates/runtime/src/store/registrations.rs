//! What runtimes register when they start: their queues' limits (`queues`) and the workflow
//! kinds they run (`workflow_kinds`).

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, Sql, params};
use durably_journal::Result;
use durably_lock::format_timestamp;

/// Records that `kind` at `version` is registered by a runtime, as of `at`.
pub(crate) fn upsert_kind(
    conn: &Connection,
    kind: &str,
    version: u32,
    at: DateTime<Utc>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO workflow_kinds (kind, version, first_registered_at, last_registered_at)
         VALUES (?1, ?2, ?3, ?3)
         ON CONFLICT (kind, version) DO UPDATE SET last_registered_at = excluded.last_registered_at",
    )?
    .execute(params![kind, version, format_timestamp(at)])?;
    Ok(())
}

/// The highest version of `kind` any runtime has registered; `None` for an unknown kind. One
/// seek on the primary key.
pub(crate) fn latest_kind_version(conn: &Connection, kind: &str) -> Result<Option<u32>> {
    Ok(conn
        .prepare_cached("SELECT max(version) FROM workflow_kinds WHERE kind = ?1")?
        .query_row(params![kind], |row| row.get(0))?)
}

/// A row of `queues`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredQueue {
    /// The limit across all processes; `None` for no limit.
    pub(crate) concurrency_max: Option<u32>,
}

/// Sets `queue`'s limit across all processes; returns the row it replaced, `None` for a new
/// queue.
pub(crate) fn upsert_queue(
    conn: &Connection,
    queue: &str,
    concurrency_max: Option<u32>,
    at: DateTime<Utc>,
) -> Result<Option<StoredQueue>> {
    let previous = stored_queue(conn, queue)?;
    if previous != Some(StoredQueue { concurrency_max }) {
        conn.prepare_cached(
            "INSERT INTO queues (queue, concurrency_max, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (queue) DO UPDATE SET concurrency_max = excluded.concurrency_max,
                                               updated_at = excluded.updated_at",
        )?
        .execute(params![queue, concurrency_max, format_timestamp(at)])?;
    }
    Ok(previous)
}

/// `queue`'s row; `None` when no runtime configured the queue. One primary-key seek.
pub(crate) fn stored_queue(conn: &Connection, queue: &str) -> Result<Option<StoredQueue>> {
    Ok(conn
        .prepare_cached(QUEUE_LIMIT.sqlite)?
        .query_row(params![queue], |row| {
            Ok(StoredQueue {
                concurrency_max: row.get(0)?,
            })
        })
        .optional()?)
}

/// The read of a queue's limit: [`stored_queue`]'s on SQLite, whose single writer serializes
/// every claim; on PostgreSQL only a limited queue's row, locked `FOR UPDATE`.
const QUEUE_LIMIT: Sql = Sql {
    sqlite: "SELECT concurrency_max FROM queues WHERE queue = ?1",
    postgres: "SELECT concurrency_max FROM queues
               WHERE queue = ?1 AND concurrency_max IS NOT NULL FOR UPDATE",
};

/// `queue`'s limit across all processes (`None`: no limit, or no such queue), its row locked
/// until the transaction ends on PostgreSQL: the claimers of a limited queue on every host
/// then take turns, each counting the queue's running executions after the previous one
/// committed its claims, so together they never exceed the limit. An unlimited queue's row is
/// not locked, so its claimers do not wait for each other. On SQLite the writer already
/// serializes every claim.
pub(crate) fn lock_queue(conn: &Connection, queue: &str) -> Result<Option<u32>> {
    let limit: Option<Option<u32>> = conn
        .prepare_cached(conn.pick(&QUEUE_LIMIT))?
        .query_row(params![queue], |row| row.get(0))
        .optional()?;
    Ok(limit.flatten())
}

/// Whether some runtime has registered `kind` at `version`. One primary-key seek.
pub(crate) fn kind_version_known(conn: &Connection, kind: &str, version: u32) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM workflow_kinds WHERE kind = ?1 AND version = ?2")?
        .query_row(params![kind, version], |_| Ok(()))
        .optional()?
        .is_some())
}
