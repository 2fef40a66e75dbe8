//! Rows in and out of one table, and the digest both sides of a copy compute over them.

use std::collections::{BTreeMap, BTreeSet};

use durably_db::time::{format_timestamp, parse_timestamp};
use durably_db::{Connection, Dialect, ToSql, Value};

use super::tables::Table;
use crate::error::Result;

/// The most rows one read of the source returns: the copy holds one batch in memory at a time.
pub const COPY_BATCH_ROWS_MAX: usize = 1_000;

/// One row's values, in [`Table::columns`] order.
pub(crate) type Row = Vec<Value<'static>>;

/// The base tables of the connection's database (its schema, on PostgreSQL).
pub(crate) fn table_names(conn: &Connection) -> Result<BTreeSet<String>> {
    let sql = match conn.dialect() {
        Dialect::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        }
        Dialect::Postgres => {
            "SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = current_schema()"
        }
    };
    let mut statement = conn.prepare(sql)?;
    let names = statement.query_map([], |row| row.get(0))?;
    Ok(names.collect::<durably_db::Result<_>>()?)
}

/// Each owner's schema version: the journal's (`PRAGMA user_version` on SQLite, its
/// `schema_versions` row on PostgreSQL) and every crate's `schema_versions` row.
pub(crate) fn versions(
    conn: &Connection,
    tables: &BTreeSet<String>,
) -> Result<BTreeMap<String, i64>> {
    let mut versions = BTreeMap::new();
    if conn.dialect() == Dialect::Sqlite {
        let journal: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        versions.insert("journal".to_owned(), journal);
    }
    if tables.contains("schema_versions") {
        let mut statement = conn.prepare("SELECT owner, version FROM schema_versions")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        for row in rows {
            let (owner, version): (String, i64) = row?;
            versions.insert(owner, version);
        }
    }
    Ok(versions)
}

/// Whether `table` holds any row.
pub(crate) fn has_rows(conn: &Connection, table: &Table) -> Result<bool> {
    let sql = format!("SELECT 1 FROM {} LIMIT 1", table.name);
    Ok(conn.prepare(&sql)?.exists([])?)
}

/// Up to [`COPY_BATCH_ROWS_MAX`] rows of `table` in key order, after the row `after` when given.
pub(crate) fn read_batch(
    conn: &Connection,
    table: &Table,
    after: Option<&Row>,
) -> Result<Vec<Row>> {
    let key: Vec<&Value<'static>> = match after {
        Some(row) => table
            .key_positions()
            .into_iter()
            .filter_map(|at| row.get(at))
            .collect(),
        None => Vec::new(),
    };
    let params: Vec<&dyn ToSql> = key.iter().map(|value| *value as &dyn ToSql).collect();
    let mut statement =
        conn.prepare_cached(&table.select_sql(after.is_some(), COPY_BATCH_ROWS_MAX))?;
    let mut rows = statement.query(params.as_slice())?;
    let mut batch = Vec::new();
    while let Some(row) = rows.next()? {
        let values = (0..table.columns.len())
            .map(|index| Ok(row.get_ref(index)?.into_owned()))
            .collect::<durably_db::Result<Row>>()?;
        batch.push(values);
    }
    Ok(batch)
}

/// Writes one row of `table`, values as read from the source.
pub(crate) fn insert(conn: &Connection, table: &Table, row: &Row) -> Result<()> {
    let params: Vec<&dyn ToSql> = row.iter().map(|value| value as &dyn ToSql).collect();
    conn.prepare_cached(&table.insert_sql())?
        .execute(params.as_slice())?;
    Ok(())
}

/// Moves `table`'s identity sequence past the copied ids, so the destination's next insert
/// takes a fresh one. SQLite's `INTEGER PRIMARY KEY` takes the largest id plus one by itself.
pub(crate) fn move_identity(conn: &Connection, table: &Table) -> Result<()> {
    if !table.identity || conn.dialect() != Dialect::Postgres {
        return Ok(());
    }
    // `setval` of a NULL (an empty table) is NULL and moves nothing.
    let sql = format!(
        "SELECT setval(pg_get_serial_sequence('{0}', 'id'), max(id)) FROM {0}",
        table.name
    );
    let _: Option<i64> = conn.query_row(&sql, [], |row| row.get(0))?;
    Ok(())
}

/// A timestamp that the destination would not hold as the same instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InexactTimestamp {
    /// The column holding it.
    pub(crate) column: &'static str,
    /// Why: not RFC 3339, or finer than a millisecond.
    pub(crate) reason: &'static str,
}

/// The rows of one table, counted and hashed (blake3) in key order over a canonical form:
/// each value tagged with its storage class, text and bytes length-prefixed, timestamps as the
/// instant in the journal's own format (`2026-11-29T13:48:28.123Z`). Both backends give the
/// same digest for the same rows, so equal digests mean the payload bytes arrived unchanged.
#[derive(Debug)]
pub(crate) struct Digest {
    hasher: blake3::Hasher,
    rows: u64,
}

impl Digest {
    pub(crate) fn new() -> Self {
        Self {
            hasher: blake3::Hasher::new(),
            rows: 0,
        }
    }

    /// Adds one row.
    pub(crate) fn add(&mut self, table: &Table, row: &Row) -> Result<(), InexactTimestamp> {
        for (index, value) in row.iter().enumerate() {
            match value {
                Value::Text(text) if table.is_timestamp(index) => {
                    let column = table.columns.get(index).copied().unwrap_or("?");
                    let canonical = canonical_timestamp(text)
                        .map_err(|reason| InexactTimestamp { column, reason })?;
                    self.text(b't', canonical.as_bytes());
                }
                Value::Null => {
                    self.hasher.update(b"n");
                }
                Value::Integer(number) => {
                    self.hasher.update(b"i");
                    self.hasher.update(&number.to_le_bytes());
                }
                Value::Real(number) => {
                    self.hasher.update(b"r");
                    self.hasher.update(&number.to_bits().to_le_bytes());
                }
                Value::Text(text) => self.text(b't', text.as_bytes()),
                Value::Blob(bytes) => self.text(b'b', bytes),
            }
        }
        self.rows += 1;
        Ok(())
    }

    fn text(&mut self, tag: u8, bytes: &[u8]) {
        self.hasher.update(&[tag]);
        self.hasher.update(&(bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    /// The rows added so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// The hash, as hex.
    pub(crate) fn hex(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }
}

/// A stored timestamp in the journal's format, or why it cannot cross unchanged: PostgreSQL's
/// `timestamptz` keeps microseconds, but both backends read timestamps back at milliseconds,
/// so a finer one would come back as another instant.
fn canonical_timestamp(text: &str) -> Result<String, &'static str> {
    let time = parse_timestamp(text).ok_or("it is not an RFC 3339 timestamp")?;
    if time.timestamp_subsec_nanos() % 1_000_000 != 0 {
        return Err("it is finer than a millisecond");
    }
    Ok(format_timestamp(time))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_digest_as_their_instant_and_finer_ones_are_refused() {
        assert_eq!(
            canonical_timestamp("2026-11-29T13:48:28Z").unwrap(),
            "2026-11-29T13:48:28.000Z"
        );
        assert_eq!(
            canonical_timestamp("2026-11-29T14:48:28.123+01:00").unwrap(),
            "2026-11-29T13:48:28.123Z"
        );
        assert!(canonical_timestamp("2026-11-29T13:48:28.1234Z").is_err());
        assert!(canonical_timestamp("yesterday").is_err());
    }
}
