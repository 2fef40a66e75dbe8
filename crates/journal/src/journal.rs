//! [`Journal`]: an open journal file, its writer, its read pool and its lock instance.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use durably_db::{Connection, Target};
use durably_lock::{Clock, Liveness, LivenessDir, Locker, LockerConfig, format_timestamp};

use crate::backend;
use crate::config::{Durability, JournalBuilder, StepSettings};
use crate::error::{Error, Result};
use crate::files;
use crate::handles::OpenHandles;
use crate::readers::Readers;
use crate::storage;
use crate::writer::{Writer, WriterStats, WriterThread};

/// An open journal. Cheap to clone; all clones share one writer thread, one read pool and one
/// lock instance (one liveness file).
#[derive(Debug, Clone)]
pub struct Journal {
    pub(crate) inner: Arc<Inner>,
}

/// Fields drop in declaration order, and that order closes the file cleanly: the read
/// connections first, then the writer's queue (which ends the writer thread), then
/// `_writer_thread`, which waits until the write connection, the last one, has closed.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) path: PathBuf,
    /// Where the journal lives; for SQLite, the file at `path`.
    pub(crate) target: Target,
    pub(crate) readers: r2d2::Pool<Readers>,
    pub(crate) writer: Writer,
    /// Never read: held only so that dropping it, after `writer`, joins the writer thread.
    pub(crate) _writer_thread: WriterThread,
    pub(crate) locker: Arc<Locker>,
    pub(crate) handles: Arc<OpenHandles>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) durability: Durability,
    pub(crate) settings: StepSettings,
    pub(crate) completed_retention: Duration,
    pub(crate) failed_retention: Duration,
    /// The change feed, started by its first subscriber ([`Journal::changes`]).
    pub(crate) changes: crate::changes::Feed,
}

impl Journal {
    /// Starts configuring a journal at `target`: a SQLite file's path, or a PostgreSQL URL
    /// (`postgres://` or `postgresql://`, see [`Target`]).
    pub fn builder(target: impl Into<Target>) -> JournalBuilder {
        JournalBuilder::new(target.into())
    }

    /// Opens the journal at `target` with the default settings.
    ///
    /// # Errors
    /// As [`JournalBuilder::open`].
    pub fn open(target: impl Into<Target>) -> Result<Self> {
        Self::builder(target).open()
    }

    pub(crate) fn open_with(config: JournalBuilder) -> Result<Self> {
        if config.lease_ms == Some(0) {
            return Err(Error::InvalidConfig(
                "lease_ms must be at least 1 ms; leave the lease unset for no lease".to_owned(),
            ));
        }
        #[cfg(feature = "postgres")]
        if let Target::Postgres(url) = &config.target {
            let url = url.clone();
            return crate::pg::open::open(config, &url);
        }
        let busy_timeout_ms = config.busy_timeout_ms;
        let path = backend::sqlite_path(&config.target)?.to_owned();
        Self::open_unlabelled(config).map_err(|error| match error {
            // Errors converted from SQLite cannot know the timeout that expired, nor the file
            // (the orphan sweep's corruption, say); this one knows both.
            Error::Busy { .. } => Error::Busy { busy_timeout_ms },
            // SQLite cannot tell a file it may only read, in a directory where it cannot make
            // the WAL, from one it cannot open at all.
            Error::CannotOpen { reason, .. } if !files::writable(&path) => Error::ReadOnly {
                path,
                reason: format!("{reason}; this process may not write the file or its directory"),
            },
            other => other.at_path(&path),
        })
    }

    fn open_unlabelled(config: JournalBuilder) -> Result<Self> {
        let path = absolute(backend::sqlite_path(&config.target)?)?;
        files::check_path_length(&path)?;
        let conn = Connection::from(storage::open_writer(
            &path,
            config.durability,
            config.busy_timeout_ms,
        )?);
        storage::migrate(backend::sqlite(&conn)?, &path)?;
        let locker = locker(&config, LivenessDir::beside(&path))?;
        if config.sweep_on_open {
            crate::sweep::reclaim_orphans(&conn, &locker)?;
        }
        let busy_timeout_ms = config.busy_timeout_ms;
        let readers = read_pool(&config, Readers::sqlite(&path, busy_timeout_ms))?;
        let wal_sync = storage::writer_wal_sync(backend::sqlite(&conn)?, &path, config.durability)?;
        let (writer, writer_thread) =
            Writer::start(&path, conn, busy_timeout_ms, config.ack_timeout, wal_sync)?;
        Ok(Self::assemble(
            config,
            Parts {
                target: Target::Sqlite(path.clone()),
                path,
                readers,
                writer,
                writer_thread,
                locker,
            },
        ))
    }

    /// The journal of `parts`, with the rest of `config`'s settings.
    pub(crate) fn assemble(config: JournalBuilder, parts: Parts) -> Self {
        Self {
            inner: Arc::new(Inner {
                target: parts.target,
                path: parts.path,
                writer: parts.writer,
                _writer_thread: parts.writer_thread,
                readers: parts.readers,
                locker: parts.locker,
                handles: Arc::default(),
                clock: config.clock,
                durability: config.durability,
                settings: StepSettings {
                    payload_bytes_max: config.payload_bytes_max,
                    retry: config.retry,
                    ambiguous_reruns_max: config.ambiguous_reruns_max,
                    lease_ms: config.lease_ms,
                },
                completed_retention: config.completed_retention,
                failed_retention: config.failed_retention,
                changes: crate::changes::Feed::new(config.pg_poll),
            }),
        }
    }

    /// A receiver of the journal's change counter, which moves after another connection (of
    /// this process or another, on any host) commits a change a waiter may wait for: a new or
    /// woken execution, a status change, a cancel request, and the runtime's messages, events
    /// and queue limits. Wait on it, then re-read what you wait for; a move may also come with
    /// no such change. The feed starts at the first call: on SQLite a thread polls the file's
    /// `data_version` every 10 ms; on PostgreSQL a thread LISTENs to the schema's notifications
    /// and also moves the counter every `pg_poll_ms` and after every reconnect.
    ///
    /// # Errors
    /// On SQLite, a storage error opening the feed's read-only connection;
    /// [`Error::Io`] when its thread cannot be started.
    pub fn changes(&self) -> Result<tokio::sync::watch::Receiver<u64>> {
        self.inner.changes.subscribe(&self.inner.target)
    }

    /// The database file; on PostgreSQL, the URL with its password hidden.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Where the journal lives: for SQLite, [`Journal::path`].
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// The durability this journal commits with.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// `value` as a journal payload, encoded under this journal's cap: what a crate built on
    /// the journal hands to functions that store one ([`crate::lifecycle::insert_execution`]).
    /// Writes nothing.
    ///
    /// # Errors
    /// [`Error::PayloadTooLarge`] over the cap, [`Error::Json`] when `value` does not encode.
    pub fn encode_payload(
        &self,
        value: &impl serde::Serialize,
        what: &str,
    ) -> Result<crate::payload::Payload> {
        crate::payload::Payload::encoded(value, what, self.payload_bytes_max())
    }

    /// The largest payload, in bytes of JSON, this journal writes or reads.
    pub fn payload_bytes_max(&self) -> usize {
        self.inner.settings.payload_bytes_max
    }

    /// This journal's lock instance (its id is stamped on every lock it holds).
    pub fn locker(&self) -> &Locker {
        &self.inner.locker
    }

    /// The writer's counters: commits and requests so far.
    pub fn writer_stats(&self) -> WriterStats {
        self.inner.writer.stats()
    }

    /// Runs `work` on the write connection inside a group-commit transaction and waits until
    /// it has committed. For crates built on the journal (the scheduler keeps its ledger this
    /// way); `work` must not call back into the journal.
    ///
    /// # Errors
    /// `work`'s own error, or the batch's commit error.
    pub async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.inner.writer.write(work).await
    }

    /// Runs `work` on a read-only pooled connection, inside one short read transaction.
    ///
    /// # Errors
    /// `work`'s own error, or a pool or storage error.
    pub fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let read = || {
            let conn = self.inner.readers.get()?;
            let transaction = conn.transaction()?;
            let value = work(&transaction)?;
            transaction.commit()?;
            Ok(value)
        };
        read().map_err(|error: Error| error.at_path(&self.inner.path))
    }

    pub(crate) fn now(&self) -> String {
        format_timestamp(self.inner.clock.now())
    }
}

/// What a backend opened, for [`Journal::assemble`].
pub(crate) struct Parts {
    /// The file, or the URL as shown (its password hidden).
    pub(crate) path: PathBuf,
    pub(crate) target: Target,
    pub(crate) readers: r2d2::Pool<Readers>,
    pub(crate) writer: Writer,
    pub(crate) writer_thread: WriterThread,
    pub(crate) locker: Arc<Locker>,
}

/// The journal's lock instance, whose liveness `liveness` keeps.
pub(crate) fn locker(
    config: &JournalBuilder,
    liveness: impl Into<Liveness>,
) -> Result<Arc<Locker>> {
    Ok(Arc::new(Locker::new(LockerConfig {
        liveness: liveness.into(),
        lease_ms: config.lease_ms,
        processes: Arc::clone(&config.processes),
        clock: Arc::clone(&config.clock),
    })?))
}

/// The read pool over the connections `manager` opens.
pub(crate) fn read_pool(config: &JournalBuilder, manager: Readers) -> Result<r2d2::Pool<Readers>> {
    Ok(r2d2::Pool::builder()
        .max_size(config.readers_max)
        .min_idle(Some(0))
        .connection_timeout(Duration::from_millis(config.busy_timeout_ms.max(1000)))
        .build(manager)?)
}

/// Makes `path` absolute and resolves links in its directory, so every process names the same
/// liveness directory for the same database.
fn absolute(path: &Path) -> Result<PathBuf> {
    if let Ok(canonical) = path.canonicalize() {
        return Ok(canonical);
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let directory = parent.canonicalize().map_err(|source| Error::Io {
        action: "find the directory of",
        path: path.to_owned(),
        source,
    })?;
    Ok(match path.file_name() {
        Some(name) => directory.join(name),
        None => directory,
    })
}
