//! Copying a whole journal into an empty one on another backend: a SQLite file into a
//! PostgreSQL schema when a program outgrows one host (`durably copy --from … --to …`), or
//! back.
//!
//! [`copy_journal`] carries every table that holds state (executions, steps, events, and the
//! runtime's and the scheduler's tables; `tables.rs` lists them and says why `locks` stays
//! behind) in one transaction of the destination's writer, so a failure leaves nothing
//! copied. It refuses before writing when a live process holds a lock of the source, when the
//! destination already holds rows, and when the two schemas' versions differ. Rows keep their
//! ids, payloads keep their bytes (PostgreSQL stores `json`, never `jsonb`), and timestamps
//! keep their instant. Before the transaction commits, every table is read back from the
//! destination and its row count and digest compared with the source's, and the source's locks
//! are judged again: a process that started on the source meanwhile fails the copy. Other
//! writers of the destination wait for the copy (its tables are locked).
//!
//! No lock row is copied: an execution that was running when its process died arrives with
//! no owner, and the destination's runtime recovers it as it would after a crash there.

mod rows;
pub use rows::COPY_BATCH_ROWS_MAX;
mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use durably_db::Connection;
use durably_lock::Judgement;

use crate::error::Error;
use crate::inspector::Inspector;
use crate::journal::Journal;
use rows::{Digest, Row};
use tables::{NOT_COPIED, TABLES, Table};

/// Why a copy did not happen. A copy that fails leaves the destination as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// A live process (or one that cannot be judged, which counts as live) holds a lock of the
    /// source, so the source may still change under the copy.
    #[error(
        "{} is in use: process {pid} on {hostname} holds {resource} ({verdict}); stop every \
         process using the journal, then copy",
        path.display()
    )]
    SourceInUse {
        /// The source journal.
        path: PathBuf,
        /// The locked resource (an execution id).
        resource: String,
        /// The holder's pid.
        pid: i64,
        /// The holder's host.
        hostname: String,
        /// `alive`, or `unknown` for a holder that cannot be judged from here.
        verdict: &'static str,
    },
    /// The destination already holds a journal's rows; a copy never merges or overwrites.
    #[error(
        "{destination} already holds rows (table {table}); copy into an empty database or schema"
    )]
    DestinationNotEmpty {
        /// The destination, with any password redacted.
        destination: String,
        /// The first table found with rows.
        table: &'static str,
    },
    /// An owner's schema version differs between the two sides.
    #[error(
        "schema versions differ: {owner} is at version {source_version} in the source and \
         {destination_version} in the destination (0: absent); open both with this build (the \
         destination with the runtime or scheduler that owns the tables) so that each is \
         migrated, then copy"
    )]
    SchemaMismatch {
        /// The owner (`journal`, `runtime`, `scheduler`).
        owner: String,
        /// Its version in the source.
        source_version: i64,
        /// Its version in the destination; 0 when it has none.
        destination_version: i64,
    },
    /// The source has a table this build does not know how to copy (another crate's), so a
    /// copy would lose state.
    #[error("{} has a table this build does not copy: {table}", path.display())]
    UnknownTable {
        /// The source journal.
        path: PathBuf,
        /// The table.
        table: String,
    },
    /// A source timestamp the destination would not hold as the same instant.
    #[error("{table}.{column} holds a timestamp that cannot be copied exactly: {reason}")]
    InexactTimestamp {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// The destination, read back inside the copy's transaction, did not hold the same rows;
    /// the transaction was rolled back.
    #[error(
        "{table} read back differently from the destination ({source_rows} rows copied, \
         {destination_rows} read back, digests {}); nothing was copied",
        if *digests_equal { "equal" } else { "differ" }
    )]
    Mismatch {
        /// The table.
        table: &'static str,
        /// Rows read from the source.
        source_rows: u64,
        /// Rows read back from the destination.
        destination_rows: u64,
        /// Whether the digests agreed.
        digests_equal: bool,
    },
    /// Reading the source or writing the destination failed; nothing was copied.
    #[error(transparent)]
    Journal(#[from] Error),
}

/// What a copy carried, table by table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// Every table copied, in copy order (parents first).
    pub tables: Vec<TableCopied>,
}

/// One table of a [`CopyReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCopied {
    /// The table's name.
    pub table: &'static str,
    /// Rows read from the source.
    pub source_rows: u64,
    /// Rows read back from the destination, inside the copy's transaction.
    pub destination_rows: u64,
    /// The blake3 digest (hex) of the table's rows in key order, the same on both sides.
    pub digest: String,
}

/// Copies the journal `source` reads into `destination`, in one transaction of the
/// destination's writer, and verifies it there before the commit (see the module doc).
/// `destination` is opened with this build, so its journal schema is current; the
/// runtime's and scheduler's tables must be migrated too when the source has them.
///
/// # Errors
/// [`CopyError::SourceInUse`], [`CopyError::UnknownTable`] before anything is written;
/// [`CopyError::SchemaMismatch`], [`CopyError::DestinationNotEmpty`],
/// [`CopyError::InexactTimestamp`] and [`CopyError::Mismatch`] from inside the transaction,
/// which is rolled back; [`CopyError::Journal`] for a storage error on either side.
pub async fn copy_journal(
    source: Inspector,
    destination: &Journal,
) -> Result<CopyReport, CopyError> {
    source_in_use(&source)?;
    let (source_tables, source_versions) = source.read(|conn| {
        let tables = rows::table_names(conn)?;
        let versions = rows::versions(conn, &tables)?;
        Ok((tables, versions))
    })?;
    if let Some(table) = source_tables.iter().find(|name| {
        !NOT_COPIED.contains(&name.as_str()) && !TABLES.iter().any(|t| t.name == *name)
    }) {
        return Err(CopyError::UnknownTable {
            path: source.path().to_owned(),
            table: table.clone(),
        });
    }
    let plan = Plan {
        source,
        source_tables,
        source_versions,
        destination: destination.target().to_string(),
    };
    // A refusal found inside the transaction is kept here, and the closure fails with a
    // journal error so that the writer rolls the transaction back.
    let refusal = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&refusal);
    let written = destination
        .write(move |conn| match plan.run(conn) {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(copy_error)) => {
                let message = copy_error.to_string();
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(copy_error);
                Err(Error::Inconsistent(message))
            }
            Err(error) => Err(error),
        })
        .await;
    let refused = refusal
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match (written, refused) {
        (_, Some(copy_error)) => Err(copy_error),
        (Ok(report), None) => Ok(report),
        (Err(error), None) => Err(CopyError::Journal(error)),
    }
}

/// Keeps every other writer out of the destination's copied tables until the copy's
/// transaction ends, so that no row slips in between the emptiness check and the commit.
/// SQLite's writer transaction already excludes every other writer of the file; PostgreSQL
/// takes `EXCLUSIVE` locks (readers still read).
fn lock_destination(conn: &Connection, present: &BTreeSet<String>) -> crate::Result<()> {
    if conn.dialect() != durably_db::Dialect::Postgres {
        return Ok(());
    }
    let names: Vec<&str> = TABLES
        .iter()
        .map(|table| table.name)
        .filter(|name| present.contains(*name))
        .collect();
    if !names.is_empty() {
        conn.execute_batch(&format!(
            "LOCK TABLE {} IN EXCLUSIVE MODE",
            names.join(", ")
        ))?;
    }
    Ok(())
}

/// Refuses a source any live (or unjudgeable) process holds a lock of: the check
/// [`copy_journal`] makes first, for a caller that wants it before preparing the destination.
///
/// # Errors
/// [`CopyError::SourceInUse`] naming the first such holder; [`CopyError::Journal`] when the
/// locks cannot be read.
pub fn source_in_use(source: &Inspector) -> Result<(), CopyError> {
    for (row, judgement) in source.lock_holders()? {
        let verdict = match judgement {
            Judgement::Dead(_) => continue,
            Judgement::Alive(_) => "alive",
            Judgement::Unknown(_) => "unknown",
        };
        let Some(holder) = row.holder else { continue };
        return Err(CopyError::SourceInUse {
            path: source.path().to_owned(),
            resource: row.resource,
            pid: holder.pid,
            hostname: holder.hostname,
            verdict,
        });
    }
    Ok(())
}

/// Everything the destination's transaction needs to know about the source.
struct Plan {
    source: Inspector,
    source_tables: BTreeSet<String>,
    source_versions: BTreeMap<String, i64>,
    destination: String,
}

impl Plan {
    /// The copy, on the destination's write connection inside its transaction. The outer
    /// error is a storage error; the inner one a refusal.
    fn run(&self, conn: &Connection) -> crate::Result<Result<CopyReport, CopyError>> {
        let destination_tables = rows::table_names(conn)?;
        lock_destination(conn, &destination_tables)?;
        if let Err(refusal) = self.check_destination(conn, &destination_tables)? {
            return Ok(Err(refusal));
        }
        let mut copied = Vec::new();
        for table in TABLES
            .iter()
            .filter(|t| self.source_tables.contains(t.name))
        {
            let digest = match self.copy_table(conn, table)? {
                Ok(digest) => digest,
                Err(refusal) => return Ok(Err(refusal)),
            };
            rows::move_identity(conn, table)?;
            copied.push((table, digest));
        }
        let mut report = CopyReport { tables: Vec::new() };
        for (table, source_digest) in copied {
            let back = match read_back(conn, table)? {
                Ok(digest) => digest,
                Err(refusal) => return Ok(Err(refusal)),
            };
            let digests_equal = back.hex() == source_digest.hex();
            if !digests_equal || back.rows() != source_digest.rows() {
                return Ok(Err(CopyError::Mismatch {
                    table: table.name,
                    source_rows: source_digest.rows(),
                    destination_rows: back.rows(),
                    digests_equal,
                }));
            }
            report.tables.push(TableCopied {
                table: table.name,
                source_rows: source_digest.rows(),
                destination_rows: back.rows(),
                digest: back.hex(),
            });
        }
        // A process that started on the source during the copy may have written rows the
        // copy did not read: refuse, and the transaction rolls back.
        if let Err(refusal) = source_in_use(&self.source) {
            return Ok(Err(refusal));
        }
        Ok(Ok(report))
    }

    /// The same schema versions as the source, and no rows in any table a copy writes.
    fn check_destination(
        &self,
        conn: &Connection,
        tables: &BTreeSet<String>,
    ) -> crate::Result<Result<(), CopyError>> {
        let versions = rows::versions(conn, tables)?;
        for (owner, &source_version) in &self.source_versions {
            let destination_version = versions.get(owner).copied().unwrap_or(0);
            if destination_version != source_version {
                return Ok(Err(CopyError::SchemaMismatch {
                    owner: owner.clone(),
                    source_version,
                    destination_version,
                }));
            }
        }
        // A table the source has and the destination lacks: its owner was never migrated
        // there (a source from before `schema_versions` counted it, say).
        if let Some(table) = TABLES
            .iter()
            .find(|t| self.source_tables.contains(t.name) && !tables.contains(t.name))
        {
            return Ok(Err(CopyError::SchemaMismatch {
                owner: table.owner.to_owned(),
                source_version: self.source_versions.get(table.owner).copied().unwrap_or(0),
                destination_version: versions.get(table.owner).copied().unwrap_or(0),
            }));
        }
        for table in TABLES.iter().filter(|t| tables.contains(t.name)) {
            if rows::has_rows(conn, table)? {
                return Ok(Err(CopyError::DestinationNotEmpty {
                    destination: self.destination.clone(),
                    table: table.name,
                }));
            }
        }
        Ok(Ok(()))
    }

    /// Copies `table` batch by batch, returning the digest of the rows read from the source.
    fn copy_table(
        &self,
        conn: &Connection,
        table: &'static Table,
    ) -> crate::Result<Result<Digest, CopyError>> {
        let mut digest = Digest::new();
        let mut last: Option<Row> = None;
        loop {
            let batch = self
                .source
                .read(|source| rows::read_batch(source, table, last.as_ref()))?;
            for row in &batch {
                if let Err(inexact) = digest.add(table, row) {
                    return Ok(Err(inexact_timestamp(table, inexact)));
                }
                rows::insert(conn, table, row)?;
            }
            if batch.len() < rows::COPY_BATCH_ROWS_MAX {
                return Ok(Ok(digest));
            }
            last = batch.into_iter().last();
        }
    }
}

/// The digest of `table` as the destination holds it, read in key order.
fn read_back(conn: &Connection, table: &'static Table) -> crate::Result<Result<Digest, CopyError>> {
    let mut digest = Digest::new();
    let mut last: Option<Row> = None;
    loop {
        let batch = rows::read_batch(conn, table, last.as_ref())?;
        for row in &batch {
            if let Err(inexact) = digest.add(table, row) {
                return Ok(Err(inexact_timestamp(table, inexact)));
            }
        }
        if batch.len() < rows::COPY_BATCH_ROWS_MAX {
            return Ok(Ok(digest));
        }
        last = batch.into_iter().last();
    }
}

fn inexact_timestamp(table: &'static Table, inexact: rows::InexactTimestamp) -> CopyError {
    CopyError::InexactTimestamp {
        table: table.name,
        column: inexact.column,
        reason: inexact.reason,
    }
}
