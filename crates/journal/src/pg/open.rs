//! [`open`]: a journal in a PostgreSQL database. Its sessions, their settings, and the order of
//! an open: migrate, sweep, then start the writer's workers and the read pool.

use std::path::{Path, PathBuf};

use durably_db::{Connection, PgConnection, PgUrl, Target};
use uuid::Uuid;

use crate::config::{Durability, JournalBuilder};
use crate::error::{Error, Result};
use crate::journal::{self, Journal, Parts};
use crate::readers::Readers;

/// How every session of one journal connects, and what it sets before its first statement.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    url: PgUrl,
    /// What names the sessions before their role: the first 8 hex digits of the lock
    /// instance's id (`application_name = durably:<instance8>:<role>`), so an operator sees
    /// whose they are; `inspect` for an inspector, which has no instance.
    owner: String,
    durability: Durability,
    /// Becomes the session's `lock_timeout`: how long a statement waits for a row lock.
    busy_timeout_ms: u64,
}

impl Session {
    /// The sessions of lock instance `instance` on `url`, with `config`'s durability and
    /// busy timeout.
    pub(crate) fn new(url: &PgUrl, instance: Uuid, config: &JournalBuilder) -> Self {
        let instance = instance.simple().to_string();
        Self::named(url, instance.get(..8).unwrap_or(&instance), config)
    }

    /// The sessions on `url` named after `owner`, with `config`'s durability and busy timeout.
    pub(crate) fn named(url: &PgUrl, owner: &str, config: &JournalBuilder) -> Self {
        Self {
            url: url.clone(),
            owner: owner.to_owned(),
            durability: config.durability,
            busy_timeout_ms: config.busy_timeout_ms,
        }
    }

    /// A new session for `role` (`writer`, `reader`, `open`). `synchronous_commit` is on for
    /// [`Durability::Full`] (a commit returns once the server flushed it) and off for
    /// [`Durability::ProcessCrash`] (it returns before, so a server crash may lose the last
    /// commits, never reorder them); `lock_timeout` is the busy timeout, at least 1 ms, since 0
    /// would wait forever.
    ///
    /// # Errors
    /// The server cannot be reached or refuses the session or a setting.
    pub(crate) fn connect(&self, role: &str) -> durably_db::Result<Connection> {
        let name = format!("{}:{role}", self.owner);
        let conn = Connection::from(PgConnection::connect(self.url.expose(), &name)?);
        let synchronous_commit = match self.durability {
            Durability::Full => "on",
            Durability::ProcessCrash => "off",
        };
        conn.execute_batch(&format!(
            "SET synchronous_commit = {synchronous_commit}; SET lock_timeout = {}",
            self.busy_timeout_ms.max(1)
        ))?;
        Ok(conn)
    }

    /// A session of the read pool: each of its transactions is a `REPEATABLE READ READ ONLY`
    /// snapshot, so the reads of one [`Journal::read`] agree with each other and write nothing.
    ///
    /// # Errors
    /// As [`Session::connect`].
    pub(crate) fn reader(&self) -> durably_db::Result<Connection> {
        self.read_only("reader")
    }

    /// A session for `role` whose transactions are `REPEATABLE READ READ ONLY`.
    ///
    /// # Errors
    /// As [`Session::connect`].
    pub(crate) fn read_only(&self, role: &str) -> durably_db::Result<Connection> {
        let conn = self.connect(role)?;
        conn.execute_batch(
            "SET default_transaction_isolation = 'repeatable read';
             SET default_transaction_read_only = on",
        )?;
        Ok(conn)
    }
}

/// Opens the journal in the database (and schema, by its `search_path`) `url` names: connects,
/// brings the schema up to date, reclaims what dead holders left, then starts the writer's
/// workers and the read pool.
///
/// # Errors
/// [`Error::CannotOpen`] when the server cannot be reached; [`Error::SchemaTooNew`] for a
/// schema a newer build migrated; a storage error from a migration.
pub(crate) fn open(config: JournalBuilder, url: &PgUrl) -> Result<Journal> {
    // The URL as shown, password hidden: what errors and `Journal::path` name.
    let path = PathBuf::from(url.to_string());
    // Before anything is written: no lock row may name an instance whose key was never held.
    let liveness = super::liveness::start(url, &path)?;
    let locker = journal::locker(&config, liveness.clone())?;
    let session = Session::new(url, locker.instance_id(), &config);
    let conn = session
        .connect("open")
        .map_err(|error| cannot_open(&path, &error))?;
    super::migrate::journal(&conn, &path)?;
    if config.sweep_on_open {
        crate::sweep::reclaim_orphans(&conn, &locker)?;
    }
    drop(conn);
    let readers = journal::read_pool(&config, Readers::Postgres(session.clone()))?;
    let (writer, writer_thread) = super::workers::start(
        &path,
        &session,
        &liveness,
        config.pg_writers,
        config.ack_timeout,
    )?;
    Ok(Journal::assemble(
        config,
        Parts {
            target: Target::Postgres(url.clone()),
            path,
            readers,
            writer,
            writer_thread,
            locker,
        },
    ))
}

/// The error of a session that could not be opened at all.
pub(crate) fn cannot_open(path: &Path, error: &durably_db::Error) -> Error {
    Error::CannotOpen {
        path: path.to_owned(),
        reason: error.to_string(),
    }
}
