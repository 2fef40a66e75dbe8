//! What these prove: `durably copy --from SOURCE --to DESTINATION` carries every row of a
//! journal into an empty database and prints a table of each table's counts (exit 0); it
//! refuses with exit 1 and a stable error code a source a live process holds
//! (`lock_held`, before the destination is even created) and a destination that already has
//! rows (`destination_not_empty`, leaving it as it was); a missing flag is a usage error
//! (exit 2). With the `postgres` feature, the same journal goes into a PostgreSQL schema and
//! `--json` reports equal counts on both sides.
//!
//! Method: the test process runs a runtime on a SQLite journal (see `runtime_support`); the
//! built binary runs as a child process; the source and a SQLite destination are dumped with
//! plain SQLite and compared table by table (all but `locks`, which a copy never carries).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod runtime_support;

use common::{assert_code, assert_stderr_says, durably, stderr, stdout};
use durably::Status;
use runtime_support::{RuntimeJournal, SERVED, dump};

/// `durably [--json] copy --from FROM --to TO`.
fn copy(from: &str, to: &str, json: bool) -> std::process::Output {
    let mut args = vec!["copy", "--from", from, "--to", to];
    if json {
        args.insert(0, "--json");
    }
    durably(&args)
}

/// The JSON error `output` printed on standard error.
fn error_json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stderr(output)).unwrap()
}

/// A journal with a finished, a parked and a stuck execution, and its runtime stopped.
fn journal_at_rest() -> RuntimeJournal {
    let mut journal = RuntimeJournal::new();
    let finished = journal.start(SERVED, r#"{"n": 1}"#, &[]);
    journal.open_gate();
    journal.wait_for(finished, Status::Completed);
    journal.inbox_with_messages(r#""yes""#, &[r#""later""#]);
    journal.stuck();
    journal.stop();
    journal
}

#[test]
fn a_copy_into_an_empty_file_carries_every_row_and_prints_the_counts() {
    let journal = journal_at_rest();
    let dir = tempfile::tempdir().unwrap();
    let destination = dir.path().join("copy.db");
    let output = copy(journal.db_arg(), destination.to_str().unwrap(), false);
    assert_code(&output, 0);
    let printed = stdout(&output);
    assert!(printed.contains("TABLE") && printed.contains("SOURCE") && printed.contains("COPIED"));
    assert!(
        printed.lines().any(|line| line.starts_with("messages ")),
        "{printed}"
    );

    let copied = dump(&destination);
    for (table, rows) in dump(&journal.db) {
        // Locks never travel; the destination's `schema_versions` has every owner this
        // build migrates (the scheduler's too), each at the source's version.
        // The schema differs by the scheduler's tables, which the destination has too.
        if table == "locks" || table == "schema_versions" || table.starts_with("sqlite_") {
            continue;
        }
        let found = copied.iter().find(|(name, _)| *name == table);
        assert_eq!(found.map(|(_, rows)| rows), Some(&rows), "table {table}");
    }

    let again = copy(journal.db_arg(), destination.to_str().unwrap(), true);
    assert_code(&again, 1);
    assert_eq!(error_json(&again)["code"], "destination_not_empty");
    assert_eq!(
        dump(&destination),
        copied,
        "a refused copy changed the destination"
    );
}

#[test]
fn a_copy_refuses_a_source_a_live_process_holds_and_creates_nothing() {
    let journal = RuntimeJournal::new();
    let held = journal.start(SERVED, "{}", &[]);
    journal.wait_for(held, Status::Running);
    let dir = tempfile::tempdir().unwrap();
    let destination = dir.path().join("copy.db");
    let output = copy(journal.db_arg(), destination.to_str().unwrap(), false);
    assert_stderr_says(&output, 1, &held.to_string());
    assert!(
        !destination.exists(),
        "the refused copy created its destination"
    );
    let output = copy(journal.db_arg(), destination.to_str().unwrap(), true);
    assert_eq!(error_json(&output)["code"], "lock_held");
}

#[test]
fn a_copy_without_a_destination_is_a_usage_error() {
    assert_code(&durably(&["copy", "--from", "journal.db"]), 2);
}

#[cfg(feature = "postgres")]
#[test]
fn a_copy_into_postgres_reports_equal_counts_on_both_sides() {
    use durably_testkit::{Backend, TestDb};

    let journal = journal_at_rest();
    let db = TestDb::on(Backend::Postgres);
    let output = copy(journal.db_arg(), &db.target(), true);
    assert_code(&output, 0);
    let report = common::json(&output);
    let tables = report["tables"].as_array().unwrap();
    let sqlite = rusqlite::Connection::open(&journal.db).unwrap();
    for table in tables {
        let name = table["table"].as_str().unwrap();
        let rows: i64 = sqlite
            .query_row(&format!("SELECT count(*) FROM {name}"), [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(table["source_rows"], rows, "{name}");
        assert_eq!(table["destination_rows"], rows, "{name}");
        assert_eq!(table["digest"].as_str().unwrap().len(), 64);
    }
    let messages = tables.iter().find(|table| table["table"] == "messages");
    assert_eq!(messages.unwrap()["source_rows"], 2, "{report}");
    // The destination's URL is printed with its password hidden (the test server has none).
    assert_eq!(report["to"], db.target());
}
