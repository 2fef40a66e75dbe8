//! `BEGIN IMMEDIATE` transactions on the facade's connection, for the helpers and tests that
//! drive the lock crate on a SQLite file they open themselves.

use durably_db::Connection;

/// Runs `work` in its own `BEGIN IMMEDIATE` transaction and commits it only when `work`
/// succeeded. The write lock is taken at `BEGIN`, so a contender waits there (for the busy
/// timeout) and never fails upgrading a read to a write half-way through.
///
/// # Errors
/// `BEGIN`, `work` or `COMMIT` failed; whatever `work` wrote is rolled back.
pub fn immediate<T, E: From<durably_db::Error>>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<T, E> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let done = work(conn).and_then(|value| {
        conn.execute_batch("COMMIT")?;
        Ok(value)
    });
    if done.is_err() {
        // A failed COMMIT may leave the transaction open (SQLite when busy); the caller is
        // already leaving with the error that matters.
        let _ = conn.execute_batch("ROLLBACK");
    }
    done
}
