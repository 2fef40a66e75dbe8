//! What this proves: every SQL block of docs/operations.md runs against a database the demo
//! wrote (the blocks of the runtime's section, against a journal a runtime wrote), and returns
//! rows unless the block ends with `-- may be empty`; and that no block starts with a comment,
//! which sqlite3 would take for an option when the block is passed as an argument. So the page
//! cannot rot as the schema changes.
//! Method: run `durably demo --db <scratch>`; build a journal with runtime executions in each
//! parked state, messages and a workflow event (see `runtime_support`: a runtime sweeps the
//! demo's deliberately unswept execution, so it gets a file of its own); extract each ```sql
//! block of the page with the heading it is under, and run each of its statements with
//! rusqlite. With the `postgres` feature, the same two journals are copied into PostgreSQL
//! schemas (`durably copy`) and each block, or the ```psql block that follows it in its place,
//! is run by `psql` there, under the same rule about rows.

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

/// The statements each ```sql block stands for in `psql`: the ```psql block right after it,
/// or else the block itself, each with whether it is under [`RUNTIME_SECTION`].
#[cfg(feature = "postgres")]
fn psql_blocks(page: &str) -> Vec<(bool, String)> {
    let blocks = doc_blocks::fenced_blocks(page);
    let mut chosen = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let previous = index.checked_sub(1).and_then(|before| blocks.get(before));
        if block.language == "psql" {
            assert_eq!(
                previous.map(|before| before.language.as_str()),
                Some("sql"),
                "a psql block must follow the sql block it translates:\n{}",
                block.text
            );
        }
        if block.language != "sql" {
            continue;
        }
        let next = blocks.get(index + 1).filter(|next| next.language == "psql");
        let text = next.map_or(&block.text, |next| &next.text);
        chosen.push((block.heading == RUNTIME_SECTION, text.clone()));
    }
    chosen
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

#[cfg(feature = "postgres")]
#[test]
fn every_sql_block_of_the_operations_page_runs_in_psql_on_a_copy_in_postgres() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    use durably_testkit::{Backend, TestDb};

    let dir = tempfile::tempdir().unwrap();
    let (demo, runtime) = databases(dir.path());
    let (demo_pg, runtime_pg) = (TestDb::on(Backend::Postgres), TestDb::on(Backend::Postgres));
    for (file, db) in [(&demo, &demo_pg), (&runtime, &runtime_pg)] {
        let copied = durably(&[
            "copy",
            "--from",
            file.to_str().unwrap(),
            "--to",
            &db.target(),
        ]);
        assert_code(&copied, 0);
    }
    let blocks = psql_blocks(PAGE);
    assert_eq!(blocks.len(), sql_blocks(PAGE).len());
    for (in_runtime, block) in &blocks {
        let db = if *in_runtime { &runtime_pg } else { &demo_pg };
        let mut psql = Command::new("psql")
            .args([
                db.target().as_str(),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run psql (is it installed?): {error}"));
        psql.stdin
            .take()
            .unwrap()
            .write_all(block.as_bytes())
            .unwrap();
        let output = psql.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert!(
            output.status.success(),
            "psql refused this block: {stderr}\n{block}"
        );
        // A copy carries no lock rows (its ownership starts fresh), so the demo's dead holder
        // is not there to list.
        let may_be_empty = block.contains("-- may be empty") || block.contains("lock_holders");
        if !may_be_empty {
            assert!(
                !stdout.trim().is_empty(),
                "this block returned no rows in psql:\n{block}"
            );
        }
    }
}
