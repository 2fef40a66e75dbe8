//! The `messages` table: what `send` inserts and `recv` steps consume.

use durably_db::{Connection, Dialect, OptionalExtension, Sql, params};
use durably_journal::Result;
use uuid::Uuid;

/// A stored message: one sent with an idempotency key, or one waiting for a `recv`.
pub(crate) struct StoredMessage {
    /// Its id (arrival order).
    pub(crate) message_id: i64,
    /// Its payload, as stored JSON.
    pub(crate) payload: String,
}

impl StoredMessage {
    fn from_row(row: &durably_db::Row<'_>) -> durably_db::Result<Self> {
        Ok(Self {
            message_id: row.get(0)?,
            payload: row.get(1)?,
        })
    }
}

/// The message sent to `execution_id` with idempotency key `key`, if any. One seek on
/// `messages_by_key`.
pub(crate) fn message_by_key(
    conn: &Connection,
    execution_id: Uuid,
    key: &str,
) -> Result<Option<StoredMessage>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, payload FROM messages WHERE execution_id = ?1 AND idempotency_key = ?2",
        )?
        .query_row(
            params![execution_id.to_string(), key],
            StoredMessage::from_row,
        )
        .optional()?)
}

/// Serializes, on PostgreSQL, the transactions that deliver to execution `execution_id` and
/// the one that parks it on a receive, until the caller's transaction ends: a transaction-level
/// advisory lock on (this schema's messages, the receiver). Without it, at `READ COMMITTED`, a
/// park could look for a message before a send commits while the send's wake-up (an `UPDATE`
/// of a `waiting` row) still saw the receiver `running`: the message would be stored and the
/// receiver parked on its topic with nobody left to wake it. With it, whichever commits second
/// sees the first: a send after a park wakes the parked row, a park after a send declines.
/// Taken after any row lock the caller holds on the receiver, never before one: a send takes
/// it only for a receiver that has not ended, and a park only under its own row's lock. Keys
/// are 32-bit hashes in the two-key space, apart from the instances' 64-bit keys; two
/// receivers sharing one only wait for each other. SQLite's single writer serializes them
/// already.
///
/// # Errors
/// A storage error.
pub(crate) fn lock_receiver(conn: &Connection, execution_id: Uuid) -> Result<()> {
    if conn.dialect() == Dialect::Postgres {
        conn.prepare_cached(
            "SELECT 1 FROM pg_advisory_xact_lock(
                 hashtext('durably messages ' || current_schema()), hashtext(?1))",
        )?
        .query_row(params![execution_id.to_string()], |_| Ok(()))?;
    }
    Ok(())
}

/// The insert of a message. On PostgreSQL a repeated key inserts nothing and returns no row:
/// a send of the same key on another host may commit between [`message_by_key`] and the
/// insert, and a unique violation would abort the whole transaction. SQLite's single writer
/// makes the look and the insert atomic.
const INSERT_MESSAGE: Sql = Sql {
    sqlite: "INSERT INTO messages (execution_id, topic, payload, idempotency_key, sent_at)
             VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
    postgres: "INSERT INTO messages (execution_id, topic, payload, idempotency_key, sent_at)
               VALUES (?1, ?2, ?3, ?4, ?5)
               ON CONFLICT (execution_id, idempotency_key) WHERE idempotency_key IS NOT NULL
               DO NOTHING RETURNING id",
};

/// Inserts a pending message and returns its id; `None` when a message with idempotency key
/// `key` was sent to `execution_id` in the meantime (then [`message_by_key`] reads it).
pub(crate) fn insert_message(
    conn: &Connection,
    execution_id: Uuid,
    topic: &str,
    payload: &str,
    key: Option<&str>,
    sent_at: &str,
) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(conn.pick(&INSERT_MESSAGE))?
        .query_row(
            params![execution_id.to_string(), topic, payload, key, sent_at],
            |row| row.get(0),
        )
        .optional()?)
}

/// The first message on `topic` sent to `execution_id` that no recv step has consumed: one
/// seek on `messages_pending`, whose order is arrival order (FIFO per topic).
pub(crate) fn first_pending_message(
    conn: &Connection,
    execution_id: Uuid,
    topic: &str,
) -> Result<Option<StoredMessage>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, payload FROM messages
             WHERE execution_id = ?1 AND topic = ?2 AND consumed_seq IS NULL
             ORDER BY id LIMIT 1",
        )?
        .query_row(
            params![execution_id.to_string(), topic],
            StoredMessage::from_row,
        )
        .optional()?)
}

/// Marks message `message_id` consumed by step `seq` at `at`, if no step has consumed it yet.
/// Returns whether it did.
pub(crate) fn consume_message(
    conn: &Connection,
    message_id: i64,
    seq: u32,
    at: &str,
) -> Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE messages SET consumed_seq = ?2, consumed_at = ?3
             WHERE id = ?1 AND consumed_seq IS NULL",
        )?
        .execute(params![message_id, seq, at])?;
    Ok(changed == 1)
}
