//! [`Fence`]: what one open execution needs to write, taken once when it is opened.
//!
//! Invariant: every write made through a fence first checks, in the same transaction, that
//! the fence's epoch is still the lock's epoch. A handle whose lock was taken over writes
//! nothing ([`crate::Error::LockLost`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use durably_lock::{Clock, Locker, format_timestamp};
use rusqlite::Connection;

use crate::error::Result;
use crate::journal::Journal;
use crate::step::FencingToken;
use crate::writer::{Undo, Writer};

/// The writer, the lock and the epoch of one open execution.
#[derive(Debug)]
pub(crate) struct Fence {
    writer: Writer,
    locker: Arc<Locker>,
    resource: Arc<str>,
    epoch: u64,
    clock: Arc<dyn Clock>,
    /// Never read: keeps the journal open while a handle (or its heartbeat task) can still
    /// write. The journal's last drop joins its writer thread, which ends only once every
    /// writer handle is gone; a fence that outlived the journal would make that join wait on
    /// a task that cannot run meanwhile.
    _journal: Journal,
}

impl Fence {
    pub(crate) fn new(journal: &Journal, resource: Arc<str>, epoch: u64) -> Self {
        Self {
            writer: journal.inner.writer.clone(),
            locker: Arc::clone(&journal.inner.locker),
            resource,
            epoch,
            clock: Arc::clone(&journal.inner.clock),
            _journal: journal.clone(),
        }
    }

    /// The epoch as the token handed to step closures.
    pub(crate) fn token(&self) -> FencingToken {
        FencingToken(self.epoch)
    }

    /// Runs `work(conn, resource, now)` in the writer after the fence check, in the same
    /// transaction, inside its own savepoint.
    pub(crate) async fn write<T, W>(&self, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        self.write_with(Undo::Savepoint, work).await
    }

    /// [`Fence::write`], with the way a failure of `work` is taken back chosen by the caller.
    /// Writes that change rows with one statement after the fence check (which only reads)
    /// take [`Undo::OneStatement`].
    pub(crate) async fn write_with<T, W>(&self, undo: Undo, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        self.write_at(undo, move |conn, resource, _, now| {
            work(conn, resource, now)
        })
        .await
    }

    /// [`Fence::write_with`], with `work` also handed the time of the write as a value, for the
    /// caller's hooks: `work(conn, resource, at, now)`, where `now` is `at` as stored.
    pub(crate) async fn write_at<T, W>(&self, undo: Undo, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, DateTime<Utc>, &str) -> Result<T> + Send + 'static,
    {
        let locker = Arc::clone(&self.locker);
        let (resource, epoch) = (Arc::clone(&self.resource), self.epoch);
        let at = self.clock.now();
        let now = format_timestamp(at);
        self.writer
            .write_with(undo, move |conn| {
                locker.fence(conn, &resource, epoch)?;
                work(conn, &resource, at, &now)
            })
            .await
    }

    /// Runs `work(conn, locker, resource, epoch)` in the writer without the fence check, for
    /// writes that check the lock themselves (a heartbeat, a release).
    async fn write_unfenced<T, W>(&self, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &Locker, &str, u64) -> Result<T> + Send + 'static,
    {
        let locker = Arc::clone(&self.locker);
        let (resource, epoch) = (Arc::clone(&self.resource), self.epoch);
        self.writer
            .write(move |conn| work(conn, &locker, &resource, epoch))
            .await
    }

    /// Refreshes the lease heartbeat of the lock.
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] when the lock was taken over.
    pub(crate) async fn heartbeat(&self) -> Result<()> {
        self.write_unfenced(|conn, locker, resource, epoch| {
            Ok(locker.heartbeat(conn, resource, epoch)?)
        })
        .await
    }

    /// Releases the lock inside a transaction the caller is already in (a finalize).
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] when the lock was taken over.
    pub(crate) fn release_in(&self, conn: &Connection) -> Result<()> {
        Ok(self.locker.release(conn, &self.resource, self.epoch)?)
    }

    /// Releases the lock without waiting for the release to commit (a `Drop` cannot wait).
    pub(crate) fn release_detached(&self) {
        let locker = Arc::clone(&self.locker);
        let (resource, epoch) = (Arc::clone(&self.resource), self.epoch);
        self.writer.write_detached(move |conn| {
            release_if_held(conn, &locker, &resource, epoch);
            Ok(())
        });
    }
}

/// Releases a lock if this instance still holds it; a lock already lost needs no release.
fn release_if_held(conn: &Connection, locker: &Locker, resource: &str, epoch: u64) {
    if let Err(error) = locker.release(conn, resource, epoch) {
        tracing::debug!(execution_id = resource, %error, "lock already gone at release");
    }
}
