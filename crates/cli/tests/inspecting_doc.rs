//! What this proves: every SQL block of docs/inspecting.md runs against a database the demo
//! wrote, and returns rows unless the block says `-- may be empty`; so the page cannot rot as
//! the schema changes. Method: run `durably demo --db <scratch>`, extract each ```sql block of
//! the page, and run each of its statements with rusqlite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_code, durably};
use rusqlite::fallible_iterator::FallibleIterator;

const PAGE: &str = include_str!("../../../docs/inspecting.md");

fn sql_blocks(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```sql") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unterminated ```sql block");
    blocks
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

#[test]
fn every_sql_block_of_the_inspecting_page_runs_on_a_demo_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    assert_code(&durably(&["demo", "--db", db.to_str().unwrap()]), 0);
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let blocks = sql_blocks(PAGE);
    assert!(blocks.len() >= 15, "found only {} blocks", blocks.len());
    for block in &blocks {
        let rows = run_block(&conn, block);
        if !block.contains("-- may be empty") {
            assert!(
                rows > 0,
                "this block returned no rows on the demo database:\n{block}"
            );
        }
    }
}

#[test]
fn every_view_has_readable_rows_on_a_demo_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    assert_code(&durably(&["demo", "--db", db.to_str().unwrap()]), 0);
    let conn = rusqlite::Connection::open(&db).unwrap();
    for view in [
        "execution_summary",
        "ambiguous_steps",
        "lock_holders",
        "recent_events",
        "fire_ledger",
    ] {
        let count: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {view}"), [], |row| {
                row.get(0)
            })
            .unwrap();
        assert!(count > 0, "{view} is empty on the demo database");
    }
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
