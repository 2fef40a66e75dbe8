//! The change feed ([`crate::Journal::changes`]): a counter that moves after other connections
//! commit, so that waiters (a handle awaiting a result, a dispatcher looking for work) re-read
//! what they wait for then, instead of scanning tables on a timer.
//!
//! - SQLite: one thread reads `PRAGMA data_version` on a read-only connection of its own every
//!   [`SQLITE_POLL`]; the value changes exactly when another connection (of this process or
//!   another) committed to the file, and reading it costs microseconds and scans no table.
//! - PostgreSQL (`pg/listen.rs`): one thread LISTENs on the schema's channel, which the
//!   schema's triggers notify at the commit of a write that can wake a waiter, and bumps the
//!   counter per notification, every `pg_poll_ms` (a lost notification delays a wake-up and
//!   loses nothing) and at every reconnect.
//!
//! Invariant: the counter never moves back, and a commit another connection makes is followed
//! by a move of the counter (on PostgreSQL, for the writes that notify; the poll covers the
//! rest). Waiters may be woken without a change: they re-read and wait again. An error of the
//! feed's own connection is logged and counted as a change, so that waiters re-read through
//! the journal, which reports the condition to each of them.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use durably_db::Target;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// How often the SQLite feed reads `data_version`: the longest a waiter sleeps through a
/// commit of another connection.
pub(crate) const SQLITE_POLL: Duration = Duration::from_millis(10);

/// How long the SQLite feed's connection waits for a lock before reporting the file busy.
const PROBE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// One journal's change feed, started by its first subscriber. It holds a receiver, so its
/// thread runs while the journal is open; the thread ends at its next poll once the journal
/// and every subscriber are gone.
#[derive(Debug)]
pub(crate) struct Feed {
    /// PostgreSQL's fallback poll (`pg_poll_ms`); SQLite polls every [`SQLITE_POLL`].
    pg_poll: Duration,
    receiver: Mutex<Option<watch::Receiver<u64>>>,
}

impl Feed {
    /// A feed not started yet, polling PostgreSQL every `pg_poll`.
    pub(crate) fn new(pg_poll: Duration) -> Self {
        Self {
            pg_poll,
            receiver: Mutex::new(None),
        }
    }

    /// A receiver of the change counter of the journal at `target`, starting the feed's thread
    /// on the first call.
    ///
    /// # Errors
    /// On SQLite, a storage error opening the feed's connection; [`Error::Io`] when the
    /// thread cannot be spawned.
    pub(crate) fn subscribe(&self, target: &Target) -> Result<watch::Receiver<u64>> {
        let mut receiver = self.receiver.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(receiver) = receiver.as_ref() {
            return Ok(receiver.clone());
        }
        let (sender, started) = watch::channel(0_u64);
        match target {
            Target::Sqlite(path) => spawn_sqlite(target, path, sender)?,
            #[cfg(feature = "postgres")]
            Target::Postgres(url) => crate::pg::listen::spawn(target, url, self.pg_poll, sender)?,
            #[cfg(not(feature = "postgres"))]
            Target::Postgres(_) => {
                // A journal on PostgreSQL cannot be open in this build.
                let _ = (self.pg_poll, sender);
            }
        }
        *receiver = Some(started.clone());
        Ok(started)
    }
}

/// Adds one change to the counter.
pub(crate) fn bump(sender: &watch::Sender<u64>) {
    sender.send_modify(|count| *count = count.wrapping_add(1));
}

/// Starts the SQLite feed's thread on the file at `path`. The first `data_version` is read
/// before this returns, so a commit right after the subscriber's own read is counted.
fn spawn_sqlite(target: &Target, path: &Path, sender: watch::Sender<u64>) -> Result<()> {
    let conn = open_probe(path)?;
    let seen = data_version(&conn)?;
    let mut probe = Probe {
        open: Some((conn, seen)),
    };
    let path = path.to_owned();
    spawn(target, move || {
        while !sender.is_closed() {
            std::thread::sleep(SQLITE_POLL);
            if probe.changed(&path) {
                bump(&sender);
            }
        }
    })
}

/// Spawns the feed's thread for the journal at `target`.
///
/// # Errors
/// [`Error::Io`] when the thread cannot be spawned.
pub(crate) fn spawn(target: &Target, feed: impl FnOnce() + Send + 'static) -> Result<()> {
    std::thread::Builder::new()
        .name("durably-changes".to_owned())
        .spawn(feed)
        .map(drop)
        .map_err(|source| Error::Io {
            action: "start the change feed thread of",
            // `Target`'s display hides a URL's password.
            path: PathBuf::from(target.to_string()),
            source,
        })
}

/// The SQLite feed's connection and the last `data_version` it read; `None` after an error.
struct Probe {
    open: Option<(Connection, i64)>,
}

impl Probe {
    /// Whether another connection committed since the last call: reads `data_version`,
    /// opening the connection again first after an error. An error drops the connection and
    /// counts as a change, and so does the first read on a new connection, since commits in
    /// between were not seen.
    fn changed(&mut self, path: &Path) -> bool {
        let read = match self.open.take() {
            Some((conn, seen)) => data_version(&conn).map(|now| (conn, Some(seen), now)),
            None => open_probe(path).and_then(|conn| {
                let now = data_version(&conn)?;
                Ok((conn, None, now))
            }),
        };
        match read {
            Ok((conn, seen, now)) => {
                self.open = Some((conn, now));
                seen != Some(now)
            }
            Err(error) => {
                tracing::warn!(%error, path = %path.display(),
                    "the change feed cannot read data_version");
                true
            }
        }
    }
}

/// Opens the feed's connection to the journal file at `path`, read-only.
fn open_probe(path: &Path) -> rusqlite::Result<Connection> {
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
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
}
