//! What runtimes register when they start: their queues' limits (`queues`) and the workflow
//! kinds they run (`workflow_kinds`).

use chrono::{DateTime, Utc};
use durably_db::{Connection, OptionalExtension, params};
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
        .prepare_cached("SELECT concurrency_max FROM queues WHERE queue = ?1")?
        .query_row(params![queue], |row| {
            Ok(StoredQueue {
                concurrency_max: row.get(0)?,
            })
        })
        .optional()?)
}

/// Whether some runtime has registered `kind` at `version`. One primary-key seek.
pub(crate) fn kind_version_known(conn: &Connection, kind: &str, version: u32) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM workflow_kinds WHERE kind = ?1 AND version = ?2")?
        .query_row(params![kind, version], |_| Ok(()))
        .optional()?
        .is_some())
}
