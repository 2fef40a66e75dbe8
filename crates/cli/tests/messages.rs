//! What these prove: every error, a usage error included, is printed one documented way (a
//! `durably: error:` line, then a `durably: hint:` line; with `--json`, one JSON object
//! `{code, message, hint, exit_code, ...}` on standard error), and names the real thing: an empty
//! `DURABLY_DB`, an age too long for `--since`, a path too long for SQLite (not "read-only"),
//! and a corruption found after the open, with the path and no claim that the file was left
//! untouched. `sweep`, `cancel` and `gc` refuse a journal that fails SQLite's integrity check,
//! changing nothing, unless given `--force`.
//!
//! Method: the built binary runs as a child process on journals built through the library and
//! damaged with plain SQLite; its standard error and exit code are checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{
    assert_code, assert_one_error, assert_stderr_says, durably, entries, fixture, stderr,
};
use rusqlite::Connection;

/// Command lines that fail, each with the exit code it must give, for a journal at `db`.
fn failing(db: &str, missing: &str) -> Vec<(Vec<String>, i32)> {
    let cases: [(&[&str], i32); 8] = [
        (&[], 2),
        (&["explode"], 2),
        (&["ls", "--frobnicate"], 2),
        (&["--db", db, "show", "not-an-id"], 2),
        (&["--db", db, "show"], 2),
        (&["--db", db, "ls", "--limit", "0"], 2),
        (&["ls"], 2),
        (&["--db", missing, "ls"], 1),
    ];
    cases
        .iter()
        .map(|(args, code)| (args.iter().map(|arg| (*arg).to_owned()).collect(), *code))
        .collect()
}

fn run(args: &[String]) -> Output {
    durably(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn usage_errors_and_failures_print_one_way_with_a_hint() {
    let fixture = fixture();
    let missing = fixture.dir.path().join("missing.db");
    for (args, code) in failing(fixture.db_arg(), missing.to_str().unwrap()) {
        let output = run(&args);
        assert_code(&output, code);
        assert_one_error(&output);
        assert_eq!(stderr(&output).lines().count(), 2, "no hint for {args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn with_json_every_error_is_one_object_on_standard_error() {
    let fixture = fixture();
    let missing = fixture.dir.path().join("missing.db");
    for (mut args, code) in failing(fixture.db_arg(), missing.to_str().unwrap()) {
        args.insert(0, "--json".to_owned());
        let output = run(&args);
        assert_code(&output, code);
        assert!(output.stdout.is_empty(), "{args:?}");
        let text = stderr(&output);
        assert_eq!(text.lines().count(), 1, "{text}");
        let error: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(error["code"].as_str().is_some(), "{text}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|message| !message.is_empty()),
            "{text}"
        );
        assert!(error["hint"].as_str().is_some(), "{text}");
        assert_eq!(error["exit_code"], code, "{text}");
    }
}

#[test]
fn an_empty_durably_db_is_named_as_such() {
    let run = |db: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_durably"));
        if let Some(db) = db {
            command.args(["--db", db]);
        }
        command.arg("ls").env("DURABLY_DB", "").output().unwrap()
    };
    let output = run(None);
    assert_stderr_says(&output, 2, "DURABLY_DB is set but empty");
    // `--db` wins over the environment, empty or not.
    let fixture = fixture();
    assert_code(&run(Some(fixture.db_arg())), 0);
}

#[test]
fn an_age_too_long_for_since_is_named_as_such() {
    let fixture = fixture();
    let output = durably(&["--db", fixture.db_arg(), "ls", "--since", "999999999999y"]);
    assert_stderr_says(&output, 2, "reaches back before the earliest time");
    assert_one_error(&output);
}

#[test]
fn a_path_too_long_for_sqlite_is_named_as_such() {
    let fixture = fixture();
    let mut deep = fixture.dir.path().to_path_buf();
    while deep.as_os_str().len() < 520 {
        deep.push("d".repeat(60));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let db = deep.join("journal.db");
    std::fs::copy(&fixture.db, &db).unwrap();
    for command in [&["ls"][..], &["sweep", "--force"][..]] {
        let mut args = vec!["--db", db.to_str().unwrap()];
        args.extend_from_slice(command);
        let output = durably(&args);
        assert_stderr_says(&output, 1, "bytes SQLite accepts for a database path");
        assert!(
            !stderr(&output).contains("read-only"),
            "{}",
            stderr(&output)
        );
    }
}

/// Overwrites the page type of the root page of `table` in the closed journal at `db`, so
/// that reading the table fails while opening the journal does not.
fn damage_table(db: &Path, table: &str) {
    let conn = Connection::open(db).unwrap();
    let (root, page_size): (i64, i64) = conn
        .query_row(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size())
             FROM sqlite_schema WHERE name = ?1",
            [table],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(db).unwrap();
    let offset = usize::try_from((root - 1) * page_size).unwrap();
    bytes[offset] = 0x00;
    std::fs::write(db, bytes).unwrap();
}

#[test]
fn a_corruption_found_after_the_open_names_the_path_and_claims_nothing_more() {
    let fixture = fixture();
    damage_table(&fixture.db, "steps");
    let shown = durably(&[
        "--db",
        fixture.db_arg(),
        "show",
        &fixture.ambiguous.to_string(),
    ]);
    assert_stderr_says(&shown, 1, "is not a usable SQLite database");
    assert_one_error(&shown);
    let text = stderr(&shown);
    let path = fixture.db.canonicalize().unwrap();
    assert!(text.contains(path.to_str().unwrap()), "{text}");
    assert!(!text.contains("untouched"), "{text}");
    assert!(text.contains("durably: hint: "), "no advice: {text}");
}

#[test]
fn sweep_cancel_and_gc_refuse_a_journal_that_fails_its_integrity_check_unless_forced() {
    let fixture = fixture();
    std::fs::remove_dir_all(fixture.dir.path().join("journal.db.durably-live")).unwrap();
    // The index no longer matches its table: reads work, the integrity check fails.
    Connection::open(&fixture.db)
        .unwrap()
        .execute_batch(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = 'CREATE INDEX executions_by_created ON executions (kind)'
             WHERE name = 'executions_by_created';",
        )
        .unwrap();
    let before = (
        entries(fixture.dir.path()),
        std::fs::read(&fixture.db).unwrap(),
    );
    let id = fixture.ambiguous.to_string();
    let commands: [&[&str]; 3] = [&["sweep"], &["cancel", &id], &["gc"]];
    for command in commands {
        let mut args = vec!["--db", fixture.db_arg()];
        args.extend_from_slice(command);
        let refused = durably(&args);
        assert_stderr_says(&refused, 1, "fails SQLite's integrity check");
        assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
        let after = (
            entries(fixture.dir.path()),
            std::fs::read(&fixture.db).unwrap(),
        );
        assert!(after == before, "{command:?} changed the journal");
    }
    for command in commands {
        let mut args = vec!["--db", fixture.db_arg()];
        args.extend_from_slice(command);
        args.push("--force");
        assert_code(&durably(&args), 0);
    }
}
