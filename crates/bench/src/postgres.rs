//! `--backend postgres`: a scenario's schema on the server, the baseline's session, and the
//! server's WAL position.
//!
//! Every scenario runs in a new schema `b_<uuid>` that holds the journal's tables and the
//! baseline's, reached through the server URL with `options=-csearch_path%3Db_<uuid>`, and
//! dropped with everything in it when the scenario ends. The server is private to the run
//! (`.ci/pg start`), so its WAL position counts only this run's writes.

use durably::db::{Connection, PgConnection, PgUrl, Target};
use durably::{Durability, Journal};

use crate::error::{BenchError, Result};

/// How long dropping a schema waits for a lock a session still holds on something in it.
const DROP_LOCK_TIMEOUT_MS: u32 = 10_000;

/// One scenario's schema, dropped with everything in it when this drops.
#[derive(Debug)]
pub struct Schema {
    /// The session that made the schema and drops it.
    admin: Connection,
    name: String,
    /// The server's URL with the schema as its `search_path`: what the journal and the
    /// baseline open.
    target: Target,
}

impl Schema {
    /// Makes a new schema on `server`.
    ///
    /// # Errors
    /// The server cannot be reached, or refuses the schema.
    pub fn create(server: &PgUrl) -> Result<Self> {
        let admin = Connection::from(
            PgConnection::connect(server.expose(), "bench:admin").map_err(|source| {
                BenchError::Setup(format!(
                    "cannot connect to the PostgreSQL server {server}: {source}"
                ))
            })?,
        );
        let name = format!("b_{}", uuid::Uuid::new_v4().simple());
        admin.execute_batch(&format!("CREATE SCHEMA {name}"))?;
        let target = Target::Postgres(server.with_search_path(&name));
        Ok(Self {
            admin,
            name,
            target,
        })
    }

    /// What the scenario's journal and baseline open.
    pub fn target(&self) -> &Target {
        &self.target
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let sql = format!(
            "SET lock_timeout = {DROP_LOCK_TIMEOUT_MS}; DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        );
        if let Err(error) = self.admin.execute_batch(&sql) {
            eprintln!(
                "durably-bench: cannot drop the scratch schema {}: {error}",
                self.name
            );
        }
    }
}

/// A session on `url` with the journal's `synchronous_commit` for `durability` (on for
/// `full`: a commit returns once the server flushed it; off for `process-crash`), as the
/// journal's writer workers set it.
///
/// # Errors
/// The server cannot be reached or refuses the setting.
pub fn connect_like_journal(url: &PgUrl, durability: Durability) -> Result<Connection> {
    let conn = Connection::from(
        PgConnection::connect(url.expose(), "bench:baseline").map_err(durably::db::Error::from)?,
    );
    let synchronous_commit = match durability {
        Durability::Full => "on",
        Durability::ProcessCrash => "off",
    };
    conn.execute_batch(&format!("SET synchronous_commit = {synchronous_commit}"))?;
    Ok(conn)
}

/// The server's WAL insert position, in bytes from the start; `None` when it cannot be read.
pub fn wal_position(journal: &Journal) -> Option<u64> {
    let position: i64 = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint",
                [],
                |row| row.get(0),
            )?)
        })
        .ok()?;
    u64::try_from(position).ok()
}
