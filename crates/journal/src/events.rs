//! Writing audit events, always inside the transaction of the change they describe.

use durably_db::{Connection, params};

use crate::error::Result;

/// Appends one audit event. `detail` is a JSON object built by the caller from ids, names and
/// reasons, never from payloads.
pub(crate) fn record(
    conn: &Connection,
    at: &str,
    execution_id: Option<&str>,
    seq: Option<u32>,
    kind: &str,
    detail: &serde_json::Value,
) -> Result<()> {
    let mut statement = conn.prepare_cached(
        "INSERT INTO events (at, execution_id, seq, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    statement.execute(params![at, execution_id, seq, kind, detail.to_string()])?;
    Ok(())
}
