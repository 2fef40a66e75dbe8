//! The `locks` table: reading rows and the compare-and-swap writes. Every function runs on the
//! caller's connection, inside the caller's transaction, so a lock change commits atomically
//! with the caller's own rows.

use durably_db::{Connection, FromSqlError, OptionalExtension, Row, Sql, ToSql, params};

use crate::error::{Error, Result};

/// The fencing epoch of a lock. It grows with every acquire and takeover and never goes back.
pub type Epoch = u64;

/// A holder as recorded in a lock row. Fields are as stored: a foreign or damaged file may hold
/// nonsense here, which the judge reports instead of trusting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderRecord {
    /// The holder instance's UUID, as text.
    pub instance_id: String,
    /// The holder's pid in its own pid namespace.
    pub pid: i64,
    /// The holder's start time in clock ticks after boot.
    pub start_time: i64,
    /// The holder's boot id.
    pub boot_id: String,
    /// The holder's pid-namespace inode.
    pub pid_ns: i64,
    /// The holder's host name.
    pub hostname: String,
    /// When it acquired the lock (RFC 3339 UTC).
    pub acquired_at: String,
    /// Its last heartbeat (RFC 3339 UTC).
    pub heartbeat_at: String,
    /// Its opt-in lease in milliseconds, if any.
    pub lease_ms: Option<i64>,
}

impl HolderRecord {
    /// Whether this holder is the process `identity` describes: the same pid, start time,
    /// boot and pid namespace (a reused pid has another start time).
    pub fn is_process(&self, identity: &crate::ProcessIdentity) -> bool {
        self.pid == identity.pid
            && self.start_time == identity.start_time
            && self.boot_id == identity.boot_id
            && self.pid_ns == identity.pid_ns
    }
}

/// One row of the `locks` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRow {
    /// The locked resource.
    pub resource: String,
    /// The current fencing epoch.
    pub epoch: Epoch,
    /// The holder, or `None` when the lock is free.
    pub holder: Option<HolderRecord>,
}

const COLUMNS: &str = "resource, epoch, instance_id, pid, start_time, boot_id, pid_ns, hostname, \
                       acquired_at, heartbeat_at, lease_ms";

fn read_row(row: &Row<'_>) -> Result<LockRow> {
    let resource: String = row.get(0)?;
    let corrupt = |reason: String| Error::Corrupt {
        resource: resource.clone(),
        reason,
    };
    let epoch: i64 = row.get(1)?;
    let epoch = Epoch::try_from(epoch).map_err(|_| corrupt(format!("negative epoch {epoch}")))?;
    let instance_id: Option<String> = row.get(2)?;
    let holder = match instance_id {
        None => None,
        Some(instance_id) => Some(HolderRecord {
            instance_id,
            pid: row.get(3)?,
            start_time: row.get(4)?,
            boot_id: row.get(5)?,
            pid_ns: row.get(6)?,
            hostname: row.get(7)?,
            acquired_at: row.get(8)?,
            heartbeat_at: row.get(9)?,
            lease_ms: row.get(10)?,
        }),
    };
    Ok(LockRow {
        resource: resource.clone(),
        epoch,
        holder,
    })
}

/// The name of the column at `index` of [`COLUMNS`], for messages.
fn column_name(index: usize) -> &'static str {
    COLUMNS.split(", ").nth(index).unwrap_or("?")
}

fn map_read_error(resource: &str, error: Error) -> Error {
    match error {
        Error::Storage(durably_db::Error::Column {
            index,
            source: FromSqlError::InvalidType { found, .. },
        }) => Error::Corrupt {
            resource: resource.to_owned(),
            reason: format!("column {} holds a {found}", column_name(index)),
        },
        other => other,
    }
}

/// Reads the lock row of `resource`, held or free; `None` when it was never locked.
///
/// # Errors
/// [`Error::Corrupt`] for a row that does not read as a lock, [`Error::Storage`] for SQLite.
pub fn read(conn: &Connection, resource: &str) -> Result<Option<LockRow>> {
    let mut statement =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM locks WHERE resource = ?1"))?;
    let mut rows = statement.query(params![resource])?;
    match rows.next()? {
        Some(row) => read_row(&row)
            .map(Some)
            .map_err(|error| map_read_error(resource, error)),
        None => Ok(None),
    }
}

/// Every held lock row, in resource order. A row that does not read as a lock is an error.
///
/// # Errors
/// [`Error::Corrupt`] or [`Error::Storage`].
pub fn held(conn: &Connection) -> Result<Vec<LockRow>> {
    held_rows(conn, DamagedRows::Fail)
}

/// Every held lock row that reads as a lock; a damaged row is skipped with a warning, so one
/// bad row cannot stop the sweep (or a journal's open) for every other lock. A skipped row is
/// never judged dead, so it is never taken over.
///
/// # Errors
/// [`Error::Storage`].
pub fn held_readable(conn: &Connection) -> Result<Vec<LockRow>> {
    held_rows(conn, DamagedRows::Skip)
}

/// What a listing does with a row that does not read as a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DamagedRows {
    Fail,
    Skip,
}

/// The held lock rows, in no particular order. No `ORDER BY resource`: SQLite would serve it
/// by scanning the primary key, reading every lock row the file keeps (one per execution ever
/// opened, released ones included) at each journal open and sweep, instead of seeking the
/// partial index `locks_held`, which names the held ones only.
const HELD: &str = "FROM locks WHERE instance_id IS NOT NULL";

fn held_rows(conn: &Connection, damaged: DamagedRows) -> Result<Vec<LockRow>> {
    let mut statement = conn.prepare_cached(&format!("SELECT {COLUMNS} {HELD}"))?;
    let mut rows = statement.query([])?;
    let mut locks = Vec::new();
    while let Some(row) = rows.next()? {
        let resource: String = row.get(0)?;
        match read_row(&row).map_err(|error| map_read_error(&resource, error)) {
            Ok(lock) => locks.push(lock),
            Err(error) if damaged == DamagedRows::Skip => {
                tracing::warn!(resource, %error, "skipping a lock row that does not read as a lock");
            }
            Err(error) => return Err(error),
        }
    }
    locks.sort_unstable_by(|a, b| a.resource.cmp(&b.resource));
    Ok(locks)
}

/// The new holder's columns, written by acquire and takeover.
pub(crate) struct NewHolder<'a> {
    pub instance_id: &'a str,
    pub pid: i64,
    pub start_time: i64,
    pub boot_id: &'a str,
    pub pid_ns: i64,
    pub hostname: &'a str,
    pub now: &'a str,
    pub lease_ms: Option<i64>,
}

/// The upsert of [`claim_free`], with the dialect's guard against a damaged row.
macro_rules! claim_free_sql {
    ($guard:literal) => {
        concat!(
            "INSERT INTO locks (resource, epoch, instance_id, pid, start_time, boot_id, pid_ns, \
                                hostname, acquired_at, heartbeat_at, lease_ms, released_at)
             VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, NULL)
             ON CONFLICT (resource) DO UPDATE SET
                 epoch = locks.epoch + 1, instance_id = excluded.instance_id, pid = excluded.pid,
                 start_time = excluded.start_time, boot_id = excluded.boot_id,
                 pid_ns = excluded.pid_ns, hostname = excluded.hostname,
                 acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at,
                 lease_ms = excluded.lease_ms, released_at = NULL
             WHERE locks.instance_id IS NULL AND locks.epoch >= 1",
            $guard,
            " RETURNING epoch"
        )
    };
}

/// A foreign or damaged row is left alone, and the read that follows reports it as corrupt. On
/// SQLite only a non-STRICT foreign table can hold a non-integer epoch; PostgreSQL's column
/// types rule it out.
const CLAIM_FREE: Sql = Sql {
    sqlite: claim_free_sql!(" AND typeof(locks.epoch) = 'integer'"),
    postgres: claim_free_sql!(""),
};

/// Takes a free (or never-seen) lock. Returns the new epoch, or `None` when the row is held.
pub(crate) fn claim_free(
    conn: &Connection,
    resource: &str,
    new: &NewHolder<'_>,
) -> Result<Option<Epoch>> {
    let mut statement = conn.prepare_cached(conn.pick(&CLAIM_FREE))?;
    let epoch: Option<i64> = statement
        .query_row(&*new.numbered_params(&resource, None), |row| row.get(0))
        .optional()?;
    epoch
        .map(|epoch| checked_epoch(resource, epoch))
        .transpose()
}

/// An epoch read back from SQLite; never negative in a `locks` table this crate made.
fn checked_epoch(resource: &str, epoch: i64) -> Result<Epoch> {
    Epoch::try_from(epoch).map_err(|_| Error::Corrupt {
        resource: resource.to_owned(),
        reason: format!("negative epoch {epoch}"),
    })
}

/// Compare-and-swap takeover: succeeds only while the row still has `expected` as its epoch.
/// Returns the new epoch, or `None` when another contender got there first.
pub(crate) fn swap_holder(
    conn: &Connection,
    resource: &str,
    expected: Epoch,
    new: &NewHolder<'_>,
) -> Result<Option<Epoch>> {
    let mut statement = conn.prepare_cached(
        "UPDATE locks SET epoch = epoch + 1, instance_id = ?2, pid = ?3,
                          start_time = ?4, boot_id = ?5, pid_ns = ?6,
                          hostname = ?7, acquired_at = ?8, heartbeat_at = ?8,
                          lease_ms = ?9, released_at = NULL
         WHERE resource = ?1 AND epoch = ?10
         RETURNING epoch",
    )?;
    let expected = expected as i64;
    let epoch: Option<i64> = statement
        .query_row(&*new.numbered_params(&resource, Some(&expected)), |row| {
            row.get(0)
        })
        .optional()?;
    epoch
        .map(|epoch| checked_epoch(resource, epoch))
        .transpose()
}

impl NewHolder<'_> {
    /// The holder columns as parameters `?1` (the resource) to `?9`, plus `?10`, the expected
    /// epoch, for a compare-and-swap.
    fn numbered_params<'p>(
        &'p self,
        resource: &'p &'p str,
        expected: Option<&'p i64>,
    ) -> Vec<&'p dyn ToSql> {
        let mut numbered: Vec<&dyn ToSql> = vec![
            resource,
            &self.instance_id,
            &self.pid,
            &self.start_time,
            &self.boot_id,
            &self.pid_ns,
            &self.hostname,
            &self.now,
            &self.lease_ms,
        ];
        if let Some(expected) = expected {
            numbered.push(expected);
        }
        numbered
    }
}

/// Frees the lock if `instance_id` still holds it at `epoch`. Returns whether it did.
pub(crate) fn clear_holder(
    conn: &Connection,
    resource: &str,
    instance_id: &str,
    epoch: Epoch,
    now: &str,
) -> Result<bool> {
    let mut statement = conn.prepare_cached(
        "UPDATE locks SET instance_id = NULL, pid = NULL, start_time = NULL, boot_id = NULL,
                          pid_ns = NULL, hostname = NULL, acquired_at = NULL,
                          heartbeat_at = NULL, lease_ms = NULL, released_at = ?4
         WHERE resource = ?1 AND instance_id = ?2 AND epoch = ?3",
    )?;
    Ok(statement.execute(params![resource, instance_id, epoch as i64, now])? == 1)
}

/// The fence check. On PostgreSQL the row is locked `FOR SHARE`: a takeover's compare-and-swap
/// (`UPDATE … WHERE epoch = ?`) waits until the fenced transaction ends, and a fence that waited
/// on a takeover reads the row as the takeover left it (READ COMMITTED re-checks the `WHERE` on
/// the newest version), so it finds the new epoch and fails. SQLite's single writer serializes
/// the check and the write already.
const IS_HELD_BY: Sql = Sql {
    sqlite: "SELECT 1 FROM locks WHERE resource = ?1 AND instance_id = ?2 AND epoch = ?3",
    postgres: "SELECT 1 FROM locks WHERE resource = ?1 AND instance_id = ?2 AND epoch = ?3 \
               FOR SHARE",
};

/// Whether `instance_id` holds `resource` at `epoch`.
pub(crate) fn is_held_by(
    conn: &Connection,
    resource: &str,
    instance_id: &str,
    epoch: Epoch,
) -> Result<bool> {
    let mut statement = conn.prepare_cached(conn.pick(&IS_HELD_BY))?;
    Ok(statement.exists(params![resource, instance_id, epoch as i64])?)
}

/// Refreshes the heartbeat if `instance_id` still holds `resource` at `epoch`.
pub(crate) fn touch(
    conn: &Connection,
    resource: &str,
    instance_id: &str,
    epoch: Epoch,
    now: &str,
) -> Result<bool> {
    let mut statement = conn.prepare_cached(
        "UPDATE locks SET heartbeat_at = ?4 WHERE resource = ?1 AND instance_id = ?2 AND epoch = ?3",
    )?;
    Ok(statement.execute(params![resource, instance_id, epoch as i64, now])? == 1)
}

/// Describes the current state of a lock row for a `LockLost` message.
pub(crate) fn describe(conn: &Connection, resource: &str) -> String {
    match read(conn, resource) {
        Ok(Some(LockRow {
            epoch,
            holder: Some(holder),
            ..
        })) => format!(
            "epoch {epoch}, held by pid {} since {}",
            holder.pid, holder.acquired_at
        ),
        Ok(Some(LockRow {
            epoch,
            holder: None,
            ..
        })) => format!("epoch {epoch}, free"),
        Ok(None) => "gone".to_owned(),
        Err(error) => format!("unreadable ({error})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Listing the held locks seeks the partial index of held locks, whatever the number of
    /// released lock rows: the journal's open and every sweep list them.
    #[test]
    fn the_held_locks_are_read_from_their_index() {
        let conn = Connection::from(rusqlite::Connection::open_in_memory().unwrap());
        conn.execute_batch(include_str!("../../../schema/0001_locks.sql"))
            .unwrap();
        let plan: String = conn
            .query_row(
                &format!("EXPLAIN QUERY PLAN SELECT {COLUMNS} {HELD}"),
                [],
                |row| row.get(3),
            )
            .unwrap();
        assert_eq!(plan, "SEARCH locks USING INDEX locks_held (instance_id>?)");
    }
}
