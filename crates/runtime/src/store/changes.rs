//! The change probe: a dedicated read-only connection whose `PRAGMA data_version` changes
//! whenever another connection (in this process or another) commits to the file. Reading it
//! costs microseconds and scans no table, so polling it is how waiters learn that something
//! may have changed.

use std::path::Path;
use std::time::Duration;

use durably_journal::Result;
use rusqlite::{Connection, OpenFlags};

/// How long the probe waits for a lock before reporting the file busy.
const PROBE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the probe's connection to the journal at `path`, read-only.
pub(crate) fn open_change_probe(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(PROBE_BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA query_only = ON")?;
    Ok(conn)
}

/// The connection's `data_version`: it differs from the last value read on the same
/// connection exactly when another connection committed in between.
pub(crate) fn data_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA data_version", [], |row| row.get(0))?)
}
