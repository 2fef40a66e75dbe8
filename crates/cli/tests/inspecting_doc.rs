//! What this proves: every SQL block of docs/operations.md runs against a database the demo
//! wrote (the blocks of the runtime's section, against a journal a runtime wrote), and returns
//! rows unless the block ends with `-- may be empty`; and that no block starts with a comment,
//! which sqlite3 would take for an option when the block is passed as an argument. So the page
//! cannot rot as the schema changes.
//! Method: run `durably demo --db <scratch>`; build a journal with runtime executions in each
//! parked state, messages and a workflow event (see `runtime_support`: a runtime sweeps the
//! demo's deliberately unswept execution, so it gets a file of its own); extract each ```sql
//! block of the page with the heading it is under, and run each of its statements with
//! rusqlite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod doc_blocks;
mod runtime_support;

use common::{assert_code, durably};
use rusqlite::fallible_iterator::FallibleIterator;

const PAGE: &str = include_str!("../../../docs/operations.md");

/// The page's ```sql blocks, each with whether it is under [`RUNTIME_SECTION`].
fn sql_blocks(page: &str) -> Vec<(bool, String)> {
    doc_blocks::fenced_blocks(page)
        .into_iter()
        .filter(|block| block.language == "sql")
        .map(|block| (block.heading == RUNTIME_SECTION, block.text))
        .collect()
}

/// Runs each statement of `block`, returning the rows of all of them.
fn run_block(conn: &rusqlite::Connection, block: &str) -> usize {
    let mut rows_total = 0;
    let mut batch = rusqlite::Batch::new(conn, block);
    while let Some(mut statement) = batch
        .next()
        .unwrap_or_else(|error| panic!("this block does not parse: {error}\n{block}"))
    {
        let columns = statement.column_count();
        let mut rows = statement.raw_query();
        while let Some(row) = rows
            .next()
            .unwrap_or_else(|error| panic!("{error}\n{block}"))
        {
            for index in 0..columns {
                let _: rusqlite::types::Value = row.get(index).unwrap();
            }
            rows_total += 1;
        }
    }
    rows_total
}

/// The heading of the page's section whose blocks run on the runtime's journal.
const RUNTIME_SECTION: &str = "### The runtime: queues, waits, messages";

/// A demo database, and a journal with a runtime's rows, in `dir`.
fn databases(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let demo = dir.join("demo.db");
    assert_code(&durably(&["demo", "--db", demo.to_str().unwrap()]), 0);
    let runtime = dir.join("runtime.db");
    runtime_support::add_runtime_rows(&runtime);
    (demo, runtime)
}

fn read_only(db: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

#[test]
fn every_sql_block_of_the_operations_page_runs_on_a_demo_database() {
    let dir = tempfile::tempdir().unwrap();
    let (demo, runtime) = databases(dir.path());
    let (demo, runtime) = (read_only(&demo), read_only(&runtime));
    let blocks = sql_blocks(PAGE);
    assert!(blocks.len() >= 25, "found only {} blocks", blocks.len());
    assert!(
        blocks.iter().filter(|(in_runtime, _)| *in_runtime).count() >= 8,
        "the runtime's section has lost its blocks"
    );
    for (in_runtime, block) in &blocks {
        let (conn, which) = if *in_runtime {
            (&runtime, "the runtime's journal")
        } else {
            (&demo, "the demo database")
        };
        // A block is pasted as `sqlite3 FILE "BLOCK"` too, where a first line starting with
        // `--` would be read as an option.
        assert!(
            !block.trim_start().starts_with("--"),
            "this block starts with a comment, which sqlite3 takes for an option when the \
             block is passed as an argument:\n{block}"
        );
        let rows = run_block(conn, block);
        if !block.contains("-- may be empty") {
            assert!(rows > 0, "this block returned no rows on {which}:\n{block}");
        }
    }
}

/// How many rows `view` has.
fn count(conn: &rusqlite::Connection, view: &str) -> i64 {
    conn.query_row(&format!("SELECT count(*) FROM {view}"), [], |row| {
        row.get(0)
    })
    .unwrap()
}

#[test]
fn every_view_has_readable_rows_on_a_demo_database() {
    let dir = tempfile::tempdir().unwrap();
    let (demo, runtime) = databases(dir.path());
    let (conn, runtime) = (read_only(&demo), read_only(&runtime));
    for view in [
        "execution_summary",
        "ambiguous_steps",
        "lock_holders",
        "recent_events",
        "fire_ledger",
    ] {
        assert!(
            count(&conn, view) > 0,
            "{view} is empty on the demo database"
        );
    }
    for view in [
        "queue_positions",
        "queue_load",
        "waiting_executions",
        "runtime_messages",
        "runtime_events",
        "runtime_children",
    ] {
        assert!(
            count(&runtime, view) > 0,
            "{view} is empty on the runtime's journal"
        );
    }
    // Sizes are bytes, not characters.
    let (bytes, preview): (i64, String) = runtime
        .query_row(
            "SELECT bytes, preview FROM runtime_events LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(usize::try_from(bytes).unwrap(), preview.len());
    // Timestamps as stored (RFC 3339 UTC), statuses as words, payloads as JSON.
    let (created, status, input): (String, String, String) = conn
        .query_row(
            "SELECT created_at, status, input FROM execution_summary WHERE kind = 'checkout' LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{created}");
    assert!(
        ["completed", "running", "interrupted"].contains(&status.as_str()),
        "{status}"
    );
    serde_json::from_str::<serde_json::Value>(&input).unwrap();
}
