//! Test helper for `tests/tests/faults.rs`: holds SQLite's write lock on a database from
//! another process.
//!
//! Usage: `write_lock_holder <database>`. Opens the database, runs `BEGIN IMMEDIATE`, prints
//! `locked`, and holds the transaction until a line (or the end) arrives on stdin; then rolls
//! back, prints `released` and exits.

use std::io::{BufRead, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let database = std::env::args()
        .nth(1)
        .ok_or("usage: write_lock_holder <database>")?;
    let conn = rusqlite::Connection::open(&database)?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "locked")?;
    out.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    conn.execute_batch("ROLLBACK")?;
    writeln!(out, "released")?;
    out.flush()?;
    Ok(())
}
